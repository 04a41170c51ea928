"""The operations that read memory: recall and the context bundle, which rank it for a
query (and may record the decision they inform), and the reads that report on it (one
memory, the cold tier, explain, the timeline, status). A recall is the call agents make
around every step, so what it reads per database state is kept between calls here.
"""

from __future__ import annotations

import json
import queue
import time
from typing import Final

import numpy as np

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import model_fields, recall_models, report_models, views
from dreamcycle.daemon.api.answers import context_hit, context_response, memory_row, recall_hit
from dreamcycle.daemon.api.served_peer import ServedPeer, in_flight
from dreamcycle.daemon.memory.status_report import status_report
from dreamcycle.daemon.recall.candidates import WordMatches, search_words
from dreamcycle.daemon.recall.retrieve import Hit, cached_state, rank_query, record_attribution
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.context import Candidate, Tier, pack
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import tiers
from dreamcycle.store.database import Database
from dreamcycle.store.embedder import Embedder

#: The attribution's decision text when a vector was recalled without one.
VECTOR_DECISION: Final = "recall by vector"
#: Distinct filters whose matching chunks are kept between calls (oldest dropped first).
FILTERS_CACHED: Final = 64


class ReadOperations(ServedPeer):
    """The operations that read, each in a read snapshot of its own."""

    def __init__(self, rt: Runtime, *, embedder: Embedder | None = None) -> None:
        super().__init__(rt, embedder=embedder)
        #: `cached_state` when the last recall read, and how many times the cache had been
        #: emptied by then (None before the first).
        self._recalled_at: tuple[str, int] | None = None

    def recall_at_once(self, request: recall_models.RecallRequest) -> bool:
        """Whether this recall may run in the thread that received it rather than in a
        worker's: one by vector that records nothing and is not filtered, while the index
        has no writer, the cold tier's search reads nothing per query beyond what it keeps
        per state (ColdSearch.quick), a read connection is free (one opened now could meet a
        phase's write lock), and the last recall or context bundle read at the database's
        state now, with no rollback since, so that what it read per state (tier sets, a
        small cold tier's embeddings, learned keys) is cached. Such a recall waits on
        nothing (a read snapshot, the index's read lock) and is as short
        as the trip to a worker thread and back it saves (scripts/bench_recall.py)."""
        peer = self._peer
        return (
            request.query is None
            and not request.record
            and not request.filters.active()
            and peer is not None
            and peer.index.readable_at_once
            and self.recall_state.cold_search.quick
            and self._caches_current()
        )

    def _caches_current(self) -> bool:
        """Whether a read connection is free and the last recall read at the state now,
        with nothing emptied since (the connection keeps the state until a commit may
        have moved it)."""
        try:
            view = self._readers.get_nowait()
        except queue.Empty:
            return False
        try:
            return (cached_state(view.db), self.recall_state.cache.emptied) == self._recalled_at
        finally:
            self._readers.put(view)

    @in_flight
    def recall(self, request: recall_models.RecallRequest) -> recall_models.RecallResponse:
        peer = self._require_peer()
        text = request.query or ""
        top_k = request.top_k or self._rt.config.recall.top_k
        with self._reading() as view:
            if request.query is None:
                vector, words = (
                    _given_vector(request.vector, self._embedder.dim),
                    WordMatches([], []),
                )
            else:
                vector, words = self._embed_while_searching(view, request.query)
            allowed = _allowed(view, request.filters) if request.filters.active() else None
            hits = self._ranked(
                view,
                peer,
                text,
                vector,
                top_k,
                allowed=allowed,
                words=words,
                min_confidence=request.min_confidence,
            )
        hits = [h for h in hits if h.relevance >= request.min_relevance]
        digest = None
        if request.record and hits:
            decision = request.decision or text or VECTOR_DECISION
            with self._writing() as writer:
                digest = record_attribution(writer, hits, decision, text, vector)
        return recall_models.RecallResponse(
            decision_hash=digest, hits=[recall_hit(h, request.explain) for h in hits]
        )

    def _ranked(
        self,
        view: Runtime,
        peer: Peer,
        text: str,
        vector: Vector,
        top_k: int,
        *,
        allowed: frozenset[int] | None,
        words: WordMatches,
        min_confidence: float = 0.0,
    ) -> list[Hit]:
        """`rank_query` over `peer`'s index, noting the state it read at (what
        `recall_at_once` asks)."""
        emptied = (
            self.recall_state.cache.emptied
        )  # before the read: an emptying meanwhile is not missed
        hits = rank_query(
            view,
            text,
            vector,
            top_k,
            index=peer.index,
            allowed=allowed,
            words=words,
            min_confidence=min_confidence,
        )
        self._recalled_at = (cached_state(view.db), emptied)
        return hits

    @in_flight
    def context(self, request: recall_models.ContextRequest) -> recall_models.ContextResponse:
        """Pinned memories, those credited by similar past successes, and those relevant to
        the task, packed into the token budget; recorded, when asked, as one decision."""
        started = time.perf_counter()
        peer = self._require_peer()
        now = self._rt.clock.now_ms()
        with self._reading() as view:
            vector, words = self._embed_while_searching(view, request.task)
            allowed = _allowed(view, request.filters) if request.filters.active() else None
            hits = self._ranked(
                view,
                peer,
                request.task,
                vector,
                defaults.CONTEXT_RELEVANT_TOP_K,
                allowed=allowed,
                words=words,
            )
            pinned = views.pinned_tier(view.db, request.filters)
            credited = views.outcome_tier(view.db, self._rt.peer_id, vector, allowed, now)
        relevant = [
            views.Held(Candidate(h.content_hash, h.title, h.content, h.salience), h.rowid, h.cold)
            for h in hits
        ]
        held = {h.candidate.content_hash: h for h in (*relevant, *credited, *pinned)}
        bundle = pack(
            {
                Tier.PINNED: [h.candidate for h in pinned],
                Tier.OUTCOMES: [h.candidate for h in credited],
                Tier.RELEVANT: [h.candidate for h in relevant],
            },
            budget=request.budget_tokens,
            pinned_salience=defaults.CONTEXT_PINNED_SALIENCE,
            max_overflow=defaults.CONTEXT_MAX_OVERFLOW,
        )
        digest = None
        if request.record and bundle.members:
            # Exactly what the bundle holds, in its order: an outcome credits these.
            in_bundle = [context_hit(held[m.candidate.content_hash], m) for m in bundle.members]
            with self._writing() as writer:
                digest = record_attribution(
                    writer, in_bundle, request.decision or request.task, request.task, vector
                )
        return context_response(bundle, digest, held, started)

    @in_flight
    def memory(self, request: report_models.MemoryRequest) -> report_models.Memory:
        self._require_peer()
        with self._reading() as view:
            return memory_row(view.db, request.ref)

    @in_flight
    def forgotten(self, request: report_models.ForgottenRequest) -> report_models.ForgottenResponse:
        self._require_peer()
        with self._reading() as view:
            rows = tiers.cold_chunks(view.db, limit=request.limit, offset=request.offset)
            total = view.db.counts()["cold"]
        chunks = [
            report_models.ColdMemory(
                content_hash=r.content_hash,
                cold_at=r.cold_at,
                reason=r.reason,
                salience=r.salience,
                text=r.text,
            )
            for r in rows
        ]
        return report_models.ForgottenResponse(cold=total, chunks=chunks)

    @in_flight
    def explain(self, request: model_fields.RefRequest) -> report_models.ExplainResponse:
        self._require_peer()
        with self._reading() as view:
            return views.explain(view.db, memory_row(view.db, request.ref))

    @in_flight
    def timeline(self, request: report_models.TimelineRequest) -> report_models.TimelineResponse:
        self._require_peer()
        with self._reading() as view:
            return views.timeline(view.db, request)

    @in_flight
    def status(self) -> report_models.StatusResponse:
        peer = self._require_peer()
        with self._reading() as view:
            report = status_report(view.db, self._rt.peer_id)
        index = peer.index
        return report_models.StatusResponse(
            **report, index_live=index.live_count, index_capacity=index.capacity
        )

    def _embed_while_searching(self, view: Runtime, text: str) -> tuple[Vector, WordMatches]:
        """A text's vector and its full-text matches, in the caller's snapshot.

        The words are searched in a helper thread while the text is embedded here (the
        model and SQLite both release the GIL). The embedding takes longer: done by the
        caller, it lets the caller go on the moment it ends, the words found already,
        rather than wait to be woken by a thread that embedded (scripts/bench_recall.py
        times recall by text both ways).
        """
        words = self._helper_pool.submit(search_words, view, text)
        try:
            vector = self._embedder.embed_one(text)
        finally:
            found = words.result()
        return vector, found


def _given_vector(values: list[float] | None, dim: int) -> Vector:
    """A vector given to recall by, checked and scaled to unit length."""
    # Scaled in float64: in float32 the norm of components near 1e20 overflows and of
    # components near 1e-23 underflows, and a finite vector would become zeros or be refused.
    raw = np.asarray(values, dtype=np.float64)
    if raw.shape != (dim,):
        raise ValueError(f"vector has {raw.size} components; this model's have {dim}")
    if not np.isfinite(raw).all():
        raise ValueError("vector must be finite and not all zeros")
    largest = float(np.abs(raw).max())
    if largest == 0.0:
        raise ValueError("vector must be finite and not all zeros")
    scaled = raw / largest  # no overflow in the norm below, whatever the magnitudes
    unit: Vector = (scaled / np.linalg.norm(scaled)).astype(np.float32)
    return unit


def _allowed(view: Runtime, filters: recall_models.RecallFilters) -> frozenset[int]:
    """Chunks matching the filters, kept per filter until the chunks or their metadata
    change: agents repeat the same few filters (their project, say)."""
    name = f"filter:{json.dumps(filters.model_dump(), sort_keys=True)}"
    stamp = view.db.filter_stamp()
    cache = recall_state(view).cache
    cached: frozenset[int] | None = cache.get(name, stamp)
    if cached is None:
        # A copy to iterate: another thread's put or rollback may change the cache meanwhile.
        stale = [key for key in list(cache.entries) if key.startswith("filter:")]
        if len(stale) >= FILTERS_CACHED:
            cache.entries.pop(stale[0], None)
        cached = cache.put(name, stamp, _matching(view.db, filters))
    return cached


def _matching(db: Database, filters: recall_models.RecallFilters) -> frozenset[int]:
    where, params = views.filter_clauses(filters)
    return frozenset(
        db.fetch_packed("id", f"FROM observations WHERE {' AND '.join(where)}", tuple(params))
    )
