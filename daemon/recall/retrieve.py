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

from dataclasses import dataclass

from dreamcycle.daemon.recall.candidates import WordMatches, candidate_pool
from dreamcycle.daemon.recall.candidates import search_words as search_words
from dreamcycle.daemon.recall.retrieval_keys import KeyUse
from dreamcycle.daemon.runtime import Runtime, issue_hlc
from dreamcycle.pulses.constants import QUERY_MAX_CHARS
from dreamcycle.pulses.outcome import decision_hash
from dreamcycle.pulses.pulse import check_length, check_text
from dreamcycle.pulses.ranking import Ranked, rank_columns
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import read_paths
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import Database
from dreamcycle.store.index import HnswIndex
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
    what the session does next can credit what it recalled (daemon.memory.implicit_credit).
    """
    cfg = rt.config.recall
    top_k = top_k or cfg.top_k
    if not query.strip():
        raise ValueError("the recall query is empty")
    check_text("the recall query", query)
    check_length("the recall query", query, QUERY_MAX_CHARS, ValueError)
    if decision_text is not None:
        check_text("the decision's text", decision_text)
        check_length("the decision's text", decision_text, QUERY_MAX_CHARS, ValueError)
    vector = rt.embedder.embed_one(query)
    hits = rank_query(rt, query, vector, top_k, index=index, min_confidence=min_confidence)
    if not record or not hits:
        return RecallResult(None, hits)
    digest = record_attribution(
        rt, hits, decision_text or query, query, vector, session_id=session_id
    )
    return RecallResult(digest, hits)


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
    pool = candidate_pool(
        rt,
        query,
        vector,
        index=index,
        exclude=exclude,
        assume_cold=assume_cold,
        allowed=allowed,
        words=words,
        min_confidence=min_confidence,
        keys=keys,
    )
    if pool is None:
        return []
    ranked: list[Ranked] = rank_columns(pool.columns, pool.weights, top_k)
    key_scores, learned_ranks = pool.key_scores, pool.learned_ranks
    db = rt.db
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


def cached_state(db: Database) -> str:
    """The database's state as the caches a recall fills are keyed (tier sets, the cold
    tier's embeddings, learned keys): while it is the same, a recall reads none of them
    again."""
    stamp = db.change_stamp()
    return f"{stamp}/{key_store.keys_stamp(db, stamp)}"


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
