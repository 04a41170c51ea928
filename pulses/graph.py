"""The two views of local chunks that the pulse engine needs.

`store` satisfies these structurally (it never imports this module's package);
tests satisfy them with a brute-force in-memory index.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Vectors


class NeighbourIndex(Protocol):
    """Cosine k-NN over live (non-tombstoned) chunks, labelled by observation rowid."""

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Nearest neighbours of each row of `vectors` (shape (n, dim), float32).

        Returns (labels, distances), both shape (n, k'), where k' = min(k, live count)
        and distance = 1 - cosine similarity, in [0, 2], ascending along each row.
        With no live chunks, both have shape (n, 0).
        """
        ...

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        """The stored (unit-normalised) embeddings of `labels`, shape (len(labels), dim)."""
        ...


class ChangingNeighbourIndex(NeighbourIndex, Protocol):
    """A NeighbourIndex that counts its changes, so answers can be kept while it has none."""

    @property
    def dim(self) -> int:
        """The length of every vector it holds and is asked about."""
        ...

    @property
    def generation(self) -> int:
        """Changes so far (adds, deletions, revivals): while it stays the same, the same
        query gets the same answer."""
        ...


class SalienceState(Protocol):
    """Read/write access to per-chunk salience during one application step."""

    def salience(self, label: int) -> float: ...

    def pin_floor(self, label: int) -> float: ...

    def is_tombstoned(self, label: int) -> bool: ...

    def set_salience(self, label: int, value: float) -> None: ...
