"""The `applied_pulses` table: every pulse this store has judged, and what became of it.

A pulse is recorded once, by id, in the transaction that applied (or refused) it, with the
journal step of its effect: a pulse seen before is never applied again, whichever peer's
segment brings it back.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms

_SEEN: Final = "SELECT 1 FROM applied_pulses WHERE pulse_id = ?"
_RECORD: Final = (
    "INSERT INTO applied_pulses "
    "(pulse_id, applied_at, journal_seq, origin_peer, status, reason, changed) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)


class PulseQueries(TableQueries):
    def pulse_seen(self, pulse_id: str) -> bool:
        return self._one(_SEEN, (pulse_id,)) is not None

    def record_pulse(
        self,
        pulse_id: str,
        *,
        status: str,
        origin_peer: str,
        reason: str | None,
        changed: int,
        journal_seq: int | None,
        now_ms: int,
    ) -> None:
        self.conn.execute(
            _RECORD,
            (pulse_id, iso_from_ms(now_ms), journal_seq, origin_peer, status, reason, changed),
        )
