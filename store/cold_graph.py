"""An HNSW graph over the cold tier as it stood at one moment, for recall to search.

Recall searches the cold tier beside the live index, so that a swept chunk can still
answer. An exact search reads every cold embedding per query, so its cost grows with the
tier. A graph answers in a fraction of the time, approximately, as the live index does (scripts/bench_recall.py `--cold-share`
measures recall with a cold tier).

A graph is built whole and never changed afterwards, so queries run side by side with no
lock and a new graph replaces an old one as one reference. Its elements are added on one
thread with hnswlib's fixed level seed, in label order: the same cold tier always gives
the same graph.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import hnswlib
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Flags

__all__ = ["BUILD_BATCH", "ColdGraph", "VectorsOf", "build_cold_graph", "build_cold_graph_reading"]

#: The stored vectors of some labels, as StoredVectors.gather gives them: (the vectors of
#: those that have one, in order; which of the labels have one).
VectorsOf = Callable[[npt.NDArray[np.int64]], tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]]

#: Elements added per step of a build: between steps, `stop` may end it early.
BUILD_BATCH: Final = 2_048
_SPACE: Final = "cosine"
_LEVEL_SEED: Final = 100
#: One thread: the order of insertion, hence the graph, is the labels' order.
_ADD_THREADS: Final = 1
#: A single query gains nothing from more threads.
_QUERY_THREADS: Final = 1


class ColdGraph:
    """The nearest of the labels it was built from, to one query vector."""

    def __init__(self, engine: hnswlib.Index, labels: frozenset[int]) -> None:
        """Use `build_cold_graph`."""
        self._engine = engine
        self.labels = labels

    def nearest(
        self, vector: npt.NDArray[np.float32], n: int, skip: frozenset[int]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """Up to `n` labels not in `skip` and their cosines to `vector`, nearest first (ties
        in hnswlib's order: the caller orders them).

        `skip` holds labels that have left the cold tier since the build: the search asks
        for that many more, then drops them.
        """
        width = min(n + len(skip), len(self.labels))
        if width <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        found, distances = self._engine.knn_query(
            vector[None, :], k=width, num_threads=_QUERY_THREADS
        )
        labels = np.asarray(found[0], dtype=np.int64)
        cosines = 1.0 - np.asarray(distances[0], dtype=np.float64)
        if skip:
            keep = np.array([label not in skip for label in labels.tolist()], dtype=np.bool_)
            labels, cosines = labels[keep], cosines[keep]
        return labels[:n], cosines[:n]


def build_cold_graph(
    labels: npt.NDArray[np.int64],
    vectors: npt.NDArray[np.float32],
    *,
    m: int,
    ef_construction: int,
    ef: int,
    stop: Callable[[], bool] = lambda: False,
) -> ColdGraph | None:
    """A graph of `labels` (sorted here) and their unit `vectors`; None when `stop` said so
    between two steps."""
    if len(labels) != len(vectors):
        raise ValueError(f"{len(labels)} labels for {len(vectors)} vectors")
    if np.any(labels[1:] < labels[:-1]):
        # The tier's labels come sorted: a second copy of every vector (as much memory
        # again as the tier's embeddings, for the whole build) only when they do not.
        order = np.argsort(labels, kind="stable")
        labels, vectors = labels[order], vectors[order]
    every = np.ones(BUILD_BATCH, dtype=np.bool_)

    def rows_of(part: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float32], Flags]:
        # A run of the sorted labels: its rows are a slice, read without a copy.
        start = int(np.searchsorted(labels, part[0]))
        return vectors[start : start + len(part)], every[: len(part)]

    return build_cold_graph_reading(
        labels, rows_of, m=m, ef_construction=ef_construction, ef=ef, stop=stop
    )


def build_cold_graph_reading(
    labels: npt.NDArray[np.int64],
    vectors_of: VectorsOf,
    *,
    m: int,
    ef_construction: int,
    ef: int,
    stop: Callable[[], bool] = lambda: False,
) -> ColdGraph | None:
    """The graph build_cold_graph gives of `labels` and their vectors, reading BUILD_BATCH
    vectors at a time through `vectors_of`: the tier's vectors are never all held beside
    the graph's own copy of them, which would double the build's memory. Labels
    `vectors_of` finds no vector for are left out."""
    ordered = np.sort(np.asarray(labels, dtype=np.int64))
    engine: hnswlib.Index | None = None
    added: list[npt.NDArray[np.int64]] = []
    for start in range(0, len(ordered), BUILD_BATCH):
        if stop():
            return None
        part = ordered[start : start + BUILD_BATCH]
        vectors, present = vectors_of(part)
        if not len(vectors):
            continue
        if engine is None:
            engine = _engine(int(vectors.shape[1]), len(ordered), m, ef_construction, ef)
        engine.add_items(vectors, part[present], num_threads=_ADD_THREADS)
        added.append(part[present])
    if engine is None:
        engine = _engine(1, 1, m, ef_construction, ef)
    return ColdGraph(engine, frozenset(np.concatenate(added).tolist() if added else ()))


def _engine(dim: int, elements: int, m: int, ef_construction: int, ef: int) -> hnswlib.Index:
    engine = hnswlib.Index(space=_SPACE, dim=dim)
    engine.init_index(
        max_elements=max(elements, 1), ef_construction=ef_construction, M=m, random_seed=_LEVEL_SEED
    )
    engine.set_ef(ef)
    return engine
