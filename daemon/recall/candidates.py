"""Recall's candidates: what every retriever returns for a query, in columns.

Four retrievers: the HNSW index (live chunks; under a narrow filter an exact search of
the matching chunks), learned keys (daemon.recall.retrieval_keys), full text (BM25 over content
and over learned words, both tiers) and the cold tier's search (daemon.recall.cold_search:
exact while the tier is small, else the index's cold labels). Every candidate is then
re-scored exactly from its stored embedding (beyond what recall holds in memory, by the
cosine the index's search measured against its copy of it), and carries what ranking
multiplies by (salience, confidence, size) when a bound needs them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.recall.learned_ranking import cold_factor, fusion_weights, intrinsic_strength
from dreamcycle.daemon.recall.retrieval_keys import KeyUse, has_keys, key_scores_of
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.ranking import (
    NEUTRAL_CONFIDENCE,
    NEUTRAL_SALIENCE,
    CandidateColumns,
    Measured,
    RankingWeights,
    best_labels,
    lexical_ranks,
)
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import read_paths
from dreamcycle.store.database import tier_stamp
from dreamcycle.store.filtered_search import nearest_in_filter
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.lexical import LEARNED_COLUMN, search_lexical


@dataclass(frozen=True)
class WordMatches:
    """The full-text retrievers' lists, best first: a chunk's own words, and the words of
    the questions it learned (every match; ranking keeps those of usable keys)."""

    content: list[int]
    learned: list[int]


def search_words(rt: Runtime, query: str) -> WordMatches:
    """Both full-text searches of a query; they need no embedding, so they can run while
    the query is embedded."""
    pool = rt.config.recall.candidates
    content = search_lexical(rt.db, query, pool, cold=None)
    # Learned words count only through a usable key: with no key stored, none can.
    learned = (
        search_lexical(rt.db, query, pool, cold=None, column=LEARNED_COLUMN) if has_keys(rt) else []
    )
    return WordMatches(content, learned)


@dataclass(frozen=True)
class CandidatePool:
    """Every candidate of one query as ranking sees it, and the weights to rank it by."""

    columns: CandidateColumns
    weights: RankingWeights
    key_scores: dict[int, float]
    learned_ranks: dict[int, int]


def candidate_pool(
    rt: Runtime,
    query: str,
    vector: Vector,
    *,
    index: HnswIndex | None = None,
    exclude: frozenset[int] = frozenset(),
    assume_cold: frozenset[int] = frozenset(),
    allowed: frozenset[int] | None = None,
    words: WordMatches | None = None,
    min_confidence: float = 0.0,
    keys: KeyUse = KeyUse.GATED,
    with_lengths: bool = False,
) -> CandidatePool | None:
    """Every retriever's candidates for one query, in columns (None: there are none).

    The arguments are rank_query's; `with_lengths` reads the candidates' lengths even when
    no learned prior needs them (learning judges one)."""
    cfg = rt.config.recall
    db = rt.db
    pool = cfg.candidates
    # One read of the database's state serves the index check and both caches.
    stamp = db.change_stamp()
    tiers = tier_sets_at(rt, stamp)
    # Without one of its own (a one-shot command), the daemon's saved index, loaded once.
    index = index if index is not None else rt.saved_index(stamp)
    # What the cold tier's search reads of the database is read now, in this snapshot.
    cold_query = recall_state(rt).cold_search.start(rt, stamp, tiers.cold, vector, pool, index)
    if cold_query.answered is None and allowed is None and index is not None:
        # Both tiers from one search of the graph, which either alone would widen as far.
        live_found, cold_found_in_index = index.knn_tiers(vector[None, :], pool, cold_query.width)
        nearest = Measured(live_found[0][0], 1.0 - live_found[1][0].astype(np.float64))
        cold_found = cold_query.finish(cold_found_in_index)
    else:
        nearest = _vector_candidates(rt, vector, pool, index, allowed)
        cold_found = cold_query.finish()
    labels = set(nearest.labels.tolist())
    key_scores = key_scores_of(rt, vector, stamp, keys)
    labels.update(_best(key_scores, pool))
    found = words if words is not None else search_words(rt, query)
    lexical = found.content
    labels.update(lexical)
    # The words of a learned question count only where the question itself is close to
    # the query (a usable key): otherwise one question's words would pull its chunk
    # into every query that shares a word with it.
    learned = [label for label in found.learned if label in key_scores]
    labels.update(cold_found.labels.tolist())
    labels -= exclude
    if allowed is not None:
        labels &= allowed
    labels -= tiers.tombstoned
    if not labels:
        return None
    weights = _weights(rt)
    candidates = sorted(labels)
    cosines = _cosines(rt, candidates, vector, index, (nearest, cold_found))
    # With every bound at zero salience, confidence and size change no score: they are
    # then read for the hits alone.
    lengths = None
    if (
        weights.salience_bound > 0
        or weights.confidence_bound > 0
        or weights.intrinsic_strength != 0
        or min_confidence > 0
        or with_lengths
    ):
        saliences, confidences, lengths = read_paths.candidate_numbers(db, candidates)
    else:
        saliences = np.full(len(candidates), NEUTRAL_SALIENCE)
        confidences = np.full(len(candidates), NEUTRAL_CONFIDENCE)
    label_array = np.array(candidates, dtype=np.int64)
    if min_confidence > 0:
        keep = confidences >= min_confidence
        label_array, cosines = label_array[keep], cosines[keep]
        saliences, confidences = saliences[keep], confidences[keep]
        lengths = None if lengths is None else lengths[keep]
        candidates = label_array.tolist()
        if not candidates:
            return None
    ranks = lexical_ranks([label for label in lexical if label not in exclude])
    learned_ranks = lexical_ranks([label for label in learned if label not in exclude])
    columns = CandidateColumns(
        labels=label_array,
        cosines=cosines,
        saliences=saliences,
        lexical_ranks=_by_candidate(ranks, candidates, 0, np.int64),
        key_similarities=_by_candidate(key_scores, candidates, np.nan, np.float64),
        cold=_cold_mask(tiers, assume_cold, label_array),
        learned_ranks=_by_candidate(learned_ranks, candidates, 0, np.int64),
        confidences=confidences,
        lengths=lengths,
    )
    return CandidatePool(columns, weights, key_scores, learned_ranks)


def _cold_mask(
    tiers: read_paths.TierSets, assume_cold: frozenset[int], labels: npt.NDArray[np.int64]
) -> npt.NDArray[np.bool_]:
    """Which candidates rank as cold: those in the cold tier, and those assumed to be."""
    cold = tiers.cold_among(labels)
    if assume_cold:
        cold |= np.array([label in assume_cold for label in labels.tolist()], dtype=np.bool_)
    return cold


def _by_candidate(
    values: Mapping[int, float] | Mapping[int, int],
    candidates: list[int],
    missing: float,
    dtype: type[np.int64] | type[np.float64],
) -> npt.NDArray[Any]:
    """Each candidate's value, `missing` where it has none (for a vector alone, the word
    lists are empty: no lookups then)."""
    if not values:
        return np.full(len(candidates), missing, dtype=dtype)
    return np.array([values.get(c, missing) for c in candidates], dtype=dtype)


def _weights(rt: Runtime) -> RankingWeights:
    """The configured ranking weights with what recall learned on this store: the
    vector/word split, the strength of the prior over sizes, the weight of the cold tier."""
    vector_weight, lexical_weight = fusion_weights(rt.db, rt.config)
    return replace(
        rt.config.recall.weights(),
        vector_weight=vector_weight,
        lexical_weight=lexical_weight,
        intrinsic_strength=intrinsic_strength(rt.db, rt.config),
        cold_factor=cold_factor(rt.db, rt.config),
    )


def tier_sets_at(rt: Runtime, stamp: str) -> read_paths.TierSets:
    """Tombstoned and cold chunks, read once per database state `stamp`."""
    if read_paths.in_write_transaction(rt.db):
        return read_paths.tier_sets(rt.db)
    tiers_at = tier_stamp(stamp)
    cache = recall_state(rt).cache
    cached: read_paths.TierSets | None = cache.get("tiers", tiers_at)
    if cached is None:
        cached = cache.put("tiers", tiers_at, read_paths.tier_sets(rt.db))
    return cached


def _cosines(
    rt: Runtime,
    rowids: list[int],
    vector: Vector,
    index: HnswIndex | None,
    measured: tuple[Measured, ...],
) -> npt.NDArray[np.float64]:
    """The exact cosine of `vector` to each chunk's stored embedding; -1 without one.

    Those recall does not hold in memory take the cosine a vector retriever's search
    measured for them (the index's copy of the vector, live or cold, within 1e-7 of the
    database's), and the rest come from `index` where it holds them
    live: asking the index for a vector builds it one Python float at a time, which at a
    million chunks costs more than the search itself.

    np.vecdot runs the dot kernel of np.dot once per row, so each cosine is the one a
    loop of np.dot gives to the last bit; a matrix product would sum in another order.
    """
    stored = recall_state(rt).stored_vectors
    cosines = np.full(len(rowids), -1.0, dtype=np.float64)
    ids = np.asarray(rowids, dtype=np.int64)
    searched = np.zeros(len(ids), dtype=np.bool_)
    sources = [found for found in measured if len(found.cosines)]
    unheld = stored.unheld(ids) if sources else None
    if unheld is not None:
        for found in sources:
            order = np.argsort(found.labels)
            at = np.searchsorted(found.labels, ids, sorter=order).clip(max=len(order) - 1)
            taken = unheld & ~searched & (found.labels[order[at]] == ids)
            cosines[taken] = found.cosines[order[at[taken]]]
            searched |= taken
    rest = np.flatnonzero(~searched)
    matrix, present = stored.gather(rt.db, ids[rest], rt.embedder.index_version, index=index)
    if len(matrix):
        cosines[rest[present]] = np.vecdot(matrix, vector)
    return cosines


def _best(scores: dict[int, float], n: int) -> list[int]:
    return [label for label, _ in sorted(scores.items(), key=lambda kv: (-kv[1], kv[0]))[:n]]


def _nearest(
    labels: npt.NDArray[np.int64], vectors: npt.NDArray[np.float32], vector: Vector, n: int
) -> list[int]:
    """The `n` labels whose vectors are closest to `vector`, by exact cosine (ties to the
    lower label)."""
    return best_labels(labels, vectors @ vector, n) if len(labels) else []


def _vector_candidates(
    rt: Runtime,
    vector: Vector,
    n: int,
    index: HnswIndex | None,
    allowed: frozenset[int] | None = None,
) -> Measured:
    if index is None:
        live, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
        if allowed is not None:
            keep = np.isin(live, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            live, vectors = live[keep], vectors[keep]
        return Measured.unmeasured(_nearest(live, vectors, vector, n))
    if allowed is not None and (
        len(allowed) ** 2 <= rt.config.recall.exact_filter_scale * index.live_count
    ):
        return Measured.unmeasured(
            nearest_in_filter(rt.db, recall_state(rt).stored_vectors, index, vector, n, allowed)
        )
    labels, distances = index.knn_many(vector[None, :], n, allowed=allowed)
    if index.index_version != rt.embedder.index_version:
        return Measured.unmeasured(labels[0].tolist())  # not cosines to this model's vectors
    # Cosine distance is 1 - cosine.
    return Measured(labels[0], 1.0 - distances[0].astype(np.float64))
