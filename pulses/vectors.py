"""The array types every folder shares: what a vector is, not how it is made, and the
columns of labels, numbers and flags kept beside vectors."""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

#: One embedding, shape (dim,): float32, of unit length where it came from the model.
Vector: TypeAlias = npt.NDArray[np.float32]
#: Embeddings as rows, shape (n, dim).
Vectors: TypeAlias = npt.NDArray[np.float32]
#: Chunk labels (the rowids the index and the store share), one per row.
Labels: TypeAlias = npt.NDArray[np.int64]
#: A number per chunk.
Floats: TypeAlias = npt.NDArray[np.float64]
#: A yes or no per chunk.
Flags: TypeAlias = npt.NDArray[np.bool_]
