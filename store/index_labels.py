"""The live index's label bookkeeping: which labels (observation rowids) are live, kept
as a set and as an array of flags, and which are tombstoned.

Not thread-safe on its own: `HnswIndex` reads and changes it under its lock, in step
with its hnswlib engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Labels

#: Labels (rowids) from this one on are checked one by one rather than through the
#: array of live flags, which so stays within 64 MiB.
MAX_MASKED_LABEL: Final = 1 << 26


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
    """The labels an index knows: live ones, and tombstoned ones (deleted, or cold) that
    only a restore makes live again."""

    def __init__(self, live: set[int], deleted: set[int]) -> None:
        self._live = live
        self._mask = LabelMask(live)
        self._deleted = deleted

    @property
    def live_count(self) -> int:
        return len(self._live)

    def known(self) -> set[int]:
        """Every label, live or tombstoned."""
        return self._live | self._deleted

    def tombstoned(self) -> set[int]:
        return set(self._deleted)

    def holds(self, label: int) -> bool:
        """Whether `label` is known, live or tombstoned."""
        return label in self._live or label in self._deleted

    def is_live(self, label: int) -> bool:
        return label in self._live

    def live_among(self, labels: Labels) -> Labels:
        """Those of `labels` that are live, in their order (one array operation for
        thousands of labels, where probing the set of live labels takes a cache miss
        each)."""
        return labels[self._mask.among(labels, self._live)]

    def eligible(self, allowed: AbstractSet[int] | None) -> int:
        """How many labels are live, or live and in `allowed`."""
        return len(self._live) if allowed is None else len(self._live & allowed)

    def unknown_positions(self, labels: Labels) -> list[int]:
        """The positions in `labels` of those neither live nor tombstoned."""
        return [
            position
            for position, label in enumerate(labels.tolist())
            if label not in self._live and label not in self._deleted
        ]

    def not_live(self, labels: Labels) -> list[int]:
        """Those of `labels` that are not live, in their order."""
        return [label for label in labels.tolist() if label not in self._live]

    def all_tombstoned(self, labels: Iterable[int]) -> bool:
        return all(label in self._deleted for label in labels)

    def live_of(self, labels: Labels) -> list[int]:
        """The live ones of `labels`, each once, in ascending order."""
        return [label for label in sorted(set(labels.tolist())) if label in self._live]

    def to_restore(self, labels: Labels, held: AbstractSet[int]) -> tuple[list[int], list[int]]:
        """Of the labels not live: those the engine `held` (each once, to unmark) and the
        positions in `labels` of those it never held (to add again)."""
        revived: list[int] = []
        seen: set[int] = set()
        missing: list[int] = []
        for position, label in enumerate(labels.tolist()):
            if label in self._live or label in seen:
                continue
            if label in held:
                revived.append(label)
                seen.add(label)
            else:
                missing.append(position)
        return revived, missing

    def add_live(self, labels: Labels) -> None:
        self._live.update(labels.tolist())
        self._mask.mark(labels, live=True)

    def tombstone(self, labels: list[int]) -> None:
        """Move live `labels` to the tombstones."""
        self._live.difference_update(labels)
        self._deleted.update(labels)
        # One array operation for a sweep's thousands of labels.
        self._mask.mark(labels, live=False)

    def revive(self, revived: list[int], readded: list[int]) -> None:
        """Make the tombstoned `revived` live again, and forget the tombstones of
        `readded` (labels the engine never held, about to be added)."""
        self._deleted.difference_update(revived)
        self._deleted.difference_update(readded)
        self._live.update(revived)
        self._mask.mark(revived, live=True)

    def adopt_tombstones(self, labels: Labels) -> None:
        """Remember tombstones that were never added, so a later add cannot revive them."""
        self._deleted.update(labels.tolist())
