"""The vector retriever under a filter that matches few chunks: an exact search of those
chunks' stored embeddings, in place of the index's own filtered search.

Through the index, a filter of m of N chunks visits about k x N / m chunks, each through
a Python callback, and misses some of the nearest; here the m chunks' embeddings are
compared with the query, at a cost in proportion to m, and none is missed. The recall
API chooses between the two by `recall.exact_filter_scale`; scripts/bench_filtered.py
measures both.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.ranking import best_labels
from dreamcycle.store.database import Database
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.read_paths import StoredVectors


def nearest_in_filter(
    db: Database,
    stored: StoredVectors,
    index: HnswIndex,
    vector: npt.NDArray[np.float32],
    n: int,
    allowed: AbstractSet[int],
) -> list[int]:
    """The `n` chunks of `allowed` live in `index` nearest to `vector`, by exact cosine
    over their stored embeddings (ties: lower rowid first): what the index returns with
    `allowed` as its filter, without its misses."""
    if n <= 0 or not allowed:
        return []
    # In rowid order, the matrix's rows are read front to back (much faster than in the
    # set's order; scripts/bench_filtered.py times the exact path).
    labels = index.live_among(np.sort(np.fromiter(allowed, dtype=np.int64, count=len(allowed))))
    matrix, present = stored.gather(db, labels, index.index_version)
    labels = labels[present]
    if len(labels) == 0:
        return []
    # Each cosine the one np.dot gives, as recall's re-scoring computes it, whatever the
    # number of rows (a matrix product sums in another order).
    return best_labels(labels, np.vecdot(matrix, vector), n)
