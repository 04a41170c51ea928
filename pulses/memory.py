"""An in-memory SalienceState: for tests, benchmarks and replaying a log without a database."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from dreamcycle.pulses.constants import SALIENCE_MAX, SALIENCE_MIN


class InvalidSalience(ValueError):
    """A salience or pin floor outside [SALIENCE_MIN, SALIENCE_MAX], or not a number."""


def _checked(value: float, what: str, label: int) -> float:
    if not (math.isfinite(value) and SALIENCE_MIN <= value <= SALIENCE_MAX):
        raise InvalidSalience(
            f"{what} of chunk {label} must be in [{SALIENCE_MIN}, {SALIENCE_MAX}], got {value}"
        )
    return float(value)


class InMemorySalience:
    """Salience, pin floors and tombstones of chunks, keyed by label.

    A label never seen has salience SALIENCE_MAX (a new chunk), floor SALIENCE_MIN and
    is live, matching the observations table's column defaults.
    """

    def __init__(
        self,
        saliences: Mapping[int, float] | None = None,
        pin_floors: Mapping[int, float] | None = None,
        tombstoned: Iterable[int] = (),
    ) -> None:
        self._salience: dict[int, float] = {}
        self._pin_floor: dict[int, float] = {}
        self._tombstoned: set[int] = set()
        for label, value in (saliences or {}).items():
            self.set_salience(label, value)
        for label, floor in (pin_floors or {}).items():
            self.pin(label, floor)
        for label in tombstoned:
            self.tombstone(label)

    # ---- SalienceState --------------------------------------------------------

    def salience(self, label: int) -> float:
        return self._salience.get(label, SALIENCE_MAX)

    def pin_floor(self, label: int) -> float:
        return self._pin_floor.get(label, SALIENCE_MIN)

    def is_tombstoned(self, label: int) -> bool:
        return label in self._tombstoned

    def set_salience(self, label: int, value: float) -> None:
        self._salience[label] = _checked(value, "salience", label)

    # ---- setup ----------------------------------------------------------------

    def add(self, label: int, salience: float = SALIENCE_MAX) -> None:
        """Register a chunk so that it appears in `snapshot()`."""
        self.set_salience(label, salience)

    def pin(self, label: int, floor: float) -> None:
        """Set the pin floor; salience below it is raised to it, as the invariant demands."""
        self._pin_floor[label] = _checked(floor, "pin floor", label)
        self._salience[label] = max(self.salience(label), self._pin_floor[label])

    def tombstone(self, label: int) -> None:
        self._tombstoned.add(label)

    # ---- views ----------------------------------------------------------------

    def labels(self) -> list[int]:
        """Every label with a recorded salience, floor or tombstone, ascending."""
        return sorted(self._salience.keys() | self._pin_floor.keys() | self._tombstoned)

    def snapshot(self) -> dict[int, float]:
        """Salience of every known label, in ascending label order."""
        return {label: self.salience(label) for label in self.labels()}

    def tombstones(self) -> frozenset[int]:
        return frozenset(self._tombstoned)

    def copy(self) -> InMemorySalience:
        clone = InMemorySalience()
        clone._salience = dict(self._salience)
        clone._pin_floor = dict(self._pin_floor)
        clone._tombstoned = set(self._tombstoned)
        return clone
