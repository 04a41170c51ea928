"""Per-chunk salience held in memory for a cycle, written back in one batch.

The daemon is the only writer of the salience column, so one cache loaded at
start-up and topped up with new rows stays exact; `flush` writes what changed
inside the caller's transaction, `reload` throws away what a rollback undid.
"""

from __future__ import annotations

from store.database import Database


class SalienceCache:
    """Satisfies the pulse engine's SalienceState protocol."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._salience: dict[int, float] = {}
        self._floor: dict[int, float] = {}
        self._policy: dict[int, str] = {}
        self._tombstoned: set[int] = set()
        self._dirty: dict[int, float] = {}
        self._loaded_up_to = 0
        self.refresh()

    def refresh(self) -> int:
        """Load chunks added since the last load; returns how many."""
        added = 0
        for rowid, salience, floor, tombstoned, policy in self._db.salience_rows(
            after_rowid=self._loaded_up_to
        ):
            self._salience[rowid] = salience
            self._floor[rowid] = floor
            self._policy[rowid] = policy
            if tombstoned:
                self._tombstoned.add(rowid)
            self._loaded_up_to = rowid
            added += 1
        return added

    def reload(self) -> None:
        self._salience.clear()
        self._floor.clear()
        self._policy.clear()
        self._tombstoned.clear()
        self._dirty.clear()
        self._loaded_up_to = 0
        self.refresh()

    # ---- SalienceState -----------------------------------------------------------

    def salience(self, label: int) -> float:
        return self._salience[label]

    def pin_floor(self, label: int) -> float:
        return self._floor[label]

    def is_tombstoned(self, label: int) -> bool:
        return label in self._tombstoned or label not in self._salience

    def set_salience(self, label: int, value: float) -> None:
        self._salience[label] = value
        self._dirty[label] = value

    # ---- daemon-side ---------------------------------------------------------------

    def mark_tombstoned(self, label: int) -> None:
        self._tombstoned.add(label)

    def set_pin_floor(self, label: int, floor: float) -> None:
        self._floor[label] = floor

    def live(self) -> list[int]:
        return sorted(label for label in self._salience if label not in self._tombstoned)

    def deletion_policy(self, label: int) -> str:
        return self._policy[label]

    def flush(self) -> int:
        """Write changed values (inside the caller's transaction); returns how many."""
        count = len(self._dirty)
        if count:
            self._db.write_salience(self._dirty)
            self._dirty.clear()
        return count
