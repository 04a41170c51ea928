"""The observations' salience, pin floor and decay columns as stored.

The daemon alone writes salience (store/salience.py holds it for a cycle and writes back
what changed); `mark_decayed` moves a chunk's decay mark only forward in time, with the
salience the decay produced written in the same transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from dreamcycle.store.observations import COLD_ROWS, DELETION_POLICIES, EFFICACY_TYPE
from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms


@dataclass(frozen=True)
class SalienceRow:
    rowid: int
    salience: float
    pin_floor: float
    tombstoned: bool
    deletion_policy: str
    cold: bool


class DecayCandidate(NamedTuple):
    """A chunk due for decay: its kind's half-life, scaled by its stability, applies from
    `decay_from` (ISO time)."""

    rowid: int
    kind: str
    decay_from: str
    stability: float


_SALIENCE_ROWS: Final = (
    "SELECT id, salience, pin_floor, deleted_at IS NOT NULL, deletion_policy, "
    "cold_at IS NOT NULL FROM observations INDEXED BY observations_salience_state "
    "WHERE id > ? ORDER BY id"
)
_POLICY_NUMBER: Final = (
    "CASE deletion_policy "
    + " ".join(f"WHEN '{policy}' THEN {n}" for n, policy in enumerate(DELETION_POLICIES))
    + " END"
)
#: The tombstone, tier and deletion policy of a chunk as one number: bit 0 tombstoned, bit
#: 1 cold, the policy above them. Every column a query returns is a Python object for
#: each row, and for a large store those objects are most of a start-up's read.
_STATE_NUMBER: Final = (
    f"(deleted_at IS NOT NULL) + 2 * (cold_at IS NOT NULL) + 4 * {_POLICY_NUMBER}"
)
_SALIENCE_COLUMNS: Final = (
    f"SELECT id, salience, {_STATE_NUMBER} "
    "FROM observations INDEXED BY observations_salience_state "
    "WHERE id > ? ORDER BY id LIMIT ?"
)
#: Few chunks are pinned: their floors are read apart, the rest are 0.
_PIN_FLOORS_BETWEEN: Final = (
    "SELECT id, pin_floor FROM observations INDEXED BY observations_salience_state "
    "WHERE id > ? AND id <= ? AND pin_floor != 0"
)
_WRITE_SALIENCE: Final = "UPDATE observations SET salience = ? WHERE id = ?"
_WRITE_SALIENCE_DECAYED: Final = (
    "UPDATE observations SET salience = ?, last_decay_ts = ? WHERE id = ?"
)
_DECAY_FROM: Final = "coalesce(last_decay_ts, created_at)"
_DECAYABLE: Final = f"deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != '{EFFICACY_TYPE}'"
_STABILITIES: Final = "SELECT id, stability FROM observations"
_MARK_DECAYED: Final = "UPDATE observations SET last_decay_ts = ? WHERE id = ?"
_SET_PIN_FLOOR: Final = "UPDATE observations SET pin_floor = ?, updated_at = ? WHERE id = ?"
_LIVE_AND_COLD_SALIENCE: Final = (
    "SELECT id, salience FROM observations INDEXED BY observations_live WHERE deleted_at IS NULL"
)
_COLD_ROWIDS: Final = f"SELECT id {COLD_ROWS}"


class SalienceQueries(TableQueries):
    def salience_columns(self, *, after_rowid: int = 0, limit: int) -> npt.NDArray[np.float64]:
        """At most `limit` of the rows `salience_rows` names as one matrix of numbers, a
        row each: (rowid, salience, pin floor, tombstoned, deletion policy as its position
        in DELETION_POLICIES, cold), in rowid order (far quicker than named rows at a
        million chunks, where scripts/bench_scale.py measures start-up)."""
        rows = self._all(_SALIENCE_COLUMNS, (after_rowid, limit))
        read = np.array(rows, dtype=np.float64).reshape(len(rows), 3)
        columns = np.zeros((len(rows), 6), dtype=np.float64)
        if not len(rows):
            return columns
        ids = read[:, 0]
        state = read[:, 2].astype(np.int64)
        columns[:, 0] = ids
        columns[:, 1] = read[:, 1]
        columns[:, 3] = state & 1
        columns[:, 4] = state >> 2
        columns[:, 5] = (state >> 1) & 1
        floors = self._all(_PIN_FLOORS_BETWEEN, (after_rowid, int(ids[-1])))
        if floors:
            pinned = np.array(floors, dtype=np.float64).reshape(len(floors), 2)
            at = np.searchsorted(ids, pinned[:, 0])
            # Rows may change between the two reads: a floor only for a row the first read has.
            read_both = ids[np.minimum(at, len(ids) - 1)] == pinned[:, 0]
            columns[at[read_both], 2] = pinned[read_both, 1]
        return columns

    def salience_rows(self, *, after_rowid: int = 0) -> Iterator[SalienceRow]:
        """The salience state of every chunk, in rowid order."""
        for rowid, salience, floor, deleted, policy, cold in self._all(
            _SALIENCE_ROWS, (after_rowid,)
        ):
            yield SalienceRow(
                int(rowid), float(salience), float(floor), bool(deleted), str(policy), bool(cold)
            )

    def write_salience(
        self,
        values: dict[int, float],
        *,
        decayed_at_ms: int | None = None,
        decayed: Sequence[int] = (),
    ) -> None:
        """Write these saliences; with `decayed_at_ms`, also `mark_decayed(decayed_at_ms,
        decayed)` in the same update of each row: a chunk in both is written once. Each
        update rewrites the row, and a change of salience its entries in the indexes that
        hold salience as well."""
        marked = set(decayed) if decayed_at_ms is not None else set()
        self.conn.executemany(
            _WRITE_SALIENCE,
            [(value, rowid) for rowid, value in sorted(values.items()) if rowid not in marked],
        )
        if decayed_at_ms is None:
            return
        stamp = iso_from_ms(decayed_at_ms)
        self.conn.executemany(
            _WRITE_SALIENCE_DECAYED,
            [(values[rowid], stamp, rowid) for rowid in sorted(marked) if rowid in values],
        )
        self.mark_decayed(decayed_at_ms, [rowid for rowid in sorted(marked) if rowid not in values])

    def decay_candidates(
        self, *, due_by_ms: int | None = None, limit: int | None = None
    ) -> list[DecayCandidate]:
        """Live indexed chunks (cold ones too) whose decay counts from `due_by_ms` or
        earlier, the longest waiting first (ties: smaller rowid), at
        most `limit`: pulses.decay.due_for_decay in SQL, read from the observations_decay
        index (migration 0011)."""
        where = _DECAYABLE
        params: list[Any] = []
        if due_by_ms is not None:
            where += f" AND {_DECAY_FROM} <= ?"
            params.append(iso_from_ms(due_by_ms))
        params.append(-1 if limit is None else limit)
        return [
            DecayCandidate(int(r[0]), str(r[1]), str(r[2]), float(r[3]))
            for r in self._all(
                # Named: with a large store's statistics the planner took another index
                # and sorted every chunk in every cycle (scripts/bench_scale.py measures
                # cycles at a million chunks).
                f"SELECT id, kind, {_DECAY_FROM}, stability FROM observations "
                f"INDEXED BY observations_decay WHERE {where} "
                f"ORDER BY {_DECAY_FROM}, id LIMIT ?",
                tuple(params),
            )
        ]

    def stabilities(self) -> dict[int, float]:
        """Every chunk's stability, by rowid."""
        return {int(r[0]): float(r[1]) for r in self._all(_STABILITIES)}

    def mark_decayed(self, now_ms: int, rowids: Sequence[int]) -> None:
        """Record that these chunks were decayed up to `now_ms`."""
        stamp = iso_from_ms(now_ms)
        self.conn.executemany(_MARK_DECAYED, [(stamp, r) for r in rowids])

    def set_pin_floor(self, rowid: int, floor: float, *, now_ms: int) -> None:
        self.conn.execute(_SET_PIN_FLOOR, (floor, iso_from_ms(now_ms), rowid))

    def live_saliences(self) -> npt.NDArray[np.float64]:
        """The salience of every chunk neither tombstoned nor cold, in rowid order: read from
        observations_live and the cold tier's index, not from every row and its embedding."""
        rows = self._all(_LIVE_AND_COLD_SALIENCE)
        cold = [r[0] for r in self._all(_COLD_ROWIDS)]
        table = np.array(rows, dtype=np.float64).reshape(len(rows), 2)
        table = table[~np.isin(table[:, 0], np.array(cold, dtype=np.float64))]
        ordered: npt.NDArray[np.float64] = table[np.argsort(table[:, 0], kind="stable"), 1]
        return ordered
