"""Per-chunk salience held in memory for a cycle, written back in one batch.

The daemon is the only writer of the salience column, so one cache loaded at
start-up and topped up with new rows stays exact; `flush` writes what changed
inside the caller's transaction, `reload` throws away what a rollback undid.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import repeat

import numpy as np

from dreamcycle.pulses.vectors import Flags, Floats
from dreamcycle.store.database import Database


@dataclass
class _Undo:
    """What to restore if the step being applied fails."""

    salience: dict[int, float | None] = field(default_factory=dict)
    dirty: dict[int, float | None] = field(default_factory=dict)
    floor: dict[int, float] = field(default_factory=dict)
    tombstoned: set[int] = field(default_factory=set)
    cold: set[int] = field(default_factory=set)
    loaded_up_to: int = 0


class SalienceCache:
    """Satisfies the pulse engine's SalienceState protocol."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._salience: dict[int, float] = {}
        self._floor: dict[int, float] = {}
        self._policy: dict[int, str] = {}
        self._tombstoned: set[int] = set()
        self._cold: set[int] = set()
        self._dirty: dict[int, float] = {}
        self._loaded_up_to = 0
        self._undo: _Undo | None = None
        self.refresh()

    def refresh(self) -> int:
        """Load chunks added since the last load; returns how many."""
        if self._undo is None:
            return self._load_all_after()
        added = 0
        for row in self._db.salience_rows(after_rowid=self._loaded_up_to):
            rowid = row.rowid
            self._remember(rowid)
            self._salience[rowid] = row.salience
            self._floor[rowid] = row.pin_floor
            self._policy[rowid] = row.deletion_policy
            if row.tombstoned:
                self._tombstoned.add(rowid)
            if row.cold:
                self._cold.add(rowid)
            self._loaded_up_to = rowid
            added += 1
        return added

    def _load_all_after(self) -> int:
        """`refresh` outside a step that may be undone: whole columns at a time (at start-up
        every chunk of the store is loaded)."""
        rows = self._db.salience_columns(after_rowid=self._loaded_up_to)
        if not rows:
            return 0
        ids, saliences, floors, deleted, policies, cold = zip(*rows, strict=True)
        # The columns' types make these floats and strings already (REAL and TEXT NOT NULL).
        self._salience.update(zip(ids, saliences, strict=True))
        self._floor.update(zip(ids, floors, strict=True))
        self._policy.update(zip(ids, policies, strict=True))
        self._tombstoned.update(i for i, gone in zip(ids, deleted, strict=True) if gone)
        self._cold.update(i for i, swept in zip(ids, cold, strict=True) if swept)
        self._loaded_up_to = int(ids[-1])
        return len(rows)

    def reload(self) -> None:
        self._salience.clear()
        self._floor.clear()
        self._policy.clear()
        self._tombstoned.clear()
        self._cold.clear()
        self._dirty.clear()
        self._loaded_up_to = 0
        self.refresh()

    def _load_newer(self, label: int) -> None:
        """Chunks the API saved after the last refresh are admitted and indexed already:
        load them when a phase first meets one."""
        if label > self._loaded_up_to and label not in self._salience:
            self.refresh()

    # ---- SalienceState -----------------------------------------------------------

    def salience(self, label: int) -> float:
        self._load_newer(label)
        return self._salience[label]

    def pin_floor(self, label: int) -> float:
        self._load_newer(label)
        return self._floor[label]

    def is_tombstoned(self, label: int) -> bool:
        self._load_newer(label)
        return label in self._tombstoned or label not in self._salience

    def set_salience(self, label: int, value: float) -> None:
        self._remember(label)
        self._salience[label] = value
        self._dirty[label] = value

    # ---- one step at a time ----------------------------------------------------------

    @contextmanager
    def atomic(self) -> Iterator[None]:
        """Changes made inside are undone if it raises (pair with a database savepoint)."""
        if self._undo is not None:
            yield
            return
        self._undo = _Undo(loaded_up_to=self._loaded_up_to)
        try:
            yield
        except BaseException:
            self._restore(self._undo)
            raise
        finally:
            self._undo = None

    def _remember(self, label: int) -> None:
        undo = self._undo
        if undo is None or label in undo.salience:
            return
        undo.salience[label] = self._salience.get(label)
        undo.dirty[label] = self._dirty.get(label)
        if label in self._floor:
            undo.floor[label] = self._floor[label]
        if label in self._tombstoned:
            undo.tombstoned.add(label)
        if label in self._cold:
            undo.cold.add(label)

    def _restore(self, undo: _Undo) -> None:
        for label, value in undo.salience.items():
            if value is None:  # loaded inside the step: the row is rolled back too
                self._salience.pop(label, None)
                self._floor.pop(label, None)
                self._policy.pop(label, None)
            else:
                self._salience[label] = value
            previous = undo.dirty[label]
            if previous is None:
                self._dirty.pop(label, None)
            else:
                self._dirty[label] = previous
            if label in undo.floor:
                self._floor[label] = undo.floor[label]
            if label in undo.tombstoned:
                self._tombstoned.add(label)
            else:
                self._tombstoned.discard(label)
            if label in undo.cold:
                self._cold.add(label)
            else:
                self._cold.discard(label)
        self._loaded_up_to = undo.loaded_up_to

    # ---- daemon-side ---------------------------------------------------------------

    def mark_tombstoned(self, label: int) -> None:
        self._remember(label)
        self._tombstoned.add(label)

    def set_pin_floor(self, label: int, floor: float) -> None:
        self._remember(label)
        self._floor[label] = floor

    def set_cold(self, label: int, cold: bool) -> None:
        """Move a chunk between the live and the cold tier (it keeps its salience)."""
        self._remember(label)
        if cold:
            self._cold.add(label)
        else:
            self._cold.discard(label)

    def sweep_view(self, labels: Sequence[int]) -> tuple[Floats, Flags, Flags, Flags]:
        """For the sweep, by label: salience, pinned, protected from pruning, tombstoned."""
        if labels:
            self._load_newer(max(labels))
        count = len(labels)
        salience, floor, policy = self._salience, self._floor, self._policy
        protected = {label for label, kind in policy.items() if kind != "auto_prune"}
        return (
            np.fromiter(map(salience.get, labels, repeat(0.0)), np.float64, count),
            np.fromiter(map(floor.get, labels, repeat(0.0)), np.float64, count) > 0,
            np.fromiter(map(protected.__contains__, labels), bool, count),
            np.fromiter(map(self._tombstoned.__contains__, labels), bool, count)
            | ~np.fromiter(map(salience.__contains__, labels), bool, count),
        )

    def is_cold(self, label: int) -> bool:
        return label in self._cold

    def any_cold(self) -> bool:
        """Whether the cold tier holds anything (lets the pulse loop skip a lookup)."""
        return bool(self._cold)

    def live(self) -> list[int]:
        """Chunks neither tombstoned nor cold."""
        return sorted(
            label
            for label in self._salience
            if label not in self._tombstoned and label not in self._cold
        )

    def deletion_policy(self, label: int) -> str:
        self._load_newer(label)
        return self._policy[label]

    def flush(self) -> int:
        """Write changed values (inside the caller's transaction); returns how many."""
        count = len(self._dirty)
        if count:
            self._db.write_salience(self._dirty)
            self._dirty.clear()
        return count
