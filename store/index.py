"""Opening the persisted HNSW index: the saved one if it matches the database, else one
rebuilt from the database's embeddings (`open_or_rebuild`).

The index is derived state: the database holds every embedding, so a missing,
corrupt, stale or foreign index file is rebuilt from it. This is also where the index's
public names are imported from: the index itself is `index_graph.HnswIndex`, its files
and why a saved one is unusable are `index_file`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np

from dreamcycle.pulses.vectors import Labels, Vectors
from dreamcycle.store.index_file import IndexUnusable, Unusable
from dreamcycle.store.index_graph import (
    DEFAULT_EF,
    DEFAULT_EF_CONSTRUCTION,
    DEFAULT_M,
    INITIAL_CAPACITY,
    HnswIndex,
)
from dreamcycle.store.index_input import InvalidIndexInput, as_labels, as_vectors, preview

__all__ = [
    "REBUILD_CHUNK_SIZE",
    "HnswIndex",
    "IndexUnusable",
    "LoadAll",
    "ProgressCallback",
    "Unusable",
    "open_or_rebuild",
]

#: Elements added per step of a rebuild, between progress reports.
REBUILD_CHUNK_SIZE: Final = 10_000

ProgressCallback = Callable[[int, int], None]
LoadAll = Callable[[], tuple[Labels, Vectors, Labels, Labels]]


def open_or_rebuild(
    path: Path,
    dim: int,
    index_version: str,
    *,
    expected_stamp: str,
    load_all: LoadAll,
    expected_identity: str | None = None,
    live_labels: Callable[[], Labels] | None = None,
    on_unusable: Callable[[IndexUnusable], None] | None = None,
    progress: ProgressCallback | None = None,
    m: int = DEFAULT_M,
    ef_construction: int = DEFAULT_EF_CONSTRUCTION,
    ef: int = DEFAULT_EF,
) -> tuple[HnswIndex, str | None]:
    """The saved index if it matches the database (reason None), else a fresh rebuild.

    `load_all` returns (labels of live and cold chunks, their vectors, the cold ones of
    them, tombstoned labels) from the database (`Database.index_contents`); tombstoned
    labels are remembered but never inserted. The rebuild inserts live and cold chunks
    together in ascending label order, then sets the cold ones apart, so every peer
    rebuilding the same state gets the same graph; `m` and
    `ef_construction` apply to rebuilds only. `expected_identity` and `live_labels` are
    checked as `HnswIndex.load` says; `on_unusable` hears why the saved index was not used
    before the rebuild starts. The rebuilt index is saved; the caller records its identity.
    """
    path = Path(path)
    try:
        index = HnswIndex.load(
            path,
            dim,
            index_version,
            ef=ef,
            expected_stamp=expected_stamp,
            expected_identity=expected_identity,
            live_labels=live_labels,
        )
    except IndexUnusable as unusable:
        if on_unusable is not None:
            on_unusable(unusable)
        reason = unusable.reason
    else:
        return index, None
    index = _rebuild(
        path,
        dim,
        index_version,
        load_all,
        progress,
        m=m,
        ef_construction=ef_construction,
        ef=ef,
    )
    index.save(expected_stamp)
    return index, reason


def _rebuild(
    path: Path,
    dim: int,
    index_version: str,
    load_all: LoadAll,
    progress: ProgressCallback | None,
    *,
    m: int,
    ef_construction: int,
    ef: int,
) -> HnswIndex:
    raw_held, raw_vectors, raw_cold, raw_deleted = load_all()
    held_labels = as_labels(raw_held, "live and cold labels from the database")
    held_vectors = as_vectors(raw_vectors, dim, "vectors from the database")
    cold_labels = as_labels(raw_cold, "cold labels from the database")
    deleted_labels = as_labels(raw_deleted, "tombstoned labels from the database")
    total = len(held_labels)
    if total != len(held_vectors):
        raise InvalidIndexInput(
            f"database gave {total} live and cold labels for {len(held_vectors)} vectors"
        )
    both = np.intersect1d(held_labels, deleted_labels)
    if len(both):
        raise InvalidIndexInput(
            f"database lists labels as both live or cold and tombstoned: {preview(both.tolist())}"
        )
    stray = np.setdiff1d(cold_labels, held_labels)
    if len(stray):
        raise InvalidIndexInput(
            f"database lists cold labels without a vector: {preview(stray.tolist())}"
        )
    index = HnswIndex.create(
        path,
        dim,
        index_version,
        m=m,
        ef_construction=ef_construction,
        ef=ef,
        capacity=max(INITIAL_CAPACITY, total),
    )
    index.adopt_tombstones(deleted_labels)
    order = np.argsort(held_labels, kind="stable")
    for start in range(0, total, REBUILD_CHUNK_SIZE):
        chunk = order[start : start + REBUILD_CHUNK_SIZE]
        index.add(held_labels[chunk], held_vectors[chunk])
        if progress is not None:
            progress(start + len(chunk), total)
    index.set_cold(cold_labels)
    return index
