"""How the live index asks its hnswlib engine: one search of a batch, and the exhaustive
search a starved one falls back to. `HnswIndex.knn_many` decides which, under its lock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store.index_input import IndexQueryFailed

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
