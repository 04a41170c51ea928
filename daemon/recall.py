"""The recall API: top-k chunks by similarity and salience, with attribution recorded.

Recording which chunks were in context (the attribution) is what lets a later
outcome credit them; the decision hash returned is what `pulse-emit outcome`
takes. Recall works while the daemon runs: it reads the saved index if it
matches the database, and otherwise searches the stored embeddings exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from daemon.runtime import Runtime, issue_hlc
from pulses.outcome import decision_hash
from store.index import HnswIndex, IndexUnusable
from zeitgeist.entries import AttributionEntry, encode_entry
from zeitgeist.hlc import wall_clock_ms


@dataclass(frozen=True)
class Hit:
    rowid: int
    content_hash: str
    title: str
    content: str
    similarity: float
    salience: float
    score: float


@dataclass(frozen=True)
class RecallResult:
    decision_hash: str | None
    hits: list[Hit]


def recall(
    rt: Runtime,
    query: str,
    *,
    top_k: int | None = None,
    decision_text: str | None = None,
    record: bool = True,
) -> RecallResult:
    """Rank candidates (vector k-NN plus full-text matches) by a weighted score, record attribution."""
    cfg = rt.config.recall
    top_k = top_k or cfg.top_k
    if not query.strip():
        raise ValueError("the recall query is empty")
    vector = rt.embedder.embed_one(query)
    labels = _vector_candidates(rt, vector, cfg.candidates)
    labels |= set(rt.db.search_text(query, cfg.candidates))
    observations = rt.db.observations(sorted(labels))
    stored = rt.db.embeddings_of(sorted(labels))
    hits: list[Hit] = []
    for rowid, obs in observations.items():
        if obs.deleted_at is not None:
            continue
        similarity = float(np.dot(stored[rowid], vector)) if rowid in stored else 0.0
        score = cfg.similarity_weight * similarity + cfg.salience_weight * obs.salience
        hits.append(
            Hit(rowid, obs.content_hash, obs.title, obs.content, similarity, obs.salience, score)
        )
    hits.sort(key=lambda h: (-h.score, h.rowid))
    hits = hits[:top_k]
    if not record or not hits:
        return RecallResult(None, hits)
    return RecallResult(_record_attribution(rt, hits, decision_text or query), hits)


def _vector_candidates(rt: Runtime, vector: npt.NDArray[np.float32], n: int) -> set[int]:
    index = _saved_index(rt)
    if index is not None:
        labels, _ = index.knn_many(vector[None, :], n)
        return {int(x) for x in labels[0]}
    live, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
    if len(live) == 0:
        return set()
    order = np.argsort(-(vectors @ vector), kind="stable")[:n]
    return {int(live[i]) for i in order}


def _saved_index(rt: Runtime) -> HnswIndex | None:
    """The daemon's saved index, if it reflects the database as it is now."""
    try:
        index = HnswIndex.load(rt.config.index_path, rt.embedder.dim, rt.embedder.index_version)
    except IndexUnusable:
        return None
    return index if index.stamp == rt.db.change_stamp() else None


def _record_attribution(rt: Runtime, hits: list[Hit], decision_text: str) -> str:
    db = rt.db
    chunks = sorted(h.content_hash for h in hits)
    now = wall_clock_ms()
    with db.transaction():
        hlc = issue_hlc(db)
        digest = decision_hash(rt.peer_id, hlc, chunks, decision_text)
        db.record_attribution(
            digest, chunks, peer=rt.peer_id, hlc=hlc, ts_ms=now, decision_text=decision_text
        )
        entry = AttributionEntry(
            hlc=hlc,
            origin=rt.peer_id,
            decision_hash=digest,
            chunk_hashes=tuple(chunks),
            decision_text=decision_text,
        )
        db.outbox_add(entry.id, entry.KIND, hlc, encode_entry(entry), now_ms=now, applied=True)
        db.bump_access([h.rowid for h in hits], now_ms=now)
    return digest
