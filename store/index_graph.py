"""The live HNSW index in memory: `HnswIndex`, its hnswlib graph over chunk embeddings
labelled by observation rowid, and cosine k-NN search over its live labels.

Its labels are kept by `index_labels`, its files written and read by `index_persistence`;
`index.open_or_rebuild` loads it or rebuilds it from the database.

Determinism: elements are added on one thread and hnswlib's level generator has a
fixed seed, so the same sequence of operations (adds, saves and loads at the same
points) yields the same graph and the same neighbours on every peer.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Final

import numpy as np

from dreamcycle.pulses.vectors import Flags, Labels, Vectors
from dreamcycle.store.index_input import (
    Distances,
    InvalidIndexInput,
    LabelNotLive,
    as_labelled,
    as_labels,
    as_vectors,
    check_positive,
    empty_answer,
    preview,
)
from dreamcycle.store.index_labels import LiveLabels
from dreamcycle.store.index_persistence import load_saved, new_engine, save_engine
from dreamcycle.store.index_search import search_engine
from dreamcycle.store.index_tiers import Tiers
from dreamcycle.store.readers_writer_lock import ReadersWriterLock

#: Links per element of the graph (hnswlib's M): more raise recall and memory alike;
#: scripts/bench_propagate.py and scripts/bench_recall.py measure the index built with it.
DEFAULT_M: Final = 16
#: Search breadth while inserting: wider builds a better graph, more slowly.
DEFAULT_EF_CONSTRUCTION: Final = 100
#: Search breadth for queries; raised to k whenever k is larger.
DEFAULT_EF: Final = 64
INITIAL_CAPACITY: Final = 1024
#: Capacity is multiplied by this until the new elements fit.
GROWTH_FACTOR: Final = 2
#: Adding on one thread keeps the insertion order, hence the graph, reproducible.
_ADD_THREADS: Final = 1


class HnswIndex(Tiers):
    """Cosine k-NN over live chunks, and over cold ones when asked: one graph holds both
    tiers, each search kept to its own by a filter. Deleted labels (tombstoned) are never
    returned; cold and deleted ones come back only through `restore` (a chunk revived).

    Safe to share between threads: queries (and saves, which only read the graph) run
    side by side; add, mark_deleted, set_cold, restore and resize each run alone.
    """

    def __init__(
        self,
        path: Path,
        dim: int,
        index_version: str,
        engine: Any,
        *,
        ef: int,
        labels: LiveLabels,
        stamp: str | None,
        identity: str | None = None,
    ) -> None:
        """Use `create`, `load` or `index.open_or_rebuild` instead."""
        self._path = path
        self._dim = dim
        self._index_version = index_version
        self._engine = engine
        self._ef = ef
        self._labels = labels
        self._stamp = stamp
        self._identity = identity
        self._lock = ReadersWriterLock()
        #: Changes since the file was last written or read (see `is_saved_at`).
        self._unsaved_changes = 0
        #: Changes counted before the last save or load (see `generation`).
        self._saved_changes = 0

    @classmethod
    def create(
        cls,
        path: Path,
        dim: int,
        index_version: str,
        *,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef: int = DEFAULT_EF,
        capacity: int = INITIAL_CAPACITY,
    ) -> HnswIndex:
        """An empty index, kept in memory until `save`."""
        check_positive("dim", dim)
        check_positive("m", m, minimum=2)
        check_positive("ef_construction", ef_construction)
        check_positive("ef", ef)
        check_positive("capacity", capacity)
        if not index_version:
            raise InvalidIndexInput("index_version is empty")
        engine = new_engine(dim, capacity=capacity, m=m, ef_construction=ef_construction, ef=ef)
        empty = LiveLabels(set(), set())
        return cls(Path(path), dim, index_version, engine, ef=ef, labels=empty, stamp=None)

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        index_version: str,
        *,
        ef: int = DEFAULT_EF,
        expected_stamp: str | None = None,
        expected_identity: str | None = None,
        live_labels: Callable[[], Labels] | None = None,
    ) -> HnswIndex:
        """The index saved at `path`; IndexUnusable says why it cannot be used (the
        checks of `expected_stamp`, `expected_identity` and `live_labels` are
        `index_persistence.load_saved`'s)."""
        check_positive("dim", dim)
        check_positive("ef", ef)
        path = Path(path)
        saved = load_saved(
            path,
            dim,
            index_version,
            expected_stamp=expected_stamp,
            expected_identity=expected_identity,
            live_labels=live_labels,
        )
        saved.engine.set_ef(ef)
        return cls(
            path,
            dim,
            index_version,
            saved.engine,
            ef=ef,
            labels=LiveLabels(saved.live, saved.deleted - saved.cold, set(saved.cold)),
            stamp=saved.meta.stamp,
            identity=saved.meta.identity,
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def index_version(self) -> str:
        return self._index_version

    @property
    def readable_at_once(self) -> bool:
        """Whether a query would start now, with no add, deletion or resize running or
        waiting to (a hint: see ReadersWriterLock.free)."""
        return self._lock.free

    @property
    def stamp(self) -> str | None:
        """The database stamp this index was last saved or loaded with (None if never)."""
        with self._lock.reading():
            return self._stamp

    @property
    def identity(self) -> str | None:
        """The identity of the save this index was last saved as or loaded from (None if never)."""
        with self._lock.reading():
            return self._identity

    @property
    def capacity(self) -> int:
        with self._lock.reading():
            return int(self._engine.get_max_elements())

    @property
    def generation(self) -> int:
        """Changes since it was opened (adds, deletions, revivals): while this stays the
        same, a query gets the same answer (pulses.neighbour_cache keeps answers by it)."""
        with self._lock.reading():
            return self._saved_changes + self._unsaved_changes

    @property
    def live_count(self) -> int:
        with self._lock.reading():
            return self._labels.live_count

    @property
    def cold_count(self) -> int:
        with self._lock.reading():
            return self._labels.cold_count

    @property
    def cold_changes(self) -> int:
        """Changes of the cold labels since it was opened (what is cold changes with it)."""
        with self._lock.reading():
            return self._labels.cold_changes

    def labels(self) -> set[int]:
        """Every label the index knows, live, cold or tombstoned."""
        with self._lock.reading():
            return self._labels.known()

    def deleted_labels(self) -> set[int]:
        """Every label the index knows that is not live: cold or tombstoned."""
        with self._lock.reading():
            return self._labels.not_live()

    def cold_labels(self) -> set[int]:
        with self._lock.reading():
            return self._labels.cold()

    def contains(self, label: int) -> bool:
        """Whether `label` is known, live, cold or tombstoned."""
        with self._lock.reading():
            return self._labels.holds(label)

    def live_among(self, labels: Labels) -> Labels:
        """Those of `labels` that are live, in their order."""
        label_array = as_labels(labels, "labels")
        with self._lock.reading():
            return self._labels.live_among(label_array)

    def is_live(self, label: int) -> bool:
        with self._lock.reading():
            return self._labels.is_live(label)

    def add(self, labels: Labels, vectors: Vectors) -> None:
        """Insert new labelled vectors; known labels (live or tombstoned) are skipped."""
        label_array, vector_array = as_labelled(labels, vectors, self._dim)
        unique, counts = np.unique(label_array, return_counts=True)
        if (counts > 1).any():
            repeated = unique[counts > 1].tolist()
            raise InvalidIndexInput(f"labels repeated within one add: {preview(repeated)}")
        with self._lock.writing():
            fresh = self._labels.unknown_positions(label_array)
            if not fresh:
                return
            new_labels = label_array[fresh]
            self._ensure_capacity(int(self._engine.element_count) + len(fresh))
            self._engine.add_items(vector_array[fresh], new_labels, num_threads=_ADD_THREADS)
            self._labels.add_live(new_labels)
            self._unsaved_changes += 1

    def knn_many(
        self,
        vectors: Vectors,
        k: int,
        *,
        allowed: AbstractSet[int] | None = None,
        cold: bool = False,
    ) -> tuple[Labels, Distances]:
        """Nearest live neighbours of each row (with `cold`, nearest cold ones), as (labels,
        cosine distances), both (n, k').

        k' = min(k, live count), or with `allowed` min(k, live labels in it): only those
        are returned. Each row is ordered by (distance, label), so ties come out the same
        on every peer.
        """
        queries = as_vectors(vectors, self._dim, "query vectors")
        check_positive("k", k, minimum=0)
        with self._lock.reading():
            width = min(k, self._labels.eligible(allowed, cold=cold))
            if width == 0 or len(queries) == 0:
                return empty_answer(len(queries), width)
            fetch = self._labels.overfetch(width, cold=cold) if allowed is None else None
            wide = None if fetch is None else search_engine(self._engine, queries, fetch, None)
            picked = None if wide is None else self._pick(wide, width, cold)
        if picked is None:
            return self._filtered(queries, k, allowed, cold)
        return self._completed(picked, queries, k, cold)

    def knn_tiers(
        self, vectors: Vectors, k_live: int, k_cold: int
    ) -> tuple[tuple[Labels, Distances], tuple[Labels, Distances]]:
        """`knn_many` of the live tier (`k_live`) and of the cold one (`k_cold`) from one
        search of the graph, where one tier alone would widen it as far: what recall asks
        of a store with a cold tier."""
        queries = as_vectors(vectors, self._dim, "query vectors")
        with self._lock.reading():
            widths = (min(k_live, self._labels.live_count), min(k_cold, self._labels.cold_count))
            live_fetch = self._labels.overfetch(widths[0])
            cold_fetch = self._labels.overfetch(widths[1], cold=True)
            wide = None
            if live_fetch and cold_fetch and all(widths) and len(queries):
                fetch = max(live_fetch, cold_fetch)
                wide = search_engine(self._engine, queries, fetch, None)
            if wide is not None:
                live, cold = self._pick(wide, widths[0], False), self._pick(wide, widths[1], True)
        if wide is None:
            return self.knn_many(queries, k_live), self.knn_many(queries, k_cold, cold=True)
        return self._completed(live, queries, k_live, False), self._completed(
            cold, queries, k_cold, True
        )

    def vectors(self, labels: Labels) -> Vectors:
        """The stored (unit-length) vectors of live `labels`, shape (len(labels), dim)."""
        label_array = as_labels(labels, "labels")
        with self._lock.reading():
            absent = self._labels.not_live_among(label_array)
            if absent:
                reason = "cold or tombstoned" if self._labels.all_not_live(absent) else "not live"
                raise LabelNotLive(f"labels {reason} in {self._path}: {preview(absent)}")
            return self._items(label_array)

    def live_vectors(self, labels: Labels) -> tuple[Vectors, Flags]:
        """(`vectors` of those of `labels` that are live, in their order; which are)."""
        label_array = as_labels(labels, "labels")
        with self._lock.reading():
            live = np.isin(label_array, self._labels.live_among(label_array))
            return self._items(label_array[live]), live

    def _items(self, labels: Labels) -> Vectors:
        """The engine's vectors of live `labels` (under the caller's read lock)."""
        if len(labels) == 0:
            return np.zeros((0, self._dim), dtype=np.float32)
        found = self._engine.get_items(labels, return_type="numpy")
        return np.ascontiguousarray(found, dtype=np.float32)

    def save(self, stamp: str) -> str:
        """Write the index, then its sealed meta, each atomically; `stamp` names the database
        state. Returns the identity of this save, for the database to record."""
        if not isinstance(stamp, str):
            raise InvalidIndexInput(f"stamp must be a str, got {type(stamp).__name__}")
        with self._lock.reading():
            identity = save_engine(
                self._engine,
                self._path,
                dim=self._dim,
                index_version=self._index_version,
                stamp=stamp,
                deleted=self._labels.not_live(),
                cold=self._labels.cold(),
            )
            self._stamp = stamp
            self._identity = identity
            self._saved_changes += self._unsaved_changes
            self._unsaved_changes = 0
        return identity

    def is_saved_at(self, stamp: str) -> bool:
        """Whether the file holds exactly this index for the database state `stamp`: saved
        or loaded with that stamp and not changed since (saving again would write the same
        graph under a new identity)."""
        with self._lock.reading():
            return self._identity is not None and self._stamp == stamp and not self._unsaved_changes

    def adopt_tombstones(self, labels: Labels) -> None:
        """Remember tombstones that were never added, so a later add cannot revive them."""
        with self._lock.writing():
            self._labels.adopt_tombstones(labels)
            self._unsaved_changes += 1

    def _ensure_capacity(self, needed: int) -> None:
        capacity = int(self._engine.get_max_elements())
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= GROWTH_FACTOR
        self._engine.resize_index(capacity)
