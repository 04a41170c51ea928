"""The peer the API serves, and what every operation runs on: the connections, the
embedder, the helper threads and the cold tier's search, from attach to close.

Each operation runs in a worker thread of its own (never the dream cycle's), or, for a
recall that `recall_at_once` allows, in the server's own thread; either way:

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
  gives way to it before each of its statements (daemon/scheduling/requests_first.py).

The operations themselves are read_operations.py's and edit_operations.py's.
"""

from __future__ import annotations

import functools
import logging
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Concatenate, ParamSpec, TypeVar

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.errors import NotReady
from dreamcycle.daemon.memo import StampedCache
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.recall.state import RecallState, recall_state, share
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.scheduling.requests_first import RequestsFirst
from dreamcycle.store.database import Database
from dreamcycle.store.embedder import Embedder

log = logging.getLogger("dreamcycle.api")


P = ParamSpec("P")
R = TypeVar("R")
Served = TypeVar("Served", bound="ServedPeer")


def in_flight(
    operation: Callable[Concatenate[Served, P], R],
) -> Callable[Concatenate[Served, P], R]:
    """An operation: a request in flight while it runs, which a cycle gives way to."""

    @functools.wraps(operation)
    def serve(ops: Served, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with ops.requests_first.serving():
            return operation(ops, *args, **kwargs)

    return serve


class ServedPeer:
    """What the operations share: the peer served, its connections and its embedder."""

    def __init__(self, rt: Runtime, *, embedder: Embedder | None = None) -> None:
        self._rt = rt
        config = rt.config
        self._embedder = embedder or Embedder(
            config.embedding.model,
            batch_size=config.embedding.batch_size,
            threads=defaults.API_EMBEDDING_THREADS,
        )
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
        #: embeds the query, and the stored embeddings are read there at attach.
        self._helper_pool = ThreadPoolExecutor(
            max_workers=config.api.workers, thread_name_prefix="api-helper"
        )
        cold_search = ColdSearch(
            config.recall.cold_graph_from, cache=StampedCache(), vectors=vectors
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
        # request may hold it (daemon/scheduling/requests_first.py).
        with self.requests_first.stepping_aside(), self._write_lock:
            if self._writer is None:
                self._writer = self._view(Database(self._rt.config.database_path, prepare=False))
            yield self._writer
