"""The `cycles` table: one row per dream cycle, its status and what each phase reported.

A cycle is 'running' from its start until it finishes; one left 'running' by a process
that died is marked 'interrupted' at the next start, never resumed.
"""

from __future__ import annotations

import json
from typing import Any, Final

from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms

_START: Final = "INSERT INTO cycles (started_at, status) VALUES (?, 'running')"
_FINISH: Final = "UPDATE cycles SET finished_at = ?, status = ?, phases_json = ? WHERE id = ?"
_ABANDON_RUNNING: Final = (
    "UPDATE cycles SET status = 'interrupted' WHERE status = 'running' RETURNING id"
)
_LAST: Final = (
    "SELECT id, started_at, finished_at, status, phases_json FROM cycles ORDER BY id DESC LIMIT 1"
)


class CycleQueries(TableQueries):
    def start_cycle(self, now_ms: int) -> int:
        self.conn.execute(_START, (iso_from_ms(now_ms),))
        return self.conn.last_insert_rowid()

    def finish_cycle(
        self, cycle_id: int, *, status: str, phases: dict[str, Any], now_ms: int
    ) -> None:
        self.conn.execute(
            _FINISH, (iso_from_ms(now_ms), status, json.dumps(phases, sort_keys=True), cycle_id)
        )

    def abandon_running_cycles(self) -> int:
        """Cycles left 'running' by a process that died: mark them 'interrupted'."""
        return len(self._all(_ABANDON_RUNNING))

    def last_cycle(self) -> dict[str, Any] | None:
        row = self._one(_LAST)
        if row is None:
            return None
        return {
            "id": int(row[0]),
            "started_at": row[1],
            "finished_at": row[2],
            "status": row[3],
            "phases": json.loads(row[4]),
        }
