"""Many pulses' k-NN queries answered from a few batched searches.

Propagation asks the index, pulse by pulse, for the neighbours of the seed and then of
each hop's frontier. Those answers depend on the index alone, never on salience, so before
a batch of pulses is applied the first two hops of all of them can be asked at once: one
search for every seed, one for every chunk the seeds reach. The index spreads a batch
over all cores, and pulses seeded near each other share their frontier chunks, which are
asked once.

An answer is kept only while the index is unchanged (its `generation`): a chunk revived,
added or deleted drops every answer kept. So propagation through the cache sees what it
would have seen asking the index itself, bit for bit, provided the index answers each row
of a batch as it would answer that row alone (store.index_graph.HnswIndex does).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.graph import ChangingNeighbourIndex
from dreamcycle.pulses.propagate import seed_vectors
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.pulses.vectors import Vectors

__all__ = ["NeighbourCache"]

#: One row's answer: its labels and distances, as the index gave them.
_Answer = tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]
#: A query row's bytes and the k it was asked with.
_QueryKey = tuple[bytes, int]


class NeighbourCache:
    """A NeighbourIndex over `index` that keeps its answers while `index` is unchanged."""

    def __init__(self, index: ChangingNeighbourIndex) -> None:
        self._index = index
        self._generation = index.generation
        self._answers: dict[_QueryKey, _Answer] = {}
        self._vectors: dict[int, npt.NDArray[np.float32]] = {}
        #: Searches asked of the index (a batch counts once).
        self.searches = 0

    def prefetch(self, pulses: Iterable[SalientPulse]) -> None:
        """Ask the first two hops of every pulse that spreads, a search per hop and per k.

        A pulse whose seed the index would refuse (the wrong length, not finite) is left
        out: propagating it refuses it on its own, and must not take the others' searches
        with it.
        """
        by_k: defaultdict[int, list[SalientPulse]] = defaultdict(list)
        for pulse in pulses:
            if pulse.kind is PulseKind.FORGET or pulse.max_hops == 0 or pulse.k < 1:
                continue
            seed = np.asarray(pulse.seed_embedding)
            if seed.shape != (self._index.dim,) or not np.isfinite(seed).all():
                continue
            by_k[pulse.k].append(pulse)
        for k, spreading in sorted(by_k.items()):
            seeds = np.concatenate([seed_vectors(pulse) for pulse in spreading])
            labels, _ = self.knn_many(seeds, k)
            reached = [
                row for pulse, row in zip(spreading, labels, strict=True) if pulse.max_hops > 1
            ]
            frontier = np.unique(np.concatenate(reached)) if reached else np.zeros(0, np.int64)
            if len(frontier):
                # A stored vector finds itself first: the second hop asks for one more.
                self.knn_many(self.vectors(frontier), k + 1)

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """The index's answer for each row: kept ones as they were, the others in one search."""
        self._drop_if_changed()
        rows = np.ascontiguousarray(vectors, dtype=np.float32)
        if rows.ndim != 2 or len(rows) == 0:
            self.searches += 1
            return self._index.knn_many(rows, k)
        keys = [(row.tobytes(), k) for row in rows]
        asked = list(dict.fromkeys(key for key in keys if key not in self._answers))
        if asked:
            positions = {key: at for at, key in enumerate(keys)}
            labels, distances = self._index.knn_many(rows[[positions[key] for key in asked]], k)
            self.searches += 1
            for key, found, apart in zip(asked, labels, distances, strict=True):
                self._answers[key] = (found, apart)
        answers = [self._answers[key] for key in keys]
        if len({len(found) for found, _ in answers}) > 1:
            # Answers of different widths: the index changed under a search. Ask it whole.
            self._answers.clear()
            return self.knn_many(rows, k)
        return np.stack([found for found, _ in answers]), np.stack([apart for _, apart in answers])

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        """The index's stored vectors of `labels`, kept as the answers are."""
        self._drop_if_changed()
        wanted = np.asarray(labels, dtype=np.int64)
        missing = [label for label in dict.fromkeys(wanted.tolist()) if label not in self._vectors]
        if missing:
            found = self._index.vectors(np.asarray(missing, dtype=np.int64))
            self._vectors.update(zip(missing, found, strict=True))
        if not len(wanted):
            return np.zeros((0, self._index.dim), dtype=np.float32)
        return np.stack([self._vectors[label] for label in wanted.tolist()])

    def _drop_if_changed(self) -> None:
        generation = self._index.generation
        if generation != self._generation:
            self._answers.clear()
            self._vectors.clear()
            self._generation = generation
