"""Adoption of another peer's chunks that carry a title, in-process.

Peer b stores chunks (one titled, one not) the way any peer does, and its cycle publishes
their `assert` entries, signed, to a directory zeitgeist; peer a, adopting remote chunks
and trusting b's key, runs its real phases on them with the real embedding model. A chunk
is embedded with its title, so a's check must embed the same text b did.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import pytest

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import CycleState, run_cycle_blocking
from dreamcycle.daemon.cycle._adopt import adopt
from dreamcycle.daemon.cycle.state import EntryStatus
from dreamcycle.daemon.defaults import EMBEDDING_MATCH_MIN_COSINE, SIGNING_KEYRING_FILE
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import init_key
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store.database import NewObservation
from dreamcycle.store.embeddings import blob_to_vector
from dreamcycle.zeitgeist.entries import AssertEntry, decode_entry
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import entry_status, open_peer, wall_clock_ms

ORIGIN: Final = "b"
TITLE: Final = "S3 retry policy"
TITLED: Final = "Retries of S3 writes back off exponentially, capped at twenty seconds."
UNTITLED: Final = "The deploy checklist is reviewed by two people before each release."


@dataclass
class Mesh:
    adopter: Peer
    origin: Peer
    #: The origin's asserts by content, as it published them.
    asserts: dict[str, AssertEntry]


def count(peer: Peer, sql: str) -> int:
    row = peer.db.conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def cosine(x: Vector, y: Vector) -> float:
    return float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y)))


@pytest.fixture
def mesh(tmp_path: Path) -> Iterator[Mesh]:
    """a (adopting, trusting b) and b, whose cycle published its two chunks' asserts."""
    adopter = open_peer(tmp_path, **{"zeitgeist.adopt_remote_chunks": True})
    origin_settings = {"peer.id": ORIGIN, "peer.data_dir": str(tmp_path / ORIGIN)}
    signer, _ = init_key(load_config(environ={}, overrides=origin_settings))
    trust_key(tmp_path / "a" / SIGNING_KEYRING_FILE, signer)
    origin = open_peer(tmp_path, **origin_settings)
    try:
        chunks = [NewObservation(content=TITLED, title=TITLE), NewObservation(content=UNTITLED)]
        ingest(origin.runtime, [chunks])
        run_cycle_blocking(origin)
        rows = origin.db.conn.execute("SELECT body FROM outbox WHERE kind = 'assert'").fetchall()
        decoded = [decode_entry(json.loads(str(body))) for (body,) in rows]
        asserts = {e.content: e for e in decoded if isinstance(e, AssertEntry)}
        assert set(asserts) == {TITLED, UNTITLED}
        published = "SELECT count(*) FROM segments_out WHERE status = 'published'"
        assert count(origin, published) >= 1
        yield Mesh(adopter, origin, asserts)
    finally:
        for peer in (origin, adopter):
            peer.close()
            peer.runtime.close()


def test_the_titled_chunk_is_embedded_with_its_title(mesh: Mesh) -> None:
    """What makes the tests below meaningful: the content alone would not match."""
    titled = mesh.asserts[TITLED]
    assert titled.title == TITLE
    alone = mesh.adopter.embedder.embed_one(TITLED)
    assert cosine(np.asarray(titled.embedding), alone) < EMBEDDING_MATCH_MIN_COSINE


def test_a_titled_chunk_asserted_by_another_peer_is_adopted(mesh: Mesh) -> None:
    a = mesh.adopter
    run_cycle_blocking(a)

    for content, entry in mesh.asserts.items():
        assert entry_status(a, entry) == ("applied", None), content
        row = a.db.conn.execute(
            "SELECT title, origin_peer, embedding, admitted_seq FROM observations "
            "WHERE content_hash = ?",
            (entry.content_hash,),
        ).fetchone()
        assert row is not None, content
        title, origin_peer, blob, admitted = row
        assert (title, origin_peer) == (entry.title, ORIGIN)
        assert admitted is not None
        assert np.array_equal(blob_to_vector(blob), np.asarray(entry.embedding, np.float32))
    assert count(a, "SELECT count(*) FROM seen_entries WHERE status = 'rejected'") == 0
    # Adopted into the live index, found by what it says.
    held = a.db.observation_by_hash(mesh.asserts[TITLED].content_hash)
    assert held is not None and a.index.is_live(held.rowid)


def test_an_assert_not_embedded_in_the_cycles_batch_is_checked_with_its_title(
    mesh: Mesh,
) -> None:
    """The path for an assert the cycle's one batch did not foresee embeds the same text."""
    a = mesh.adopter
    entry = mesh.asserts[TITLED]
    adopted: list[tuple[int, Vector]] = []
    with a.db.transaction():
        outcome = adopt(a, CycleState(now_ms=wall_clock_ms()), entry, adopted, None)
    assert outcome == (EntryStatus.APPLIED, None)
    assert len(adopted) == 1
