"""Recall ranking the straightforward way, kept to check the fast path against.

Every candidate's whole row and embedding are read back one by one, the vector
retriever is hnswlib's own (with its filter for a wide `allowed`; a narrow one's live
chunks are compared one by one), and both full-text searches always run. It must rank exactly as daemon.recall.retrieve.rank_query does.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from dreamcycle.daemon.recall.candidates import _best, _nearest
from dreamcycle.daemon.recall.learned_ranking import fusion_weights
from dreamcycle.daemon.recall.retrieval_keys import key_scores_of
from dreamcycle.daemon.recall.retrieve import Hit
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.ranking import Candidate, lexical_ranks, rank_candidates
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store.embeddings import blob_to_vector
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.lexical import LEARNED_COLUMN, search_lexical


def reference_rank_query(
    rt: Runtime,
    query: str,
    vector: Vector,
    top_k: int,
    *,
    index: HnswIndex | None,
    exclude: frozenset[int] = frozenset(),
    assume_cold: frozenset[int] = frozenset(),
    allowed: frozenset[int] | None = None,
) -> list[Hit]:
    cfg = rt.config.recall
    db = rt.db
    pool = cfg.candidates
    stamp = db.change_stamp()
    if index is None:
        live, vectors, _ = db.embeddings(rt.embedder.index_version, rt.embedder.dim)
        if allowed is not None:
            keep = np.isin(live, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            live, vectors = live[keep], vectors[keep]
        labels = set(_nearest(live, vectors, vector, pool))
    elif allowed is not None and len(allowed) ** 2 <= cfg.exact_filter_scale * index.live_count:
        labels = set(exact_top(rt, index, allowed, vector, pool))
    else:
        found, _ = index.knn_many(vector[None, :], pool, allowed=allowed)
        labels = {int(x) for x in found[0]}
    key_scores = key_scores_of(rt, vector, stamp)
    labels.update(_best(key_scores, pool))
    lexical = search_lexical(db, query, pool, cold=None)
    labels.update(lexical)
    learned = [
        label
        for label in search_lexical(db, query, pool, cold=None, column=LEARNED_COLUMN)
        if label in key_scores
    ]
    cold_labels, cold_vectors = recall_state(rt).cold_search.cold_vectors(
        rt, stamp
    )  # the exact search of the cold tier
    labels.update(_nearest(cold_labels, cold_vectors, vector, pool))
    labels -= exclude
    if allowed is not None:
        labels &= allowed
    if not labels:
        return []
    ordered = sorted(labels)
    observations = db.observations(ordered)
    # Another model's embedding (the database holds both kinds after a change of model)
    # cannot be compared with the query: the chunk has none to rank by.
    version = rt.embedder.index_version
    stored = {}
    for rowid in ordered:
        row = db.fetch_one(
            "SELECT embedding, index_version FROM observations WHERE id = ?", (rowid,)
        )
        if row is not None and row[0] is not None and row[1] == version:
            stored[rowid] = blob_to_vector(bytes(row[0]))
    ranks = lexical_ranks([label for label in lexical if label not in exclude])
    learned_ranks = lexical_ranks([label for label in learned if label not in exclude])
    candidates = {
        rowid: Candidate(
            label=rowid,
            cosine=float(np.dot(stored[rowid], vector)) if rowid in stored else -1.0,
            salience=obs.salience,
            lexical_rank=ranks.get(rowid),
            key_similarity=key_scores.get(rowid),
            learned_rank=learned_ranks.get(rowid),
            cold=obs.cold_at is not None or rowid in assume_cold,
            confidence=obs.confidence,
        )
        for rowid, obs in observations.items()
        if obs.deleted_at is None
    }
    vector_weight, lexical_weight = fusion_weights(db, rt.config)
    weights = replace(cfg.weights(), vector_weight=vector_weight, lexical_weight=lexical_weight)
    return [
        Hit(
            rowid=r.label,
            content_hash=observations[r.label].content_hash,
            title=observations[r.label].title,
            content=observations[r.label].content,
            similarity=r.similarity,
            salience=observations[r.label].salience,
            score=r.score,
            relevance=r.relevance,
            cold=r.cold,
            vector_rank=r.vector_rank,
            lexical_rank=r.lexical_rank,
            learned_rank=candidates[r.label].learned_rank,
            key_similarity=candidates[r.label].key_similarity,
            confidence=observations[r.label].confidence,
            stability=observations[r.label].stability,
        )
        for r in rank_candidates(candidates.values(), weights, top_k)
    ]


def exact_top(
    rt: Runtime, index: HnswIndex, allowed: frozenset[int], vector: Vector, n: int
) -> list[int]:
    """The n nearest of `allowed` that are live in `index`, by np.dot over embeddings
    read one by one (ties: lower rowid first)."""
    scored = []
    for rowid in sorted(allowed):
        if not index.is_live(rowid):
            continue
        row = rt.db.fetch_one("SELECT embedding FROM observations WHERE id = ?", (rowid,))
        stored = np.frombuffer(bytes(row[0]), dtype="<f4")
        scored.append((-float(np.dot(stored, vector)), rowid))
    return [rowid for _, rowid in sorted(scored)[:n]]
