"""The recall API: hybrid retrieval, bounded salience, attribution recorded.

Candidates come from four retrievers: the HNSW index (live chunks), learned
keys (queries that chunks were credited for), full text (BM25 over content and
learned words, both tiers) and an exact search of the cold tier. Every
candidate is re-scored exactly from stored embeddings and ranked by
pulses.ranking: relevance first, salience and the cold tier as bounded factors.

Recording which chunks were in context (the attribution, in rank order, with
the query and its embedding) is what lets a later outcome credit them; the
decision hash returned is what `pulse-emit outcome` takes. Recall works while
the daemon runs: it uses the saved index if it matches the database, and
otherwise searches the stored embeddings exactly.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.learned_ranking import fusion_weights
from dreamcycle.daemon.recall_keys import KeyUse, has_keys, key_scores_of
from dreamcycle.daemon.runtime import Runtime, issue_hlc
from dreamcycle.pulses.outcome import decision_hash
from dreamcycle.pulses.pulse import check_text
from dreamcycle.pulses.ranking import (
    NEUTRAL_CONFIDENCE,
    NEUTRAL_SALIENCE,
    CandidateColumns,
    Ranked,
    RankingWeights,
    best_labels,
    lexical_ranks,
    rank_columns,
)
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import keys as key_store
from dreamcycle.store import read_paths
from dreamcycle.store.database import Database, tier_stamp
from dreamcycle.store.filtered_search import nearest_in_filter
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.lexical import LEARNED_COLUMN, search_lexical
from dreamcycle.zeitgeist.entries import AttributionEntry, encode_entry


@dataclass(frozen=True)
class Hit:
    rowid: int
    content_hash: str
    title: str
    content: str
    similarity: float
    salience: float
    score: float
    relevance: float = 0.0
    cold: bool = False
    #: The ranking's inputs, for explaining it: 1-based ranks in the fused lists (None:
    #: not in that list) and the best usable learned key's cosine.
    vector_rank: int = 0
    lexical_rank: int | None = None
    learned_rank: int | None = None
    key_similarity: float | None = None
    #: How sure the store is that the memory is accurate, and how resistant it is to change.
    confidence: float = 1.0
    stability: float = 0.5


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
    index: HnswIndex | None = None,
    min_confidence: float = 0.0,
    session_id: str | None = None,
) -> RecallResult:
    """The top-k chunks for `query`; with `record`, the attribution is stored and queued.

    `index` is the live index when the caller holds one (the daemon); otherwise
    the saved index is used if current, else an exact search. Chunks less certain than
    `min_confidence` are never ranked. `session_id` names the agent session asking, so
    what the session does next can credit what it recalled (daemon.implicit_credit).
    """
    cfg = rt.config.recall
    top_k = top_k or cfg.top_k
    if not query.strip():
        raise ValueError("the recall query is empty")
    check_text("the recall query", query)
    if decision_text is not None:
        check_text("the decision's text", decision_text)
    vector = rt.embedder.embed_one(query)
    hits = rank_query(rt, query, vector, top_k, index=index, min_confidence=min_confidence)
    if not record or not hits:
        return RecallResult(None, hits)
    digest = record_attribution(
        rt, hits, decision_text or query, query, vector, session_id=session_id
    )
    return RecallResult(digest, hits)


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


def rank_query(
    rt: Runtime,
    query: str,
    vector: Vector,
    top_k: int,
    *,
    index: HnswIndex | None = None,
    exclude: frozenset[int] = frozenset(),
    assume_cold: frozenset[int] = frozenset(),
    allowed: frozenset[int] | None = None,
    words: WordMatches | None = None,
    min_confidence: float = 0.0,
    keys: KeyUse = KeyUse.GATED,
) -> list[Hit]:
    """Rank every retriever's candidates for one query (no attribution).

    `exclude` removes chunks from consideration; `assume_cold` ranks live chunks as
    if they were cold already (the prune gate asks what a sweep would lose);
    `allowed` (a filter's matches) keeps only those chunks, and the vector retriever
    then searches among them alone. `words` is `search_words(rt, query)` when the
    caller ran it already (while the query was being embedded), in the same snapshot.
    Candidates less certain than `min_confidence` are dropped before ranking. `keys` says
    which learned keys count (learning ranks with all and with none to judge them).
    """
    cfg = rt.config.recall
    db = rt.db
    pool = cfg.candidates
    # One read of the database's state serves the index check and both caches.
    stamp = db.change_stamp()
    tiers = _tier_sets(rt, stamp)
    # The cold tier is searched (on a helper thread, in the API) while this one searches
    # the live tier.
    cold_candidates = rt.cold_search.begin(rt, stamp, tiers.cold, vector, pool)
    labels = set(_vector_candidates(rt, vector, pool, index, stamp, allowed))
    key_scores = key_scores_of(rt, vector, stamp, keys)
    labels.update(_best(key_scores, pool))
    found = words if words is not None else search_words(rt, query)
    lexical = found.content
    labels.update(lexical)
    # The words of a learned question count only where the question itself is close to
    # the query (a usable key): otherwise one question's words would pull its chunk
    # into every query that shares a word with it.
    learned = [label for label in found.learned if label in key_scores]
    labels.update(cold_candidates())
    labels -= exclude
    if allowed is not None:
        labels &= allowed
    labels -= tiers.tombstoned
    if not labels:
        return []
    weights = _weights(rt)
    candidates = sorted(labels)
    cosines = _cosines(rt, candidates, vector)
    # With both bounds at zero salience and confidence multiply every score by exactly 1:
    # they are then read for the hits alone.
    if weights.salience_bound > 0 or weights.confidence_bound > 0 or min_confidence > 0:
        saliences, confidences = read_paths.candidate_numbers(db, candidates)
    else:
        saliences = np.full(len(candidates), NEUTRAL_SALIENCE)
        confidences = np.full(len(candidates), NEUTRAL_CONFIDENCE)
    label_array = np.array(candidates, dtype=np.int64)
    if min_confidence > 0:
        keep = confidences >= min_confidence
        label_array, cosines = label_array[keep], cosines[keep]
        saliences, confidences = saliences[keep], confidences[keep]
        candidates = label_array.tolist()
        if not candidates:
            return []
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
    )
    ranked: list[Ranked] = rank_columns(columns, weights, top_k)
    shown = read_paths.hit_rows(db, [r.label for r in ranked])
    return [
        Hit(
            rowid=r.label,
            content_hash=row.content_hash,
            title=row.title,
            content=row.content,
            similarity=r.similarity,
            salience=row.salience,
            score=r.score,
            relevance=r.relevance,
            cold=r.cold,
            vector_rank=r.vector_rank,
            lexical_rank=r.lexical_rank,
            learned_rank=learned_ranks.get(r.label),
            key_similarity=key_scores.get(r.label),
            confidence=row.confidence,
            stability=row.stability,
        )
        for r in ranked
        if (row := shown.get(r.label)) is not None
    ]


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
    """The configured ranking weights with the vector/word split in use now."""
    vector_weight, lexical_weight = fusion_weights(rt.db, rt.config)
    return replace(
        rt.config.recall.weights(), vector_weight=vector_weight, lexical_weight=lexical_weight
    )


def cached_state(db: Database) -> str:
    """The database's state as the caches a recall fills are keyed (tier sets, the cold
    tier's embeddings, learned keys): while it is the same, a recall reads none of them
    again."""
    stamp = db.change_stamp()
    return f"{stamp}/{key_store.keys_stamp(db, stamp)}"


def _tier_sets(rt: Runtime, stamp: str) -> read_paths.TierSets:
    """Tombstoned and cold chunks, read once per database state `stamp`."""
    if read_paths.in_write_transaction(rt.db):
        return read_paths.tier_sets(rt.db)
    tiers_at = tier_stamp(stamp)
    cached: read_paths.TierSets | None = rt.recall_cache.get("tiers", tiers_at)
    if cached is None:
        cached = rt.recall_cache.put("tiers", tiers_at, read_paths.tier_sets(rt.db))
    return cached


def _cosines(rt: Runtime, rowids: list[int], vector: Vector) -> npt.NDArray[np.float64]:
    """The exact cosine of `vector` to each chunk's stored embedding; -1 without one.

    np.vecdot runs the dot kernel of np.dot once per row, so each cosine is the one a
    loop of np.dot gives to the last bit; a matrix product would sum in another order.
    """
    matrix, present = rt.stored_vectors.gather(rt.db, rowids, rt.embedder.index_version)
    cosines = np.full(len(rowids), -1.0, dtype=np.float64)
    if len(matrix):
        cosines[present] = np.vecdot(matrix, vector)
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
    stamp: str,
    allowed: frozenset[int] | None = None,
) -> list[int]:
    index = index if index is not None else rt.saved_index(stamp)
    if index is None:
        live, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
        if allowed is not None:
            keep = np.isin(live, np.fromiter(allowed, dtype=np.int64, count=len(allowed)))
            live, vectors = live[keep], vectors[keep]
        return _nearest(live, vectors, vector, n)
    if allowed is not None and (
        len(allowed) ** 2 <= rt.config.recall.exact_filter_scale * index.live_count
    ):
        return nearest_in_filter(rt.db, rt.stored_vectors, index, vector, n, allowed)
    labels, _ = index.knn_many(vector[None, :], n, allowed=allowed)
    found: list[int] = labels[0].tolist()
    return found


def record_attribution(
    rt: Runtime,
    hits: list[Hit],
    decision_text: str,
    query: str,
    vector: Vector,
    *,
    session_id: str | None = None,
) -> str:
    """Store which chunks were in context (in rank order) and queue the attribution entry;
    returns the decision hash an outcome names."""
    db = rt.db
    ranked = [h.content_hash for h in hits]
    chunks = sorted(ranked)
    now = rt.clock.now_ms()
    with db.transaction():
        hlc = issue_hlc(db, rt.clock.now_ms)
        digest = decision_hash(rt.peer_id, hlc, chunks, decision_text)
        db.record_attribution(
            digest,
            chunks,
            peer=rt.peer_id,
            hlc=hlc,
            ts_ms=now,
            decision_text=decision_text,
            ranked=ranked,
            query_text=query,
            query_embedding=vector,
            session_id=session_id,
        )
        entry = AttributionEntry(
            hlc=hlc,
            origin=rt.peer_id,
            decision_hash=digest,
            chunk_hashes=tuple(chunks),
            # The question is the agent's own words: peers get it only where key texts
            # are shared too (the decision hash is never recomputed from it remotely).
            decision_text=decision_text if rt.config.learning.share_key_text else "",
        )
        db.outbox_add(entry.id, entry.KIND, hlc, encode_entry(entry), now_ms=now, applied=True)
        db.bump_access([h.rowid for h in hits], now_ms=now)
    return digest
