"""Moving the live index's labels between its tiers: live, cold (kept in the graph, out of
live searches) and deleted (marked in hnswlib). `HnswIndex` takes these from `TierMoves`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dreamcycle.pulses.vectors import Labels, Vectors
from dreamcycle.store.index_input import as_labelled, as_labels
from dreamcycle.store.index_labels import LiveLabels
from dreamcycle.store.readers_writer_lock import ReadersWriterLock


class TierMoves:
    """The moves between tiers, on an index's engine, labels and lock (HnswIndex's)."""

    _dim: int
    _engine: Any
    _labels: LiveLabels
    _lock: ReadersWriterLock
    _unsaved_changes: int

    if TYPE_CHECKING:

        def add(self, labels: Labels, vectors: Vectors) -> None: ...

    def mark_deleted(self, labels: Labels) -> None:
        """Delete live or cold `labels` from every search (tombstones); unknown or already
        deleted labels are ignored."""
        label_array = as_labels(labels, "labels")
        with self._lock.writing():
            removed = self._labels.searchable_of(label_array)
            for label in removed:
                self._engine.mark_deleted(label)
                self._unsaved_changes += 1
            self._labels.tombstone(removed)

    def set_cold(self, labels: Labels) -> None:
        """Move live `labels` to the cold tier: kept in the graph, searched only with
        `cold`. Deleted labels the engine holds are unmarked into it too (cold chunks of a
        file saved when the engine marked them deleted); cold or unknown labels are ignored."""
        label_array = as_labels(labels, "labels")
        with self._lock.writing():
            live, unmark = self._labels.to_cool(label_array, self._held_labels)
            for label in unmark:
                self._engine.unmark_deleted(label)
            self._labels.cool(live + unmark)
            self._unsaved_changes += len(live) + len(unmark)

    def restore(self, labels: Labels, vectors: Vectors) -> None:
        """Make cold or deleted labels live again (a chunk revived): cold labels at once,
        deleted ones the engine holds unmarked, those it never held added with their vector.
        Live labels are left as they are."""
        label_array, vector_array = as_labelled(labels, vectors, self._dim)
        with self._lock.writing():
            cold, unmark, missing = self._labels.to_restore(label_array, self._held_labels)
            for label in unmark:
                self._engine.unmark_deleted(label)
            self._unsaved_changes += len(cold) + len(unmark)
            self._labels.revive(cold + unmark, label_array[missing].tolist())
        if missing:
            self.add(label_array[missing], vector_array[missing])

    def _held_labels(self) -> set[int]:
        """Every label the engine holds, marked deleted or not (under the caller's lock)."""
        return set(np.asarray(self._engine.get_ids_list(), dtype=np.int64).tolist())
