"""Admission: how a stored chunk becomes part of this peer's memory.

A chunk is admitted when its embedding is stored, its initial salience journalled
(replay re-creates it from there), it is marked admitted and, if it is this
peer's own, an `assert` entry is queued to announce it. The dream cycle admits
what `ingest` stored; the API's `save` admits at once. Both go through
`record_admission` inside one transaction, and add the vectors to the live index
only after it commits: the index is derived state and must never hold a chunk
that a rollback took away.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.runtime import HLC_META_KEY, Peer
from dreamcycle.pulses.vectors import Vector, Vectors
from dreamcycle.store.database import Database, Observation, PendingChunk
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.timefmt import ms_from_iso
from dreamcycle.zeitgeist.entries import AssertEntry, encode_entry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock


def admission_vectors(
    embedder: Embedder, pending: Sequence[PendingChunk]
) -> tuple[Vectors, dict[int, Vectors]]:
    """(one vector per pending chunk, the vectors computed now by rowid).

    Chunks `ingest` already embedded under this model keep their vector; the rest
    are embedded in one batch (outside any transaction: embedding is slow).
    """
    version = embedder.index_version
    missing = [c for c in pending if c.embedding is None or c.index_version != version]
    fresh = dict(
        zip((c.rowid for c in missing), embedder.embed([c.text for c in missing]), strict=True)
    )
    vectors = np.stack(
        [
            fresh[c.rowid] if c.embedding is None or c.rowid in fresh else c.embedding
            for c in pending
        ]
    ).astype(np.float32)
    return vectors, fresh


def record_admission(
    peer: Peer,
    db: Database,
    pending: Sequence[PendingChunk],
    vectors: Vectors,
    fresh: dict[int, Vectors],
    now_ms: int,
) -> None:
    """Store new embeddings, journal, mark admitted and queue asserts (inside the caller's
    transaction on `db`, which may be another connection than the cycle's)."""
    embedder = peer.embedder
    if fresh:
        db.set_embeddings(
            list(fresh),
            np.stack(list(fresh.values())),
            model_id=embedder.model_id,
            index_version=embedder.index_version,
        )
    observations = db.observations([c.rowid for c in pending])
    for i, chunk in enumerate(pending):
        obs = observations[chunk.rowid]
        seq = db.journal(
            JournalKind.CHUNK, obs.content_hash, chunk_journal(chunk, obs.salience), now_ms=now_ms
        )
        db.mark_admitted(chunk.rowid, seq)
        if chunk.origin_peer in (None, peer.peer_id):
            entry = assert_entry(peer, obs, vectors[i])
            db.outbox_add(
                entry.id, entry.KIND, entry.hlc, encode_entry(entry), now_ms=now_ms, applied=True
            )
    persist_clock(db, peer.clock)


def assert_entry(peer: Peer, obs: Observation, vector: Vector) -> AssertEntry:
    return AssertEntry(
        hlc=peer.clock.now(),
        origin=peer.peer_id,
        content_hash=obs.content_hash,
        title=obs.title,
        content=obs.content,
        obs_type=obs.type,
        project=obs.project,
        scope="project",
        topic_key=obs.topic_key,
        session_id=None,
        tool_name=None,
        chunk_kind=obs.kind,
        pin_floor=obs.pin_floor,
        embedding=vector,
        model_id=peer.embedder.model_id,
        index_version=peer.embedder.index_version,
    )


def chunk_journal(chunk: PendingChunk, initial: float) -> dict[str, Any]:
    """What replay needs to re-create the chunk's salience state."""
    return {
        "rowid": chunk.rowid,
        "initial": initial,
        "pin_floor": chunk.pin_floor,
        "kind": chunk.kind,
        "decay_from_ms": ms_from_iso(chunk.decay_from),
    }


def persist_clock(db: Database, clock: HybridLogicalClock) -> None:
    """Keep the highest HLC issued, so a restart resumes above it (inside a transaction)."""
    current = int(db.get_meta(HLC_META_KEY) or "0")
    db.set_meta(HLC_META_KEY, str(max(current, clock.last)))
