"""How recall searches the cold tier: exactly while it is small, through the live index's
graph once large.

An exact search reads every cold embedding per query, a cost (and a copy of the tier in
memory) that grows with the tier. The live index keeps every cold chunk in its graph, out
of live searches (store/index_graph.py): from `recall.cold_graph_from` cold chunks on,
recall asks it for the nearest cold chunks instead, approximately, as the live tier is
searched. No second graph is built and no copy of the tier is held (scripts/bench_scale.py
measures the memory at a million chunks; scripts/bench_recall.py `--cold-share` the time).

The index and the database can disagree for a moment (a sweep commits before the index
follows, and a one-shot command reads the saved index): chunks cold in the database that
the index does not hold apart are searched exactly beside it (the pending ones), and those
it holds apart that are not cold are dropped from its answer.

The cold search runs in the caller's thread. Recall asks the index for both tiers in one
search of the graph (`start`, then `HnswIndex.knn_tiers`), which either tier alone would
widen as far (store/index_labels.py `OVERFETCH` says how each keeps to its tier without
calling back into Python). Which chunks are cold never depends on the
index: only which cold candidates a query finds, and ranking then scores every candidate
by its exact cosine.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.memo import StampedCache
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.ranking import Measured, best_labels
from dreamcycle.pulses.vectors import Labels, Vector
from dreamcycle.store import read_paths, tiers
from dreamcycle.store.database import tier_stamp
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.index_input import Distances
from dreamcycle.store.read_paths import StoredVectors

__all__ = ["EXACT_CACHE", "ColdQuery", "ColdSearch"]

#: The cache's entry for the whole cold tier's embeddings (ColdSearch.cold_vectors).
EXACT_CACHE = "cold"


@dataclass(frozen=True)
class _Remainder:
    """Where the index's cold labels and the database's cold tier differ, at one tier stamp
    and one state of the index's cold labels."""

    tiers_at: str
    index_cold_changes: int
    index_id: int
    pending_labels: npt.NDArray[np.int64]
    pending_vectors: npt.NDArray[np.float32]
    #: How many of the index's cold labels the tier no longer holds.
    stale: int


@dataclass(frozen=True)
class ColdQuery:
    """One query's search of the cold tier, its database reads done: `answered` already
    (an exact search), or to finish with the index's `width` nearest cold labels."""

    answered: Measured | None
    width: int = 0
    merge: Callable[[tuple[Labels, Distances] | None], Measured] | None = None

    def finish(self, found: tuple[Labels, Distances] | None = None) -> Measured:
        """The answer, from the index's `found` (None: searched now)."""
        if self.answered is not None:
            return self.answered
        assert self.merge is not None, "a query not answered has a merge"
        return self.merge(found)


class ColdSearch:
    """The cold tier's nearest chunks to a query. Safe to share between threads.

    `graph_from` 0 searches exactly at every size. `cache` and `vectors` are those of the recall state the search belongs to
    (daemon/recall/state.py): the exact search keeps a small cold tier's embeddings in one,
    and pending chunks are read through the other.
    """

    def __init__(
        self,
        graph_from: int = 0,
        *,
        cache: StampedCache | None = None,
        vectors: StoredVectors | None = None,
    ) -> None:
        if graph_from < 0:
            raise ValueError(f"graph_from must be >= 0, got {graph_from}")
        self.cache = cache if cache is not None else StampedCache()
        self.vectors = vectors if vectors is not None else StoredVectors()
        self.graph_from = graph_from
        self._remainder: _Remainder | None = None
        #: The last search read nothing per query beyond what it keeps per state.
        self._quick = False

    @property
    def quick(self) -> bool:
        """Whether the last search was cheap to repeat at the same database state: a small
        tier searched exactly (its embeddings kept), or a large one through the index with
        what the index misses known. False until the first search."""
        return self._quick

    def candidates(
        self,
        rt: Runtime,
        stamp: str,
        cold: frozenset[int],
        vector: Vector,
        n: int,
        index: HnswIndex | None,
    ) -> list[int]:
        """Up to `n` cold chunks nearest to `vector`, best first; `cold` is the cold tier
        at the database state `stamp`, `index` the live index (None: none usable)."""
        found: list[int] = self.start(rt, stamp, cold, vector, n, index).finish().labels.tolist()
        return found

    def start(
        self,
        rt: Runtime,
        stamp: str,
        cold: frozenset[int],
        vector: Vector,
        n: int,
        index: HnswIndex | None,
    ) -> ColdQuery:
        """`candidates`, started: what reads the database runs now, in the caller's snapshot.
        The query it returns finishes with the cosines the index measured (none from an
        exact search: ranking computes those from the stored embeddings); its search of the
        index's cold labels the caller may make itself (`ColdQuery.width`), with its search
        of the live tier (`HnswIndex.knn_tiers`)."""
        if not cold or n <= 0:
            self._quick = True
            return ColdQuery(Measured.unmeasured([]))
        if not self.through_index(rt, cold, index):
            self._quick = self._small(cold)
            return ColdQuery(Measured.unmeasured(self._exact(rt, stamp, vector, n)))
        assert index is not None, "through_index needs one"
        remainder = self._remainder_of(rt, stamp, cold, index)
        self._quick = True
        return ColdQuery(
            None, n + remainder.stale, functools.partial(_merged, index, vector, n, cold, remainder)
        )

    def through_index(self, rt: Runtime, cold: AbstractSet[int], index: HnswIndex | None) -> bool:
        """Whether a search of the tier `cold` goes through `index` rather than exactly."""
        return (
            not self._small(cold)
            and index is not None
            and index.index_version == rt.embedder.index_version
        )

    def _small(self, cold: AbstractSet[int]) -> bool:
        return self.graph_from == 0 or len(cold) < self.graph_from

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
        self, rt: Runtime, stamp: str, cold: frozenset[int], index: HnswIndex
    ) -> _Remainder:
        tiers_at = tier_stamp(stamp)
        changes = index.cold_changes
        found = self._remainder
        if found is not None and (found.tiers_at, found.index_cold_changes, found.index_id) == (
            tiers_at,
            changes,
            id(index),
        ):
            return found
        held_apart = index.cold_labels()
        pending = np.array(sorted(cold - held_apart), dtype=np.int64)
        vectors, present = self.vectors.gather(rt.db, pending, rt.embedder.index_version)
        if not len(vectors):
            vectors = np.zeros((0, rt.embedder.dim), dtype=np.float32)
        remainder = _Remainder(
            tiers_at, changes, id(index), pending[present], vectors, len(held_apart - cold)
        )
        # Not kept from inside a write transaction: a rollback would undo its stamp.
        if not read_paths.in_write_transaction(rt.db):
            self._remainder = remainder
        return remainder


def _merged(
    index: HnswIndex,
    vector: Vector,
    n: int,
    cold: frozenset[int],
    remainder: _Remainder,
    found: tuple[Labels, Distances] | None,
) -> Measured:
    """The `n` nearest of the index's cold labels that are cold in `cold` (`found`, or
    searched now) and of the chunks it has not caught up with, with their cosines."""
    if found is None:
        found = index.knn_many(vector[None, :], n + remainder.stale, cold=True)
    row, cosines = found[0][0], 1.0 - found[1][0].astype(np.float64)
    keep = np.fromiter((int(label) in cold for label in row), dtype=np.bool_, count=len(row))
    labels, cosines = row[keep], cosines[keep]
    if len(remainder.pending_labels):
        labels = np.concatenate([labels, remainder.pending_labels])
        cosines = np.concatenate([cosines, remainder.pending_vectors @ vector])
    best = best_labels(labels, cosines, n)
    cosine_of = dict(zip(labels.tolist(), cosines.tolist(), strict=True))
    return Measured(
        np.array(best, dtype=np.int64),
        np.array([cosine_of[label] for label in best], dtype=np.float64),
    )
