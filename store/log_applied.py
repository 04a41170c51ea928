"""The `applied_segments` and `seen_entries` tables: what this store took from the shared log.

Both are keyed (a segment by its key, an entry by its id) and written once, in the
transaction that applied them: an entry or a segment read again is skipped, never applied
twice. A segment is recorded only once all its entries are.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms

_SEGMENT_APPLIED: Final = "SELECT 1 FROM applied_segments WHERE key = ?"
_RECORD_SEGMENT: Final = (
    "INSERT INTO applied_segments (key, applied_at, entries, rejected, skipped) "
    "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING"
)
_ENTRY_SEEN: Final = "SELECT 1 FROM seen_entries WHERE entry_id = ?"
_RECORD_ENTRY: Final = (
    "INSERT INTO seen_entries (entry_id, kind, hlc, origin, status, reason) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entry_id) DO NOTHING"
)


class AppliedLogQueries(TableQueries):
    def segment_applied(self, key: str) -> bool:
        return self._one(_SEGMENT_APPLIED, (key,)) is not None

    def record_segment(
        self, key: str, *, entries: int, rejected: int, skipped: int, now_ms: int
    ) -> None:
        self.conn.execute(_RECORD_SEGMENT, (key, iso_from_ms(now_ms), entries, rejected, skipped))

    def entry_seen(self, entry_id: str) -> bool:
        return self._one(_ENTRY_SEEN, (entry_id,)) is not None

    def record_entry(
        self, entry_id: str, *, kind: str, hlc: int, origin: str, status: str, reason: str | None
    ) -> None:
        self.conn.execute(_RECORD_ENTRY, (entry_id, kind, hlc, origin, status, reason))
