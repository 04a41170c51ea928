"""How the live index asks its hnswlib engine: one search of a batch, the exhaustive
search a starved one falls back to, and the picking of one tier's labels from a wider
search of both. `HnswIndex.knn_many` decides which, under its lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Labels, Vectors
from dreamcycle.store.index_input import Distances, IndexQueryFailed

#: Let hnswlib spread a batch of queries over all cores (results do not depend on it).
QUERY_THREADS: Final = -1

Filter = Callable[[int], bool] | None
RawAnswer = tuple[Any, Any]


def search_engine(engine: Any, queries: Vectors, width: int, admit: Filter) -> RawAnswer | None:
    """hnswlib's (labels, distances) for `queries`, None when a row starved (found fewer
    than `width`). hnswlib searches max(ef, k) wide on its own: no shared setting changes
    here, so searches run side by side."""
    try:
        found: RawAnswer = engine.knn_query(
            queries, k=width, num_threads=QUERY_THREADS, filter=admit
        )
    except RuntimeError:
        return None
    return found


def search_exhaustively(
    engine: Any, queries: Vectors, width: int, admit: Filter, *, ef: int, where: str
) -> RawAnswer:
    """Many tombstones (or a narrow filter) can starve a search: widen it to everything.

    The search breadth is shared by every query: the caller holds the index alone."""
    engine.set_ef(max(ef, width, int(engine.element_count)))
    try:
        found: RawAnswer = engine.knn_query(
            queries, k=width, num_threads=QUERY_THREADS, filter=admit
        )
    except RuntimeError as error:
        raise IndexQueryFailed(f"k-NN query for k={width} over {where} failed: {error}") from error
    finally:
        engine.set_ef(ef)
    return found


def first_in_tier(
    wide: RawAnswer, in_tier: npt.NDArray[np.bool_], width: int
) -> tuple[tuple[Labels, Distances], npt.NDArray[np.bool_]]:
    """Of a wider search's answer, each row's first `width` labels that `in_tier` flags,
    in the search's order; and which rows have fewer (their picks are meaningless)."""
    labels = np.asarray(wide[0], dtype=np.int64)
    distances = np.asarray(wide[1], dtype=np.float32)
    keep = in_tier & (np.cumsum(in_tier, axis=1) <= width)
    short: npt.NDArray[np.bool_] = keep.sum(axis=1) < width
    rows = np.flatnonzero(~short)
    picked_labels = np.zeros((len(labels), width), dtype=np.int64)
    picked_distances = np.zeros((len(labels), width), dtype=np.float32)
    picked_labels[rows] = labels[rows][keep[rows]].reshape(-1, width)
    picked_distances[rows] = distances[rows][keep[rows]].reshape(-1, width)
    return (picked_labels, picked_distances), short
