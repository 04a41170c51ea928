"""An exact NeighbourIndex over numpy arrays, so pulse tests are deterministic."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.kernel import COSINE_DISTANCE_MAX, COSINE_DISTANCE_MIN
from dreamcycle.pulses.vectors import Vectors


class UnknownLabel(KeyError):
    """A label that was never added (or was deleted) was asked for."""


def _unit(vector: npt.ArrayLike) -> npt.NDArray[np.float32]:
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    if norm == 0.0:
        raise ValueError("cannot index a zero vector")
    return (array / norm).astype(np.float32)


class BruteForceIndex:
    """Cosine k-NN by exhaustive dot products; ties ordered by (distance, label).

    Vectors are normalised on add and on query, as hnswlib's cosine space does.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._vectors: dict[int, npt.NDArray[np.float32]] = {}
        self._deleted: set[int] = set()
        #: Adds and deletions so far, as store.index_graph.HnswIndex counts them.
        self.generation = 0

    def add(self, label: int, vector: npt.ArrayLike) -> None:
        unit = _unit(vector)
        if unit.shape != (self.dim,):
            raise ValueError(f"vector of label {label} has shape {unit.shape}, want ({self.dim},)")
        self._vectors[label] = unit
        self._deleted.discard(label)
        self.generation += 1

    def mark_deleted(self, label: int) -> None:
        if label not in self._vectors:
            raise UnknownLabel(label)
        self._deleted.add(label)
        self.generation += 1

    def live_labels(self) -> list[int]:
        return sorted(label for label in self._vectors if label not in self._deleted)

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        queries = np.asarray(vectors, dtype=np.float64)
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise ValueError(f"queries have shape {queries.shape}, want (n, {self.dim})")
        norms = np.linalg.norm(queries, axis=1, keepdims=True)
        queries = queries / np.where(norms == 0.0, 1.0, norms)
        live = self.live_labels()
        width = min(k, len(live))
        labels_out = np.empty((queries.shape[0], width), dtype=np.int64)
        distances_out = np.empty((queries.shape[0], width), dtype=np.float32)
        if width == 0:
            return labels_out, distances_out
        live_labels = np.asarray(live, dtype=np.int64)
        matrix = np.stack([self._vectors[label] for label in live]).astype(np.float64)
        for row in range(queries.shape[0]):
            # Row by row, as hnswlib searches: a row's answer never depends on its batch
            # (one product of the whole batch may round a row differently).
            distances = np.clip(
                1.0 - matrix @ queries[row], COSINE_DISTANCE_MIN, COSINE_DISTANCE_MAX
            ).astype(np.float32)
            order = np.lexsort((live_labels, distances))[:width]
            labels_out[row] = live_labels[order]
            distances_out[row] = distances[order]
        return labels_out, distances_out

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        missing = [int(label) for label in labels if int(label) not in self._vectors]
        if missing:
            raise UnknownLabel(f"no vectors for labels {missing}")
        if len(labels) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        return np.stack([self._vectors[int(label)] for label in labels])
