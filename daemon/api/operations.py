"""The operations the daemon serves, whatever the transport (HTTP today).

One method per operation, taking and returning the models of daemon/api/models.py.
It stays one module because the class is the list of operations that the HTTP routes,
the MCP tools and the client each mirror; shaping rows into answers is answers.py's.
Each runs in a worker thread of its own (never the dream cycle's), or, for a recall that
`recall_at_once` allows, in the server's own thread; either way:

* reads use a connection from a pool of read-only connections, each operation
  inside one read transaction (a consistent snapshot while phases commit);
* writes use one separate connection, one operation at a time, in IMMEDIATE
  transactions like the CLIs (waiting out a phase's batch through the busy timeout);
* the live index is read from the peer on every call (a failed phase replaces it),
  and chunks are added to it only after their transaction committed;
* texts are embedded by an embedder of their own, so a cycle embedding thousands
  of chunks never holds a query up; it runs one thread (a single query gains little
  from more, and their spinning takes the core the query's word search runs on);
* each operation is a request in flight while it runs, and the attached peer's cycle
  gives way to it before each of its statements (daemon/service/requests_first.py).

Errors: ValueError is a bad request, NotFound an unknown decision or hash,
Conflict a request that contradicts what is stored, NotReady a daemon still
loading its index.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Concatenate, Final, ParamSpec, TypeVar

import numpy as np
import pydantic

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import models, views
from dreamcycle.daemon.api.answers import context_hit, context_response, memory_row, recall_hit
from dreamcycle.daemon.api.errors import Conflict, NotFound, NotReady
from dreamcycle.daemon.intake.emit import (
    ConflictingOutcome,
    PulseRequest,
    UnknownHash,
    check_reason,
    emit_outcome,
    emit_pulse,
    emit_revision,
    emit_supersede,
    emit_tombstone,
    queued_retractions,
    resolve_hash,
)
from dreamcycle.daemon.memo import StampedCache
from dreamcycle.daemon.memory.admission import record_admission
from dreamcycle.daemon.memory.confidence import Cause, change_confidence, corroborate
from dreamcycle.daemon.memory.status_report import status_report
from dreamcycle.daemon.recall.candidates import WordMatches, search_words
from dreamcycle.daemon.recall.cold_search import ColdSearch, GraphShape
from dreamcycle.daemon.recall.retrieve import Hit, cached_state, rank_query, record_attribution
from dreamcycle.daemon.recall.state import RecallState, recall_state, share
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.service.cycle_thread import CycleThread
from dreamcycle.daemon.service.requests_first import RequestsFirst
from dreamcycle.pulses import constants
from dreamcycle.pulses.context import Candidate, Tier, pack
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import tiers
from dreamcycle.store.database import (
    EFFICACY_TYPE,
    REVISABLE_COLUMNS,
    Database,
    NewObservation,
    embedding_text,
)
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import HASH_HEX_LEN

log = logging.getLogger("dreamcycle.api")

#: The attribution's decision text when a vector was recalled without one.
VECTOR_DECISION: Final = "recall by vector"
#: Distinct filters whose matching chunks are kept between calls (oldest dropped first).
FILTERS_CACHED: Final = 64


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the system keeps one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not every system has affinities
        return os.cpu_count() or 1


P = ParamSpec("P")
R = TypeVar("R")


def _request(
    operation: Callable[Concatenate[Operations, P], R],
) -> Callable[Concatenate[Operations, P], R]:
    """An operation: a request in flight while it runs, which a cycle gives way to."""

    @functools.wraps(operation)
    def serve(ops: Operations, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with ops.requests_first.serving():
            return operation(ops, *args, **kwargs)

    return serve


class Operations:
    def __init__(self, rt: Runtime, *, embedder: Embedder | None = None) -> None:
        self._rt = rt
        config = rt.config
        self._embedder = embedder or Embedder(
            config.embedding.model,
            batch_size=config.embedding.batch_size,
            threads=defaults.API_EMBEDDING_THREADS,
        )
        #: `cached_state` when the last recall read, and how many times the cache had been
        #: emptied by then (None before the first).
        self._recalled_at: tuple[str, int] | None = None
        # The daemon's own: the cycle's ranking (the prune gate) and the API's share one copy.
        vectors = recall_state(rt).stored_vectors
        # Last in, first out: one caller at a time keeps reusing one connection, whose page
        # cache is warm (SQLite empties a connection's cache when another one commits, so
        # each connection taken in turn would read the same pages again after every commit).
        self._readers: queue.LifoQueue[Runtime] = queue.LifoQueue()
        self._opened: list[Database] = []
        self._writer: Runtime | None = None
        self._write_lock = threading.Lock()
        self._peer: Peer | None = None
        #: The requests in flight, which the attached peer's cycle gives way to.
        self.requests_first = RequestsFirst(config.cycle.give_way_s)
        #: Threads beside the callers': a query's words are searched there while the caller
        #: embeds the query, the cold tier's graph while it searches the live index, and
        #: the stored embeddings are read there at attach.
        self._cores = usable_cores()
        self._helper_pool = ThreadPoolExecutor(
            max_workers=config.api.workers, thread_name_prefix="api-helper"
        )
        #: The cold tier's graph is built on a thread of its own, behind the requests as
        #: the cycle is (`cycle.cpu_priority`): a build takes a core for tens of seconds, and
        #: the requests beside it are what it would slow.
        self._cold_thread = CycleThread("cold-graph", config.cycle.cpu_priority)
        cold_search = ColdSearch(
            config.recall.cold_graph_from,
            shape=GraphShape(config.index.m, config.index.ef_construction, config.index.ef),
            background=self._cold_thread.submit,
            open_db=lambda: Database(config.database_path, prepare=False),
            helpers=self._helper_pool,
            core_to_spare=self._core_to_spare,
            cache=StampedCache(),
            vectors=vectors,
        )
        #: What every view (one per connection) recalls with.
        self.recall_state = RecallState(cold_search)

    # ---- life cycle -------------------------------------------------------------------

    def attach(self, peer: Peer) -> None:
        """Serve this peer's index (its database must already be open and migrated).

        Every connection is opened here, before cycles run: opening one runs SQLite's
        `PRAGMA optimize` before a busy timeout can be set, which fails while a phase
        holds the write lock.
        """
        self._embedder.load()
        while len(self._opened) < self._rt.config.api.workers:
            self._readers.put(self._view(Database(self._rt.config.database_path, prepare=False)))
        with self._writing():
            pass
        peer.db.before_each_statement(self.requests_first.before_statement)
        self._peer = peer
        # Ranking takes every candidate's cosine from its stored embedding: held in memory,
        # recall reads no embedding from the database. Read in the background meanwhile
        # (recall reads what it misses); the pool's shutdown waits for it.
        self._helper_pool.submit(self._load_stored_vectors)
        self._cold_thread.submit(self._prepare_cold_search)

    def _prepare_cold_search(self) -> None:
        # A connection of its own: a build holds it for seconds.
        self.recall_state.cold_search.prepare(
            self._view(Database(self._rt.config.database_path, prepare=False))
        )

    def raise_cold_build_if_starved(self) -> str | None:
        """Raise the cold tier's graph build to normal priority once it has run
        COLD_GRAPH_IDLE_LIMIT_S under SCHED_IDLE (other processes keep every core busy,
        and the tier is searched exactly meanwhile); why, if it was raised now."""
        seconds = self.recall_state.cold_search.build_seconds()
        if seconds is None:
            return None
        return self._cold_thread.raise_if_holding_up(
            step_seconds=seconds,
            waiting_to_write=False,
            stopping=False,
            step_limit_s=defaults.COLD_GRAPH_IDLE_LIMIT_S,
        )

    def _core_to_spare(self) -> bool:
        """Whether a helper thread would have a core of its own beside the caller's: a
        running cycle takes one. On two cores, a helper searching the cold graph while a
        cycle ran made recall by vector slower, not faster (scripts/bench_recall.py with
        `--cold-share` and cycles running shows it)."""
        peer = self._peer
        cycling = peer is not None and peer.cycling
        return self._cores >= 2 + int(cycling)

    def _load_stored_vectors(self) -> None:
        with self._reading() as view:
            held = self.recall_state.stored_vectors.load_all(view.db, self._embedder.index_version)
        log.debug("stored embeddings held for recall", extra={"chunks": held})

    def detach(self) -> None:
        if self._peer is not None:
            self._peer.db.before_each_statement(None)
        self._peer = None

    @property
    def ready(self) -> bool:
        return self._peer is not None

    def close(self) -> None:
        self.detach()
        self.recall_state.cold_search.close()
        # A build ends at its next step, which under SCHED_IDLE may be long in coming.
        self._cold_thread.raise_if_holding_up(
            step_seconds=0.0, waiting_to_write=False, stopping=True
        )
        self._cold_thread.close()
        self._helper_pool.shutdown(wait=True)
        for db in self._opened:
            db.close()
        self._opened.clear()

    def _require_peer(self) -> Peer:
        peer = self._peer
        if peer is None:
            raise NotReady("the daemon is loading its index; try again shortly")
        return peer

    def _view(self, db: Database) -> Runtime:
        """The daemon's runtime seen through another connection and this layer's embedder."""
        self._opened.append(db)
        view = Runtime(config=self._rt.config, db=db, embedder=self._embedder, clock=self._rt.clock)
        share(view, self.recall_state)
        return view

    @contextmanager
    def _reading(self) -> Iterator[Runtime]:
        try:
            view = self._readers.get_nowait()
        except queue.Empty:
            view = self._view(Database(self._rt.config.database_path, prepare=False))
        try:
            with view.db.snapshot():
                yield view
        finally:
            self._readers.put(view)

    @contextmanager
    def _writing(self) -> Iterator[Runtime]:
        # Aside while waiting for and holding the write lock: a cycle giving way to this
        # request may hold it (daemon/service/requests_first.py).
        with self.requests_first.stepping_aside(), self._write_lock:
            if self._writer is None:
                self._writer = self._view(Database(self._rt.config.database_path, prepare=False))
            yield self._writer

    # ---- operations ------------------------------------------------------------------------

    def recall_at_once(self, request: models.RecallRequest) -> bool:
        """Whether this recall may run in the thread that received it rather than in a
        worker's: one by vector that records nothing and is not filtered, while the index
        has no writer, the cold tier's search needs neither a build nor a read of a large
        tier (ColdSearch.quick), a read connection is free (one opened now could meet a
        phase's write lock), and the last recall or context bundle read at the database's
        state now, with no rollback since, so that what it read per state (tier sets, a
        small cold tier's embeddings, learned keys) is cached. Such a recall waits on
        nothing (a read snapshot, the index's read lock, the cold graph) and is as short
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

    @_request
    def recall(self, request: models.RecallRequest) -> models.RecallResponse:
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
        return models.RecallResponse(
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

    @_request
    def save(self, request: models.SaveRequest) -> models.SaveResponse:
        peer = self._require_peer()
        item = NewObservation(
            content=request.content,
            title=request.title,
            type=request.type,
            kind=request.kind,
            project=request.project,
            scope=request.scope,
            topic_key=request.topic_key,
            session_id=request.session_id,
            tool_name=request.tool_name,
            pin_floor=request.pin_floor,
            importance=request.importance,
            deletion_policy=request.deletion_policy,
            confidence=request.confidence,
            stability=request.stability,
        )
        item.validate()
        if item.type == EFFICACY_TYPE:
            raise ValueError(f"type {EFFICACY_TYPE!r} is reserved for the daemon's own records")
        digest = content_hash(item.content)
        vector = self._embedder.embed_one(embedding_text(item.title, item.content))
        now = self._rt.clock.now_ms()
        with self._writing() as writer, peer.index_writes:
            db = writer.db
            with db.transaction():
                if db.is_tombstoned_hash(digest):
                    raise Conflict(f"chunk {digest} was retracted (tombstoned) and stays so")
                added = db.add_observations([item], now_ms=now)[0]
                corroborate(db, [added], now_ms=now)
                confidence = float(
                    db.fetch_one(
                        "SELECT confidence FROM observations WHERE id = ?", (added.rowid,)
                    )[0]
                )
                if added.created:
                    pending = [db.pending_admission_of(added.rowid)]
                    vectors = vector[None, :]
                    record_admission(peer, db, pending, vectors, {added.rowid: vector}, now)
            # Committed: a cycle (or a crash) now sees the chunk whole; only then is it indexed.
            if added.created:
                peer.index.add(np.array([added.rowid], dtype=np.int64), vectors)
        indexed = peer.index.is_live(added.rowid)
        return models.SaveResponse(
            content_hash=digest, created=added.created, indexed=indexed, confidence=confidence
        )

    @_request
    def outcome(self, request: models.OutcomeRequest) -> models.Queued:
        self._require_peer()
        with self._writing() as writer:
            decision = _resolved(writer, "decision", request.decision_hash)
            try:
                emitted = emit_outcome(
                    writer,
                    decision=decision,
                    reward=request.reward,
                    reason=request.reason,
                    cited=request.cited,
                )
            except ConflictingOutcome as exc:
                raise Conflict(str(exc)) from None
        return models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @_request
    def pulse(self, request: models.PulseRequest) -> models.Queued:
        self._require_peer()
        pulse = PulseRequest(
            text=request.text,
            kind=PulseKind(request.kind),
            strength=request.strength,
            sigma=request.sigma,
            k=request.k,
            max_hops=request.max_hops,
            decay_per_hop=request.decay_per_hop,
            ttl_s=request.ttl_s,
            reason=request.reason or "",
            nonce=request.nonce,
        )
        # Embedded before the write lock is taken: while a request waits for or holds it,
        # the cycle gives way to no request (daemon/service/requests_first.py), and other writers
        # wait; the model takes milliseconds.
        embedded = self._embedder.embed_one(request.text) if request.text.strip() else None
        with self._writing() as writer:
            emitted = emit_pulse(writer, pulse, embedded=embedded)
        return models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @_request
    def tombstone(self, request: models.TombstoneRequest) -> models.Queued:
        self._require_peer()
        with self._writing() as writer:
            digest = _resolved(writer, "chunk", request.content_hash)
            emitted = emit_tombstone(
                writer, digest=digest, reason=request.reason, ttl_s=request.ttl_s
            )
        return models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @_request
    def memory(self, request: models.MemoryRequest) -> models.Memory:
        self._require_peer()
        with self._reading() as view:
            return memory_row(view.db, request.ref)

    @_request
    def forgotten(self, request: models.ForgottenRequest) -> models.ForgottenResponse:
        self._require_peer()
        with self._reading() as view:
            rows = tiers.cold_chunks(view.db, limit=request.limit, offset=request.offset)
            total = view.db.counts()["cold"]
        chunks = [
            models.ColdMemory(
                content_hash=r.content_hash,
                cold_at=r.cold_at,
                reason=r.reason,
                salience=r.salience,
                text=r.text,
            )
            for r in rows
        ]
        return models.ForgottenResponse(cold=total, chunks=chunks)

    @_request
    def supersede(self, request: models.SupersedeRequest) -> models.SupersedeResponse:
        """Save the new chunk now; the supersede itself applies at the next cycle."""
        self._require_peer()
        check_reason(request.reason)  # before the new chunk is saved: a refusal stores nothing
        new_hash = content_hash(request.memory.content)
        with self._reading() as view:
            old_hash = _resolved(view, "chunk", request.old_hash)
            if new_hash == old_hash:
                raise ValueError("the new content is the old content: nothing to supersede")
            if view.db.is_tombstoned_hash(old_hash):
                raise Conflict(f"chunk {old_hash} was retracted (tombstoned) already")
            # Before the new chunk is saved, so that a refusal stores nothing; checked again
            # under the write lock, where a concurrent edit is seen.
            _refuse_contradicting(view.db, old_hash, new_hash)
        saved = self.save(request.memory)
        with self._writing() as writer, writer.db.transaction():
            _refuse_contradicting(writer.db, old_hash, saved.content_hash)
            emitted = emit_supersede(
                writer,
                old_hash=old_hash,
                new_hash=saved.content_hash,
                reason=request.reason,
            )
        return models.SupersedeResponse(
            saved=saved, queued=models.Queued(entry_id=emitted.entry_id, new=emitted.new)
        )

    @_request
    def context(self, request: models.ContextRequest) -> models.ContextResponse:
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

    @_request
    def explain(self, request: models.RefRequest) -> models.ExplainResponse:
        self._require_peer()
        with self._reading() as view:
            return views.explain(view.db, memory_row(view.db, request.ref))

    @_request
    def timeline(self, request: models.TimelineRequest) -> models.TimelineResponse:
        self._require_peer()
        with self._reading() as view:
            return views.timeline(view.db, request)

    @_request
    def pin(self, request: models.PinRequest) -> models.ChunkQueued:
        """Queue the pin floor as a revision: applied (journaled, and sent to peers) at the
        next cycle."""
        return self._revise(request.ref, {"pin_floor": request.pin_floor})

    @_request
    def unpin(self, request: models.RefRequest) -> models.ChunkQueued:
        return self._revise(request.ref, {"pin_floor": 0.0})

    @_request
    def reinforce(self, request: models.FeedbackRequest) -> models.ChunkQueued:
        """A Reward pulse seeded at the chunk (a cold chunk comes back when it applies); a
        user's verification, so its confidence rises at once."""
        return self._feedback(request, PulseKind.REWARD, Cause.REINFORCED)

    @_request
    def penalize(self, request: models.FeedbackRequest) -> models.ChunkQueued:
        """A Decay pulse seeded at the chunk; its confidence falls at once."""
        return self._feedback(request, PulseKind.DECAY, Cause.PENALIZED)

    @_request
    def update(self, request: models.UpdateRequest) -> models.UpdateResponse:
        """New content supersedes the memory (unset fields kept); a change of title, topic
        or importance alone is a revision of the same memory."""
        self._require_peer()
        with self._reading() as view:
            old = memory_row(view.db, request.ref)
        if old.state == "tombstoned":
            raise Conflict(f"chunk {old.content_hash} was retracted (tombstoned) already")
        given = request.model_dump(exclude={"ref", "reason"}, exclude_none=True)
        content = given.pop("content", old.content)
        if content_hash(content) != old.content_hash:
            kept = old.model_dump(include=set(models.SaveRequest.model_fields) - {"content"})
            memory = _new_version(content, kept, given)
            superseded = self.supersede(
                models.SupersedeRequest(
                    old_hash=old.content_hash, memory=memory, reason=request.reason
                )
            )
            return models.UpdateResponse(
                content_hash=superseded.saved.content_hash, superseded=superseded, revised=None
            )
        changed = {name: value for name, value in given.items() if getattr(old, name) != value}
        if not changed:
            raise ValueError(
                "nothing to change: the new content is the old content, and every other "
                "field given has that value already"
            )
        structural = sorted(set(changed) - set(REVISABLE_COLUMNS))
        if structural:
            raise ValueError(
                f"changing {', '.join(structural)} needs new content (a memory that "
                f"supersedes this one); alone, only {', '.join(REVISABLE_COLUMNS)} can change"
            )
        revised = self._revise(old.content_hash, changed)
        return models.UpdateResponse(
            content_hash=old.content_hash,
            superseded=None,
            revised=models.Queued(entry_id=revised.entry_id, new=revised.new),
        )

    @_request
    def revive(self, request: models.RefRequest) -> models.Revival:
        """Ask for a cold memory back: the next cycle revives it, as after a re-ingest."""
        self._require_peer()
        now = self._rt.clock.now_ms()
        with self._writing() as writer:
            memory = memory_row(writer.db, request.ref)
            rowid = tiers.cold_rowid_of_hash(writer.db, memory.content_hash)
            if rowid is None:
                raise Conflict(f"chunk {memory.content_hash} is {memory.state}, not cold")
            with writer.db.transaction():
                tiers.request_revival(writer.db, rowid, now_ms=now)
        return models.Revival(content_hash=memory.content_hash, requested_ms=now)

    def _revise(self, ref: str, changes: dict[str, str | float | None]) -> models.ChunkQueued:
        self._require_peer()
        with self._writing() as writer:
            memory = memory_row(writer.db, ref)
            if memory.state == "tombstoned":
                raise Conflict(f"chunk {memory.content_hash} was retracted (tombstoned)")
            emitted = emit_revision(
                writer,
                digest=memory.content_hash,
                changes=changes,
                # Each request is a revision of its own: pin, unpin, pin again all apply.
                nonce=str(self._rt.clock.now_ms()),
            )
        return models.ChunkQueued(
            content_hash=memory.content_hash, entry_id=emitted.entry_id, new=emitted.new
        )

    def _feedback(
        self, request: models.FeedbackRequest, kind: PulseKind, cause: Cause
    ) -> models.ChunkQueued:
        self._require_peer()
        now = self._rt.clock.now_ms()
        with self._writing() as writer, writer.db.transaction():
            memory = memory_row(writer.db, request.ref)
            if memory.state == "tombstoned":
                raise Conflict(f"chunk {memory.content_hash} was retracted (tombstoned)")
            # Shaped like an outcome's pulse: the chunk and its nearest neighbours.
            pulse = PulseRequest(
                text="",
                kind=kind,
                strength=request.strength,
                sigma=constants.OUTCOME_SIGMA,
                k=constants.OUTCOME_K,
                max_hops=constants.OUTCOME_MAX_HOPS,
                decay_per_hop=constants.OUTCOME_DECAY_PER_HOP,
                ttl_s=defaults.PULSE_TTL_S,
                reason=request.reason,
                nonce=request.nonce,
                seed_chunk=memory.content_hash,
            )
            emitted = emit_pulse(writer, pulse)
            # A repeated request (same nonce) queues nothing, and verifies nothing again.
            confidence = memory.confidence
            if emitted.new:
                changed = change_confidence(
                    writer.db, memory.content_hash, cause, reason=request.reason, now_ms=now
                )
                confidence = memory.confidence if changed is None else changed
        return models.ChunkQueued(
            content_hash=memory.content_hash,
            entry_id=emitted.entry_id,
            new=emitted.new,
            confidence=confidence,
        )

    @_request
    def status(self) -> models.StatusResponse:
        peer = self._require_peer()
        with self._reading() as view:
            report = status_report(view.db, self._rt.peer_id)
        index = peer.index
        return models.StatusResponse(
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


def _new_version(content: str, kept: dict[str, Any], given: dict[str, Any]) -> models.SaveRequest:
    """The memory an update saves: the fields given, the old memory's for the rest. A field
    kept may break the API's bounds (stored by ingest or by a peer, whose are wider): the
    caller is told which one, and that giving it anew is the way out."""
    try:
        return models.SaveRequest(content=content, **(kept | given))
    except pydantic.ValidationError as exc:
        inherited = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]} - set(given))
        if not inherited:
            raise
        reasons = "; ".join(
            f"{e['loc'][0]}: {e['msg']}" for e in exc.errors() if str(e["loc"][0]) in inherited
        )
        raise ValueError(
            f"the memory's own {', '.join(inherited)} cannot be kept by an update ({reasons}): "
            "give a new value with it"
        ) from None


def _refuse_contradicting(db: Database, old_hash: str, new_hash: str) -> None:
    contradiction = queued_retractions(db).contradiction(old_hash, new_hash)
    if contradiction is not None:
        raise Conflict(contradiction)


def _allowed(view: Runtime, filters: models.RecallFilters) -> frozenset[int]:
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


def _matching(db: Database, filters: models.RecallFilters) -> frozenset[int]:
    where, params = views.filter_clauses(filters)
    return frozenset(
        db.fetch_packed("id", f"FROM observations WHERE {' AND '.join(where)}", tuple(params))
    )


def _resolved(rt: Runtime, what: str, given: str) -> str:
    """The one stored `what` ("chunk" or "decision") hash `given` is or starts: NotFound
    when none is held here, ValueError (listing some) when more than one starts it."""
    try:
        return resolve_hash(rt, what, given)
    except UnknownHash:
        held = "stored" if what == "chunk" else "recorded"
        named = given if len(given) == HASH_HEX_LEN else f"starting {given}"
        raise NotFound(f"{what} {named} is not {held} here") from None
