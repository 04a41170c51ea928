"""Per-chunk salience held in memory for a cycle, written back in one batch.

The daemon is the only writer of the salience column, so one cache loaded at
start-up and topped up with new rows stays exact; `flush` writes what changed
inside the caller's transaction, `reload` throws away what a rollback undid.

Each column is a numpy array indexed by rowid rather than a dict: dicts of boxed floats
took many times the memory and load time at a large store (scripts/bench_scale.py
measures start-up and peak memory).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final, TypeVar

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Flags, Floats
from dreamcycle.store.database import Database
from dreamcycle.store.observations import DELETION_POLICIES

#: Rows read per query at a load: bounds the rows held as Python tuples at once.
LOAD_BATCH: Final = 100_000
#: The deletion policy that lets the sweep prune a chunk (every other one protects it).
_PRUNABLE: Final = "auto_prune"

_Cell = TypeVar("_Cell", bound=np.generic)


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
        # Whether a rowid is loaded (a row of the store, or set since): the dict's keys.
        self._known: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._salience: npt.NDArray[np.float64] = np.zeros(0)
        self._floor: npt.NDArray[np.float64] = np.zeros(0)
        # Each chunk's deletion policy, as its position in DELETION_POLICIES.
        self._policy: npt.NDArray[np.int16] = np.zeros(0, dtype=np.int16)
        self._tombstoned: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._cold: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._cold_count = 0
        self._dirty: dict[int, float] = {}
        self._loaded_up_to = 0
        self._undo: _Undo | None = None
        self.refresh()

    def _grow_to(self, rowid: int) -> None:
        """Room for `rowid` in every column (doubling, so that growth costs amortized O(1))."""
        size = len(self._known)
        if rowid < size:
            return
        grown = max(rowid + 1, 2 * size, 1024)

        def wider(column: npt.NDArray[_Cell]) -> npt.NDArray[_Cell]:
            bigger = np.zeros(grown, dtype=column.dtype)
            bigger[:size] = column
            return bigger

        self._known = wider(self._known)
        self._salience = wider(self._salience)
        self._floor = wider(self._floor)
        self._policy = wider(self._policy)
        self._tombstoned = wider(self._tombstoned)
        self._cold = wider(self._cold)

    def _set_cold_flag(self, label: int, cold: bool) -> None:
        if bool(self._cold[label]) != cold:
            self._cold[label] = cold
            self._cold_count += 1 if cold else -1

    def refresh(self) -> int:
        """Load chunks added since the last load; returns how many."""
        if self._undo is None:
            return self._load_all_after()
        added = 0
        for row in self._db.salience_rows(after_rowid=self._loaded_up_to):
            rowid = row.rowid
            self._remember(rowid)
            self._grow_to(rowid)
            self._known[rowid] = True
            self._salience[rowid] = row.salience
            self._floor[rowid] = row.pin_floor
            self._policy[rowid] = DELETION_POLICIES.index(row.deletion_policy)
            self._tombstoned[rowid] = row.tombstoned
            self._set_cold_flag(rowid, row.cold)
            self._loaded_up_to = rowid
            added += 1
        return added

    def _load_all_after(self) -> int:
        """`refresh` outside a step that may be undone: whole columns at a time (at start-up
        every chunk of the store is loaded)."""
        added = 0
        while len(
            rows := self._db.salience_columns(after_rowid=self._loaded_up_to, limit=LOAD_BATCH)
        ):
            ids = rows[:, 0].astype(np.int64)
            self._grow_to(int(ids[-1]))
            self._known[ids] = True
            self._salience[ids] = rows[:, 1]
            self._floor[ids] = rows[:, 2]
            self._tombstoned[ids] = rows[:, 3] != 0
            self._policy[ids] = rows[:, 4].astype(np.int16)
            was_cold = int(np.count_nonzero(self._cold[ids]))
            self._cold[ids] = rows[:, 5] != 0
            self._cold_count += int(np.count_nonzero(self._cold[ids])) - was_cold
            self._loaded_up_to = int(ids[-1])
            added += len(rows)
        return added

    def reload(self) -> None:
        for column in (self._known, self._tombstoned, self._cold):
            column[:] = False
        self._cold_count = 0
        self._dirty.clear()
        self._loaded_up_to = 0
        self.refresh()

    def _has(self, label: int) -> bool:
        return 0 <= label < len(self._known) and bool(self._known[label])

    def _load_newer(self, label: int) -> None:
        """Chunks the API saved after the last refresh are admitted and indexed already:
        load them when a phase first meets one."""
        if label > self._loaded_up_to and not self._has(label):
            self.refresh()

    def _loaded(self, label: int) -> int:
        """`label`, loaded first if new; KeyError if the store has no such chunk."""
        self._load_newer(label)
        if not self._has(label):
            raise KeyError(label)
        return label

    # ---- SalienceState -----------------------------------------------------------

    # Each loads first, then reads the column: a load may replace the column's array, and
    # `self._salience[self._loaded(label)]` would index the one read before it.

    def salience(self, label: int) -> float:
        at = self._loaded(label)
        return float(self._salience[at])

    def pin_floor(self, label: int) -> float:
        at = self._loaded(label)
        return float(self._floor[at])

    def is_tombstoned(self, label: int) -> bool:
        self._load_newer(label)
        return not self._has(label) or bool(self._tombstoned[label])

    def set_salience(self, label: int, value: float) -> None:
        self._remember(label)
        self._grow_to(label)
        self._known[label] = True
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
        known = self._has(label)
        undo.salience[label] = float(self._salience[label]) if known else None
        undo.dirty[label] = self._dirty.get(label)
        if known:
            undo.floor[label] = float(self._floor[label])
            if self._tombstoned[label]:
                undo.tombstoned.add(label)
            if self._cold[label]:
                undo.cold.add(label)

    def _restore(self, undo: _Undo) -> None:
        for label, value in undo.salience.items():
            if value is None:  # loaded inside the step: the row is rolled back too
                if label < len(self._known):
                    self._known[label] = False
                    self._tombstoned[label] = False
                    self._set_cold_flag(label, False)
            else:
                self._salience[label] = value
                self._floor[label] = undo.floor[label]
                self._tombstoned[label] = label in undo.tombstoned
                self._set_cold_flag(label, label in undo.cold)
            previous = undo.dirty[label]
            if previous is None:
                self._dirty.pop(label, None)
            else:
                self._dirty[label] = previous
        self._loaded_up_to = undo.loaded_up_to

    # ---- daemon-side ---------------------------------------------------------------

    def mark_tombstoned(self, label: int) -> None:
        self._remember(label)
        self._grow_to(label)
        self._tombstoned[label] = True

    def set_pin_floor(self, label: int, floor: float) -> None:
        self._remember(label)
        self._grow_to(label)
        self._floor[label] = floor

    def set_cold(self, label: int, cold: bool) -> None:
        """Move a chunk between the live and the cold tier (it keeps its salience)."""
        self._remember(label)
        self._grow_to(label)
        self._set_cold_flag(label, cold)

    def sweep_view(
        self, labels: Sequence[int] | npt.NDArray[np.int64]
    ) -> tuple[Floats, Flags, Flags, Flags]:
        """For the sweep, by label: salience, pinned, protected from pruning, tombstoned."""
        ids = np.asarray(labels, dtype=np.int64)
        if len(ids):
            self._load_newer(int(ids.max()))
        in_range = (ids >= 0) & (ids < len(self._known))
        at = np.where(in_range, ids, 0)
        known = in_range & self._known[at]
        protected = known & (self._policy[at] != DELETION_POLICIES.index(_PRUNABLE))
        return (
            np.where(known, self._salience[at], 0.0),
            known & (self._floor[at] > 0),
            protected,
            ~known | self._tombstoned[at],
        )

    def is_cold(self, label: int) -> bool:
        return 0 <= label < len(self._cold) and bool(self._cold[label])

    def any_cold(self) -> bool:
        """Whether the cold tier holds anything (lets the pulse loop skip a lookup)."""
        return self._cold_count > 0

    def live(self) -> list[int]:
        """Chunks neither tombstoned nor cold."""
        live: list[int] = np.flatnonzero(self._known & ~self._tombstoned & ~self._cold).tolist()
        return live

    def deletion_policy(self, label: int) -> str:
        at = self._loaded(label)
        return DELETION_POLICIES[int(self._policy[at])]

    def flush(self, *, decayed_at_ms: int | None = None, decayed: Sequence[int] = ()) -> int:
        """Write changed values (inside the caller's transaction); returns how many. With
        `decayed_at_ms`, the `decayed` chunks are recorded as decayed up to then in the same
        writes (`Database.write_salience`)."""
        count = len(self._dirty)
        if count or decayed_at_ms is not None:
            self._db.write_salience(self._dirty, decayed_at_ms=decayed_at_ms, decayed=decayed)
            self._dirty.clear()
        return count
