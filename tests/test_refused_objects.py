"""What a refused object costs a peer, and which refusals are not for good.

A segment or snapshot whose seal fails is refused from its seal and the digest of its
bytes, in one streaming pass that decodes no line: no entry of it is built, recorded or
observed, so a flood of forged entries costs counters, not rows or memory. A segment
refused only because its key was not trusted yet is read again once the keyring trusts
that key, within a bounded age and number.
"""

from __future__ import annotations

import gzip
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import SIGNING_KEYRING_FILE
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import Database
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import (
    SNAPSHOT_LIMITS,
    Entry,
    ReconsolidateEntry,
    TombstoneEntry,
    decode_segment,
    encode_segment,
    read_seal,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.object_keys import segment_key, snapshot_key
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import entry_status, peer, publish_signed, wall_clock_ms

__all__ = ["peer"]  # the fixture, shared with the robustness tests

T0_MS: Final = 1_700_000_000_000
#: Entries in the forged snapshot: enough that decoding it would show in traced memory.
FLOOD: Final = 20_000


def tombstones(origin: str, count: int, at_ms: int = T0_MS) -> list[Entry]:
    return [
        TombstoneEntry(
            hlc=hlc_from_ms(at_ms) + n,
            origin=origin,
            content_hash=f"{n:064x}",
            reason=f"forged {n}",
            collectable_after_ms=None,
            forget_pulse=None,
        )
        for n in range(count)
    ]


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(lambda seal: encode_segment(tombstones("b", 3), seal=seal), id="entries"),
        pytest.param(lambda seal: encode_segment([], seal=seal), id="empty"),
        pytest.param(
            lambda seal: gzip.compress(encode_segment_text(seal).rstrip(b"\n"), mtime=0),
            id="no-final-newline",
        ),
    ],
)
def test_the_seal_read_alone_is_the_one_decoding_finds(
    payload: Callable[[Callable[[str], object]], bytes],
) -> None:
    signer = Signer("b", generate_key())
    key = segment_key(hlc_from_ms(T0_MS), "b", 1)
    data = payload(lambda digest: signer.seal(key, digest))
    decoded, sealed = decode_segment(data), read_seal(data)
    assert decoded.seal is not None
    assert (sealed.seal, sealed.body_digest) == (decoded.seal, decoded.body_digest)
    assert sealed.entries == []


def encode_segment_text(seal: Callable[[str], object]) -> bytes:
    return gzip.decompress(encode_segment(tombstones("b", 2), seal=seal))  # type: ignore[arg-type]


def test_an_unsealed_segment_reads_as_unsealed() -> None:
    sealed = read_seal(encode_segment(tombstones("b", 3)))
    assert sealed.seal is None and sealed.entries == []


def test_an_unsigned_snapshot_is_refused_without_decoding_it(tmp_path: Path) -> None:
    """A new peer pays one streaming pass for a forged snapshot, not its decoding."""
    backend = DirectoryBackend(tmp_path / "zeitgeist")
    data = encode_segment(tombstones("mallory", FLOOD))
    backend.create(snapshot_key(hlc_from_ms(T0_MS), "mallory"), data)
    reader = Zeitgeist(
        backend,
        "a",
        HybridLogicalClock(lambda: T0_MS + 60_000),
        wall_ms=lambda: T0_MS + 60_000,
        verifier=Verifier(Keyring.of([]), strict=True),
    )

    def peak_of(work: Callable[[], object]) -> int:
        tracemalloc.start()
        try:
            work()
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    decoding = peak_of(lambda: decode_segment(data, SNAPSHOT_LIMITS))
    refusing = peak_of(lambda: reader.latest_snapshot())
    assert reader.latest_snapshot() is None
    # The baseline, in the same run: what decoding the same bytes holds at its peak.
    assert refusing * 10 < decoding, (refusing, decoding)


def seen_rows(peer: Peer) -> int:
    row = peer.db.conn.execute("SELECT count(*) FROM seen_entries").fetchone()
    assert row is not None
    return int(row[0])


def test_a_flood_of_unsigned_entries_costs_no_row(peer: Peer, tmp_path: Path) -> None:
    backend = DirectoryBackend(tmp_path / "zeitgeist")
    now_ms = wall_clock_ms()
    forged = tombstones("mallory", 2_000, now_ms)
    key = segment_key(hlc_from_ms(now_ms), "mallory", 1)
    backend.create(key, encode_segment(forged))
    seen_before = seen_rows(peer)
    run_cycle_blocking(peer)
    assert peer.db.segment_applied(key)
    assert seen_rows(peer) == seen_before
    assert peer.db.signers_awaited() == []  # unsigned is refused for good: nothing waits


def test_a_segment_of_a_key_trusted_later_is_read_again(peer: Peer, tmp_path: Path) -> None:
    carol = Signer("c", generate_key())
    chunk = peer.db.observation(3)
    assert chunk is not None
    entry = ReconsolidateEntry(
        hlc=HybridLogicalClock(wall_clock_ms).now(),
        origin="c",
        content_hash=chunk.content_hash,
        changes={"title": "published before it was trusted"},
    )
    key = publish_signed(tmp_path, carol, [entry])

    run_cycle_blocking(peer)
    assert peer.db.segment_applied(key) and not peer.db.entry_seen(entry.id)
    assert peer.db.signers_awaited() == [carol.key_id]
    held = peer.db.observation(3)
    assert held is not None and held.title == chunk.title

    run_cycle_blocking(peer)  # nothing changed: nothing is read again
    assert not peer.db.entry_seen(entry.id)

    trust_key(tmp_path / "a" / SIGNING_KEYRING_FILE, carol)
    run_cycle_blocking(peer)
    assert entry_status(peer, entry) == ("applied", None)
    held = peer.db.observation(3)
    assert held is not None and held.title == "published before it was trusted"
    assert peer.db.signers_awaited() == []


def test_segments_awaiting_a_key_are_bounded_in_age_and_number(tmp_path: Path) -> None:
    db = Database(tmp_path / "memory.db")
    try:
        with db.transaction():
            for n in range(10):
                key = segment_key(hlc_from_ms(T0_MS + n * 1_000), "c", n + 1)
                db.await_signer(
                    key,
                    signer_key_id="k1" if n % 2 else "k2",
                    segment_hlc=hlc_from_ms(T0_MS + n * 1_000),
                )
            db.bound_awaiting(oldest_hlc=hlc_from_ms(T0_MS + 2_000), most=5)
        left = [k for key_id in ("k1", "k2") for k in db.segments_awaiting(key_id, 100)]
        # The two dated before the bound went first, then the oldest beyond five.
        assert sorted(left) == sorted(
            segment_key(hlc_from_ms(T0_MS + n * 1_000), "c", n + 1) for n in range(5, 10)
        )
        assert db.segments_awaiting("k1", 2) == [
            segment_key(hlc_from_ms(T0_MS + n * 1_000), "c", n + 1) for n in (5, 7)
        ]
    finally:
        db.close()
