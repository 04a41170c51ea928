"""The live index's tiers: moving labels between live, cold (kept in the graph, out of
live searches) and deleted (marked in hnswlib), and keeping a search to one tier.
`HnswIndex` takes these from `Tiers`.

A search of one tier, while some chunks are cold, asks hnswlib for more neighbours than it
needs, unfiltered, and keeps its tier's (store/index_labels.py `OVERFETCH` says why not
hnswlib's filter); a row left short is asked again alone through the filter.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Labels, Vectors
from dreamcycle.store.index_input import (
    Distances,
    as_labelled,
    as_labels,
    empty_answer,
    ordered_answer,
    stacked_answers,
)
from dreamcycle.store.index_labels import LiveLabels
from dreamcycle.store.index_search import (
    RawAnswer,
    first_in_tier,
    search_engine,
    search_exhaustively,
)
from dreamcycle.store.readers_writer_lock import ReadersWriterLock


class Tiers:
    """The moves between tiers and the searches of one, on an index's engine, labels and
    lock (HnswIndex's)."""

    _path: Path
    _ef: int
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

    def _pick(
        self, wide: RawAnswer, width: int, cold: bool
    ) -> tuple[tuple[Labels, Distances], npt.NDArray[np.bool_]]:
        """One tier's first `width` of a wider search (under the caller's lock)."""
        flags = self._labels.in_tier(np.asarray(wide[0], dtype=np.int64), cold=cold)
        return first_in_tier(wide, flags, width)

    def _completed(
        self,
        picked: tuple[tuple[Labels, Distances], npt.NDArray[np.bool_]],
        queries: Vectors,
        k: int,
        cold: bool,
    ) -> tuple[Labels, Distances]:
        """The picked answer, each row the wider search left short asked again alone
        through the filter."""
        (labels, distances), short = picked
        if not short.any():
            return ordered_answer(labels, distances)
        rows = [ordered_answer(labels[[i]], distances[[i]]) if not short[i] else
                self._filtered(queries[[i]], k, None, cold) for i in range(len(queries))]  # fmt: skip
        return stacked_answers(rows)

    def _filtered(
        self, queries: Vectors, k: int, allowed: AbstractSet[int] | None, cold: bool
    ) -> tuple[Labels, Distances]:
        """`knn_many` through hnswlib's filter, which calls back into Python (under the GIL)
        for every element it visits."""
        with self._lock.reading():
            width = min(k, self._labels.eligible(allowed, cold=cold))
            if width == 0:
                return empty_answer(len(queries), width)
            admit = self._labels.admit(allowed, cold=cold)
            found = search_engine(self._engine, queries, width, admit)
        if found is None and len(queries) > 1:
            # Each row as it would be answered alone: a batch must not change any row's
            # answer (peers batch the same queries differently), and only the rows that
            # starve alone need the exhaustive search.
            return stacked_answers(
                [self._filtered(row[None, :], k, allowed, cold) for row in queries]
            )
        if found is None:
            with self._lock.writing():
                where = f"{self._labels.live_count} live chunks in {self._path}"
                found = search_exhaustively(
                    self._engine, queries, width, admit, ef=self._ef, where=where
                )
        return ordered_answer(*found)
