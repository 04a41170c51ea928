"""The embedding types every folder shares: what a vector is, not how it is made."""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
import numpy.typing as npt

#: One embedding, shape (dim,): float32, of unit length where it came from the model.
Vector: TypeAlias = npt.NDArray[np.float32]
#: Embeddings as rows, shape (n, dim).
Vectors: TypeAlias = npt.NDArray[np.float32]
