"""The live index's label bookkeeping: which labels (observation rowids) are live, kept
as a set and as an array of flags, which are cold and which deleted.

Not thread-safe on its own: `HnswIndex` reads and changes it under its lock, in step
with its hnswlib engine.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Labels

#: Labels (rowids) from this one on are checked one by one rather than through the
#: array of live flags, which so stays within 64 MiB.
MAX_MASKED_LABEL: Final = 1 << 26
#: While some chunks are cold, a search of one tier asks hnswlib for this many times the
#: neighbours that tier's share of the graph calls for, unfiltered, and keeps that tier's:
#: hnswlib's own filter calls back into Python, under the GIL, for every element it
#: visits, so any Python thread beside it (a cycle) held every search up
#: (scripts/bench_recall.py, raw k-NN with cycles running). A row left short is asked
#: again through the filter.
OVERFETCH: Final = 1.5
#: ... plus this many, for the small widths propagation asks for.
OVERFETCH_SLACK: Final = 8
#: Below this share of the graph, a tier is searched through the filter: a wider search
#: would ask for too many neighbours.
MIN_OVERFETCH_SHARE: Final = 0.1


class LabelMask:
    """One flag per label below MAX_MASKED_LABEL, for checking many labels in one array
    operation."""

    def __init__(self, labels: Iterable[int]) -> None:
        self._flags: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.mark(np.fromiter(labels, dtype=np.int64), live=True)

    def mark(self, labels: Labels | list[int], *, live: bool) -> None:
        ids = np.asarray(labels, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < MAX_MASKED_LABEL)]
        if len(ids) == 0:
            return
        needed = int(ids.max()) + 1
        if needed > len(self._flags):
            grown = np.zeros(max(needed, 2 * len(self._flags)), dtype=np.bool_)
            grown[: len(self._flags)] = self._flags
            self._flags = grown
        self._flags[ids] = live

    def among(self, labels: Labels, beyond: AbstractSet[int]) -> npt.NDArray[np.bool_]:
        """Which of `labels` are marked; those outside the flags are looked up in
        `beyond` (the whole set of marked labels)."""
        flags = self._flags
        inside = (labels >= 0) & (labels < len(flags))
        if inside.all():
            return flags[labels]
        marked = np.zeros(len(labels), dtype=np.bool_)
        marked[inside] = flags[labels[inside]]
        outside = np.flatnonzero(~inside)
        marked[outside] = [int(label) in beyond for label in labels[outside].tolist()]
        return marked


class LiveLabels:
    """The labels an index knows, each in one of three states:

    - live: searched by default;
    - cold: held by the engine, unmarked, but out of live searches: searched only as the
      cold tier (one graph for both tiers, so the cold tier needs no copy of its own);
    - deleted: marked deleted in the engine (tombstoned, or cold in a file saved before
      the engine kept cold chunks), or never added: never searched.

    Only a restore makes a cold or deleted label live again.
    """

    def __init__(self, live: set[int], deleted: set[int], cold: set[int] | None = None) -> None:
        self._live = live
        self._mask = LabelMask(live)
        self._deleted = deleted
        self._cold = cold if cold is not None else set()
        self._cold_mask = LabelMask(self._cold)
        #: Changes of the cold set: what a cold search kept about it stays right until then.
        self.cold_changes = 0

    @property
    def live_count(self) -> int:
        return len(self._live)

    @property
    def cold_count(self) -> int:
        return len(self._cold)

    def known(self) -> set[int]:
        """Every label, live, cold or deleted."""
        return self._live | self._cold | self._deleted

    def not_live(self) -> set[int]:
        """Cold and deleted labels."""
        return self._deleted | self._cold

    def cold(self) -> set[int]:
        return set(self._cold)

    def holds(self, label: int) -> bool:
        """Whether `label` is known, in any state."""
        return label in self._live or label in self._cold or label in self._deleted

    def is_live(self, label: int) -> bool:
        return label in self._live

    def live_among(self, labels: Labels) -> Labels:
        """Those of `labels` that are live, in their order (one array operation for
        thousands of labels, where probing the set of live labels takes a cache miss
        each)."""
        return labels[self._mask.among(labels, self._live)]

    def eligible(self, allowed: AbstractSet[int] | None, *, cold: bool = False) -> int:
        """How many labels a search may return: live ones (with `cold`, cold ones), or
        those of them in `allowed`."""
        searched = self._cold if cold else self._live
        return len(searched) if allowed is None else len(searched & allowed)

    def admit(
        self, allowed: AbstractSet[int] | None, *, cold: bool = False
    ) -> Callable[[int], bool] | None:
        """The filter that keeps a search to its labels (None: every label the engine does
        not mark deleted). Builtin methods of sets, not lambdas: hnswlib calls the filter
        once per element it visits."""
        if cold:
            return (
                self._cold.__contains__ if allowed is None else (self._cold & allowed).__contains__
            )
        if not self._cold:
            return None if allowed is None else allowed.__contains__
        return self._live.__contains__ if allowed is None else (self._live & allowed).__contains__

    def overfetch(self, width: int, *, cold: bool = False) -> int | None:
        """How many neighbours to ask for, unfiltered, to find `width` of one tier (see
        OVERFETCH); None to search through the filter (no cold chunks, or a small tier)."""
        if not self._cold:
            return None
        unmarked = len(self._live) + len(self._cold)
        share = (len(self._cold) if cold else len(self._live)) / unmarked
        if share < MIN_OVERFETCH_SHARE:
            return None
        return min(unmarked, math.ceil(width / share * OVERFETCH) + OVERFETCH_SLACK)

    def in_tier(
        self, labels: npt.NDArray[np.int64], *, cold: bool = False
    ) -> npt.NDArray[np.bool_]:
        """Which of `labels` (any shape) are live, or with `cold` cold."""
        flat = labels.ravel()
        if cold:
            return self._cold_mask.among(flat, self._cold).reshape(labels.shape)
        return self._mask.among(flat, self._live).reshape(labels.shape)

    def unknown_positions(self, labels: Labels) -> list[int]:
        """The positions in `labels` of those in no state."""
        return [position for position, label in enumerate(labels.tolist()) if not self.holds(label)]

    def not_live_among(self, labels: Labels) -> list[int]:
        """Those of `labels` that are not live, in their order."""
        return [label for label in labels.tolist() if label not in self._live]

    def all_not_live(self, labels: Iterable[int]) -> bool:
        return all(label in self._deleted or label in self._cold for label in labels)

    def searchable_of(self, labels: Labels) -> list[int]:
        """The live or cold ones of `labels` (those the engine does not mark deleted), each
        once, in ascending order."""
        return [
            label
            for label in sorted(set(labels.tolist()))
            if label in self._live or label in self._cold
        ]

    def to_restore(
        self, labels: Labels, held: Callable[[], AbstractSet[int]]
    ) -> tuple[list[int], list[int], list[int]]:
        """Of the labels not live, each once: the cold ones (the engine holds them
        unmarked), the deleted ones the engine holds (to unmark), and the positions in
        `labels` of those it never held (to add again). The engine's labels are read only
        when some are deleted."""
        cold: list[int] = []
        deleted: list[tuple[int, int]] = []
        missing: list[int] = []
        seen: set[int] = set()
        for position, label in enumerate(labels.tolist()):
            if label in self._live or label in seen:
                continue
            seen.add(label)
            if label in self._cold:
                cold.append(label)
            elif label in self._deleted:
                deleted.append((position, label))
            else:
                missing.append(position)
        if not deleted:
            return cold, [], missing
        engine_held = held()
        unmark = [label for _, label in deleted if label in engine_held]
        missing += [position for position, label in deleted if label not in engine_held]
        return cold, unmark, sorted(missing)

    def add_live(self, labels: Labels) -> None:
        self._live.update(labels.tolist())
        self._mask.mark(labels, live=True)

    def tombstone(self, labels: list[int]) -> None:
        """Move live or cold `labels` to the deleted ones."""
        cold = self._cold.intersection(labels)
        if cold:
            self._cold.difference_update(cold)
            self._cold_mask.mark(list(cold), live=False)
            self.cold_changes += 1
        self._live.difference_update(labels)
        self._deleted.update(labels)
        # One array operation for a sweep's thousands of labels.
        self._mask.mark(labels, live=False)

    def to_cool(
        self, labels: Labels, held: Callable[[], AbstractSet[int]]
    ) -> tuple[list[int], list[int]]:
        """Of `labels`, each once in ascending order: the live ones, and the deleted ones
        the engine `held` (a cold chunk in a file saved before the engine kept cold chunks,
        to unmark); the engine's labels are read only when some are deleted."""
        unique = sorted(set(labels.tolist()))
        live = [label for label in unique if label in self._live]
        deleted = [label for label in unique if label in self._deleted]
        if not deleted:
            return live, []
        engine_held = held()
        return live, [label for label in deleted if label in engine_held]

    def cool(self, labels: list[int]) -> None:
        """Move live or deleted `labels` to the cold ones."""
        if not labels:
            return
        self._live.difference_update(labels)
        self._deleted.difference_update(labels)
        self._cold.update(labels)
        self._mask.mark(labels, live=False)
        self._cold_mask.mark(labels, live=True)
        self.cold_changes += 1

    def revive(self, revived: list[int], readded: list[int]) -> None:
        """Make the cold or deleted `revived` live again, and forget the tombstones of
        `readded` (labels the engine never held, about to be added)."""
        cold = self._cold.intersection(revived)
        if cold:
            self._cold.difference_update(cold)
            self._cold_mask.mark(list(cold), live=False)
            self.cold_changes += 1
        self._deleted.difference_update(revived)
        self._deleted.difference_update(readded)
        self._live.update(revived)
        self._mask.mark(revived, live=True)

    def adopt_tombstones(self, labels: Labels) -> None:
        """Remember tombstones that were never added, so a later add cannot revive them."""
        self._deleted.update(labels.tolist())
