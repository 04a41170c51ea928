"""How recall searches the cold tier: exactly while it is small, through a graph once large.

An exact search reads every cold embedding per query, a cost that grows with the tier
(scripts/bench_recall.py `--cold-share` measures it). From `recall.cold_graph_from`
cold chunks on, the daemon's API searches an HNSW graph of the cold tier instead
(store/cold_graph.py), approximately, as the live tier is searched through its index.

A graph holds the cold tier as it stood when it was built, and is built off the request
path (the API's own thread), so no request waits for one:
- chunks that went cold since are searched exactly beside it (the pending ones);
- chunks that left the cold tier since (revived, tombstoned) are skipped;
- once either list outgrows its bound, a new graph is built and replaces the old one;
- until the first graph is ready, the whole tier is searched exactly.

In the API a query's graph search runs on a helper thread while the caller searches the
live index (hnswlib lets go of the GIL while it searches): the two take about as long.

Which chunks are cold never depends on the graph: only which cold candidates a query
finds, and ranking then scores every candidate by its exact cosine.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon import defaults
from dreamcycle.daemon.memo import StampedCache
from dreamcycle.pulses.ranking import Measured, best_labels
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import read_paths, tiers
from dreamcycle.store.cold_graph import ColdGraph, build_cold_graph_reading
from dreamcycle.store.database import Database, tier_stamp
from dreamcycle.store.read_paths import StoredVectors

if TYPE_CHECKING:
    from dreamcycle.daemon.runtime import Runtime

__all__ = ["EXACT_CACHE", "ColdSearch", "GraphShape"]

log = logging.getLogger(__name__)

#: The cache's entry for the whole cold tier's embeddings (ColdSearch.cold_vectors).
EXACT_CACHE = "cold"


@dataclass(frozen=True)
class GraphShape:
    """hnswlib's M, ef_construction and ef for the cold graph (the live index's, by default)."""

    m: int
    ef_construction: int
    ef: int


@dataclass(frozen=True)
class _Remainder:
    """What one graph misses at one tier stamp."""

    tiers_at: str
    graph: ColdGraph
    pending_labels: npt.NDArray[np.int64]
    pending_vectors: npt.NDArray[np.float32]
    skip: frozenset[int]


class ColdSearch:
    """The cold tier's nearest chunks to a query. Safe to share between threads.

    `graph_from` 0 searches exactly at every size (a one-shot command, which would spend
    more on building a graph than on its few queries). `background` hands a build to
    another thread without waiting for it (the API's runs it behind the requests, under
    SCHED_IDLE); None builds in the caller's thread, when first needed (tests, the
    efficacy benchmark).
    `open_db` gives a background build its own connection. `helpers` search the graph
    beside the caller's search of the live index (see `begin`) whenever `core_to_spare`
    says a helper would have a core of its own then; None searches it in the caller's
    thread. `cache` and `vectors` are those of the recall state the search belongs to
    (daemon/recall/state.py): the exact search keeps the cold tier's embeddings in one,
    and builds read stored embeddings through the other.
    """

    def __init__(
        self,
        graph_from: int = 0,
        *,
        shape: GraphShape | None = None,
        pending_max: int = defaults.COLD_GRAPH_PENDING_MAX,
        skip_max: int = defaults.COLD_GRAPH_SKIP_MAX,
        background: Callable[[Callable[[], None]], object] | None = None,
        open_db: Callable[[], Database] | None = None,
        helpers: Executor | None = None,
        core_to_spare: Callable[[], bool] = lambda: True,
        cache: StampedCache | None = None,
        vectors: StoredVectors | None = None,
    ) -> None:
        self.cache = cache if cache is not None else StampedCache()
        self.vectors = vectors if vectors is not None else StoredVectors()
        if graph_from < 0 or pending_max < 0 or skip_max < 0:
            raise ValueError("graph_from, pending_max and skip_max must be >= 0")
        if background is not None and open_db is None:
            raise ValueError("a background build needs open_db")
        self.graph_from = graph_from
        self._shape = shape or GraphShape(
            defaults.INDEX_M, defaults.INDEX_EF_CONSTRUCTION, defaults.INDEX_EF
        )
        self._pending_max = pending_max
        self._skip_max = skip_max
        self._background = background
        self._open_db = open_db
        self._helpers = helpers
        self._core_to_spare = core_to_spare
        self._lock = threading.Lock()
        self._graph: ColdGraph | None = None
        #: The vector space (index version) of the graph's vectors.
        self._graph_version: str | None = None
        self._remainder: _Remainder | None = None
        self._building = False
        #: When the build under way started (time.monotonic), None between builds.
        self._build_started: float | None = None
        #: A build failed: search exactly from then on (always right, only slower).
        self._broken = False
        self._closed = False
        #: The last search found the tier too small for a graph (or empty).
        self._small = False
        #: Graphs built so far (for tests and logs).
        self.builds = 0

    @property
    def ready(self) -> bool:
        """Whether a graph is built (searches may still be exact: see `graph_from`)."""
        return self._graph is not None

    @property
    def quick(self) -> bool:
        """Whether a search now would take a graph, or exactly search a tier too small for one
        (as the last search found it): no graph built in the caller's thread, and no read of
        a large tier's embeddings (a small one's are read once per tier state). With a
        graph, the last search took that graph: what it missed (the tier's chunks added
        since, up to `pending_max` embeddings) is known for the tier state the last search
        saw. False until the first search or build says so."""
        if self._broken:
            return False
        graph, remainder = self._graph, self._remainder
        if graph is None:
            return self._small
        return remainder is not None and remainder.graph is graph

    def prepare(self, rt: Runtime) -> None:
        """Build the first graph now, in this thread, if the cold tier is large enough (the
        API does at start, on its own thread, so that the first queries find it ready)."""
        if self.graph_from == 0 or self._graph is not None or self._closed:
            return
        with rt.db.snapshot():
            if len(read_paths.tier_sets(rt.db).cold) < self.graph_from:
                return
        with self._lock:
            if self._building or self._closed or self._broken:
                return
            self._building = True
        self._build(rt.db, self.vectors, rt.embedder.index_version)

    def close(self) -> None:
        """Ends a build in progress at its next step; the owner of `background` waits for it."""
        self._closed = True

    def build_seconds(self) -> float | None:
        """How long the build under way has run, None when none is."""
        started = self._build_started
        return None if started is None else time.monotonic() - started

    def candidates(
        self, rt: Runtime, stamp: str, cold: frozenset[int], vector: Vector, n: int
    ) -> list[int]:
        """Up to `n` cold chunks nearest to `vector`, best first; `cold` is the cold tier
        at the database state `stamp`."""
        found: list[int] = self.begin(rt, stamp, cold, vector, n)().labels.tolist()
        return found

    def begin(
        self, rt: Runtime, stamp: str, cold: frozenset[int], vector: Vector, n: int
    ) -> Callable[[], Measured]:
        """`candidates`, started: what it returns gives the answer, with the cosines a
        graph measured (none from an exact search: ranking computes those from the stored
        embeddings). With `helpers` and a core to spare, the graph is searched on a helper
        thread meanwhile (recall searches the live index); what reads the database runs
        here, in the caller's thread and snapshot."""
        self._small = len(cold) < self.graph_from or not cold
        if not cold or n <= 0:
            return _answered(Measured.unmeasured([]))
        if self.graph_from == 0 or len(cold) < self.graph_from or self._broken:
            return _answered(Measured.unmeasured(self._exact(rt, stamp, vector, n)))
        graph, graph_version = self._graph, self._graph_version
        if graph is None:
            self.start_build(rt)
            # Built in this thread when there is no background.
            graph, graph_version = self._graph, self._graph_version
            if graph is None:
                return _answered(Measured.unmeasured(self._exact(rt, stamp, vector, n)))
        remainder = self._remainder_of(rt, stamp, cold, graph)
        if len(remainder.pending_labels) > self._pending_max or (
            len(remainder.skip) > self._skip_max
        ):
            self.start_build(rt)
        search = functools.partial(graph.nearest, vector, n, remainder.skip)
        # A helper without a core of its own would only wait for the caller's: searched
        # here then.
        helpers = self._helpers if self._core_to_spare() else None
        running = helpers.submit(search) if helpers is not None else None
        # The whole tier's embeddings, read while no graph was ready, are not needed now.
        self.cache.entries.pop(EXACT_CACHE, None)

        def merged() -> Measured:
            labels, cosines = search() if running is None else running.result()
            if len(remainder.pending_labels):
                labels = np.concatenate([labels, remainder.pending_labels])
                cosines = np.concatenate([cosines, remainder.pending_vectors @ vector])
            best = best_labels(labels, cosines, n)
            if graph_version != rt.embedder.index_version:
                return Measured.unmeasured(best)
            cosine_of = dict(zip(labels.tolist(), cosines.tolist(), strict=True))
            return Measured(
                np.array(best, dtype=np.int64),
                np.array([cosine_of[label] for label in best], dtype=np.float64),
            )

        return merged

    def cold_vectors(
        self, rt: Runtime, stamp: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Labels and embeddings of the cold tier, read once per database state `stamp`."""
        tiers_at = tier_stamp(stamp)
        cached = self.cache.get(EXACT_CACHE, tiers_at)
        if cached is None:
            cached = self.cache.put(
                EXACT_CACHE,
                tiers_at,
                tiers.cold_vectors(rt.db, rt.embedder.index_version, rt.embedder.dim),
            )
        labels, vectors = cached
        return labels, vectors

    def _exact(self, rt: Runtime, stamp: str, vector: Vector, n: int) -> list[int]:
        labels, vectors = self.cold_vectors(rt, stamp)
        return best_labels(labels, vectors @ vector, n) if len(labels) else []

    def _remainder_of(
        self, rt: Runtime, stamp: str, cold: frozenset[int], graph: ColdGraph
    ) -> _Remainder:
        tiers_at = tier_stamp(stamp)
        found = self._remainder
        if found is not None and found.tiers_at == tiers_at and found.graph is graph:
            return found
        pending = np.array(sorted(cold - graph.labels), dtype=np.int64)
        vectors, present = self.vectors.gather(rt.db, pending, rt.embedder.index_version)
        if not len(vectors):
            vectors = np.zeros((0, rt.embedder.dim), dtype=np.float32)
        remainder = _Remainder(
            tiers_at, graph, pending[present], vectors, frozenset(graph.labels - cold)
        )
        # Not kept from inside a write transaction: a rollback would undo its stamp.
        if not read_paths.in_write_transaction(rt.db):
            self._remainder = remainder
        return remainder

    def start_build(self, rt: Runtime) -> None:
        """Build a new graph of the cold tier as it stands (in the background when there is
        one), unless one is being built: what a search does once the graph misses too
        much of the tier."""
        with self._lock:
            if self._building or self._closed or self._broken:
                return
            self._building = True
        version = rt.embedder.index_version
        if self._background is None:
            self._build(rt.db, self.vectors, version)
            return
        open_db = self._open_db
        assert open_db is not None, "checked in __init__"
        try:
            self._background(functools.partial(self._build_apart, open_db, self.vectors, version))
        except Exception:
            # Not handed over: left set, no build would ever run again.
            with self._lock:
                self._building = False
            if self._closed:
                return  # closed meanwhile (the background refuses work then): none is due
            raise

    def _build_apart(
        self, open_db: Callable[[], Database], vectors: StoredVectors, version: str
    ) -> None:
        # Timed from here: a build starved while it opens its connection is raised too.
        self._build_started = time.monotonic()
        try:
            db = open_db()
        except Exception:
            # Nobody reads the background's result: said here, or no build would run again.
            log.exception(
                "opening a connection for the cold tier's graph failed; it is searched exactly"
            )
            with self._lock:
                self._broken = True
                self._building = False
                self._build_started = None
            return
        try:
            self._build(db, vectors, version)
        finally:
            db.close()

    def _build(self, db: Database, vectors: StoredVectors, version: str) -> None:
        started = self._build_started = self._build_started or time.monotonic()
        graph: ColdGraph | None = None
        try:
            with db.snapshot():
                cold = np.array(sorted(read_paths.tier_sets(db).cold), dtype=np.int64)
            # A chunk that leaves the tier while the build reads is skipped by searches
            # (a graph's skip list), as one that leaves it after the build.
            graph = build_cold_graph_reading(
                cold,
                lambda part: vectors.gather(db, part, version),
                m=self._shape.m,
                ef_construction=self._shape.ef_construction,
                ef=self._shape.ef,
                stop=lambda: self._closed,
            )
        except Exception:
            log.exception("building the cold tier's graph failed; it is searched exactly")
            self._broken = True
        finally:
            with self._lock:
                if graph is not None:
                    self._graph, self._graph_version = graph, version
                    self._remainder = None
                    self.builds += 1
                self._building = False
                self._build_started = None
        if graph is not None:
            log.info(
                "cold tier graph built",
                extra={
                    "chunks": len(graph.labels),
                    "seconds": round(time.monotonic() - started, 2),
                },
            )


def _answered(found: Measured) -> Callable[[], Measured]:
    return lambda: found
