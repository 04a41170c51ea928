"""Taking another peer's chunk into the local store, from its assert entry (phase 4).

A remote chunk is adopted only when this peer is configured to, under the same index
version, with a content hash that matches its content, and with an embedding that is what
this peer's own model makes of that chunk (a forged embedding would steer pulses): of the
text every peer embeds for a chunk, its title with its content (`embedding_text`).
"""

from __future__ import annotations

import logging
import time

import numpy as np

from dreamcycle.daemon.cycle import hostile
from dreamcycle.daemon.cycle.state import CycleState, EntryOutcome, EntryStatus
from dreamcycle.daemon.defaults import EMBEDDING_MATCH_MIN_COSINE
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.admission import chunk_journal
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store.database import NewObservation, embedding_text
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import AssertEntry

log = logging.getLogger("dreamcycle.cycle")


def adoption_problem(peer: Peer, entry: AssertEntry) -> EntryOutcome | None:
    """Why a remote assert is not adopted before its embedding is checked, if so."""
    if entry.origin == peer.peer_id:
        return EntryStatus.APPLIED, None
    if not peer.config.zeitgeist.adopt_remote_chunks:
        return EntryStatus.SKIPPED, "adopt_remote_chunks is off"
    if entry.index_version != peer.embedder.index_version:
        # Another model's vectors cannot be compared with this one's: not adopted at all.
        return EntryStatus.SKIPPED, f"index_version {entry.index_version} != local"
    if content_hash(entry.content) != entry.content_hash:
        return EntryStatus.REJECTED, "content_hash does not match the content"
    if entry.embedding.shape != (peer.embedder.dim,):
        return (
            EntryStatus.REJECTED,
            f"embedding shape {entry.embedding.shape} != ({peer.embedder.dim},)",
        )
    if peer.db.is_tombstoned_hash(entry.content_hash):
        return EntryStatus.SKIPPED, "tombstoned here"
    return None


def origin_text(entry: AssertEntry) -> str:
    """What the origin embedded for the chunk an assert carries, so what is compared."""
    return embedding_text(entry.title, entry.content)


def embed_adoptable(peer: Peer, st: CycleState) -> dict[str, Vector]:
    """Entry id -> this peer's embedding of the chunk, for every remote assert that may be
    adopted: one batch per cycle. A chunk already held needs none (nothing is adopted)."""
    db = peer.db
    wanted = [
        entry
        for entry in st.ordered
        if isinstance(entry, AssertEntry)
        and entry.id not in st.rejected
        and adoption_problem(peer, entry) is None
        and db.observation_by_hash(entry.content_hash) is None
    ]
    if not wanted:
        return {}
    started = time.perf_counter()
    vectors = peer.embedder.embed([origin_text(entry) for entry in wanted])
    metrics.PHASE_EVENTS.labels("reconsolidate", "asserts_embedded").inc(len(wanted))
    log.debug(
        "asserts embedded for comparison",
        extra={"asserts": len(wanted), "seconds": round(time.perf_counter() - started, 3)},
    )
    return {entry.id: vector for entry, vector in zip(wanted, vectors, strict=True)}


def embedding_mismatch(claimed: Vector, local: Vector) -> str | None:
    """Why an assert's embedding is not its chunk's under this model, if so."""
    norm = float(np.linalg.norm(claimed)) * float(np.linalg.norm(local))
    cosine = float(np.dot(claimed, local)) / norm if norm > 0 and np.isfinite(norm) else 0.0
    if cosine >= EMBEDDING_MATCH_MIN_COSINE:
        return None
    return (
        f"{hostile.EMBEDDING_MISMATCH}: cosine {cosine:.4f} to this peer's embedding of "
        f"the chunk, below {EMBEDDING_MATCH_MIN_COSINE}"
    )


def adopt(
    peer: Peer,
    st: CycleState,
    entry: AssertEntry,
    adopted: list[tuple[int, Vector]],
    local_vector: Vector | None,
) -> EntryOutcome:
    """Take a remote chunk into the local store, when this peer is configured to and its
    embedding is what this peer's model makes of the chunk."""
    problem = adoption_problem(peer, entry)
    if problem is not None:
        return problem
    db = peer.db
    if local_vector is None and db.observation_by_hash(entry.content_hash) is None:
        local_vector = peer.embedder.embed_one(origin_text(entry))  # not foreseen by the batch
    if local_vector is not None:
        mismatch = embedding_mismatch(np.asarray(entry.embedding, dtype=np.float32), local_vector)
        if mismatch is not None:
            hostile.count(hostile.EMBEDDING_MISMATCH)
            return EntryStatus.REJECTED, mismatch
    added = db.add_observations(
        [
            NewObservation(
                content=entry.content,
                title=entry.title,
                type=entry.obs_type,
                kind=entry.chunk_kind,
                project=entry.project,
                topic_key=entry.topic_key,
                pin_floor=entry.pin_floor,
                origin_peer=entry.origin,
            )
        ],
        now_ms=st.now_ms,
    )[0]
    if not added.created:
        return EntryStatus.APPLIED, "already held"
    vector = np.asarray(entry.embedding, dtype=np.float32)
    db.set_embeddings(
        [added.rowid], vector[None, :], model_id=entry.model_id, index_version=entry.index_version
    )
    chunk = db.pending_admission_of(added.rowid)
    held = db.observation(added.rowid)
    initial = held.salience if held is not None else 1.0
    db.mark_admitted(
        added.rowid,
        db.journal(
            JournalKind.CHUNK,
            entry.content_hash,
            chunk_journal(chunk, initial),
            now_ms=st.now_ms,
        ),
    )
    adopted.append((added.rowid, vector))
    # Later entries of this cycle (a pin, a supersede) may name the chunk already.
    peer.salience.refresh()
    return EntryStatus.APPLIED, None
