"""The `outbox` and `segments_out` tables: this peer's entries on their way to the log.

An entry is queued once by id (and, when a request names itself, once per request key);
it is applied here first, then packed into a segment. A segment is stored whole with its
key before it is written to the log, so a retry after a crash or an outage publishes the
identical object; the entries it carries point at it and are not packed again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final, NamedTuple

from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms


class PreparedSegment(NamedTuple):
    """A segment stored for publishing and not yet written to the log."""

    seq: int
    key: str
    data: bytes
    hlc: int


_QUEUE: Final = (
    "INSERT INTO outbox (entry_id, kind, hlc, body, created_at, applied, request_key) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1"
)
_ENTRY_OF_REQUEST: Final = "SELECT entry_id FROM outbox WHERE request_key = ?"
_UNAPPLIED: Final = "SELECT entry_id, body FROM outbox WHERE applied = 0 ORDER BY hlc, entry_id"
_UNAPPLIED_OF_KINDS: Final = (
    "SELECT entry_id, body FROM outbox "
    "WHERE applied = 0 AND kind IN (SELECT value FROM json_each(?)) ORDER BY hlc, entry_id"
)
_MARK_APPLIED: Final = "UPDATE outbox SET applied = 1 WHERE entry_id = ?"
_UNPUBLISHED: Final = (
    "SELECT entry_id, body FROM outbox WHERE segment_seq IS NULL AND applied = 1 "
    "ORDER BY hlc, entry_id LIMIT ?"
)
_INSERT_SEGMENT: Final = (
    "INSERT INTO segments_out (seq, key, data, hlc, status, created_at) "
    "VALUES (?, ?, ?, ?, 'prepared', ?)"
)
_PACK_ENTRY: Final = "UPDATE outbox SET segment_seq = ? WHERE entry_id = ?"
_PREPARED: Final = (
    "SELECT seq, key, data, hlc FROM segments_out WHERE status = 'prepared' ORDER BY seq"
)
_SEGMENT_WRITTEN: Final = "SELECT 1 FROM segments_out WHERE key = ?"
_FINISH_SEGMENT: Final = "UPDATE segments_out SET status = ? WHERE seq = ?"


def _entries(rows: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(str(r[0]), json.loads(r[1])) for r in rows]


class OutboxQueries(TableQueries):
    def outbox_add(
        self,
        entry_id: str,
        kind: str,
        hlc: int,
        body: dict[str, Any],
        *,
        now_ms: int,
        applied: bool = False,
        request_key: str | None = None,
    ) -> bool:
        """Queue one of this peer's entries. False if the same entry is already queued.

        `applied` says the entry's effect is already in this database (a local
        chunk's assert, say), so only publishing remains.
        """
        row = self._one(
            _QUEUE,
            (
                entry_id,
                kind,
                hlc,
                json.dumps(body, sort_keys=True, separators=(",", ":")),
                iso_from_ms(now_ms),
                int(applied),
                request_key,
            ),
        )
        return row is not None

    def request_entry(self, request_key: str) -> str | None:
        """The entry id an earlier identical request queued, if any."""
        row = self._one(_ENTRY_OF_REQUEST, (request_key,))
        return None if row is None else str(row[0])

    def outbox_unapplied(self) -> list[tuple[str, dict[str, Any]]]:
        return _entries(self._all(_UNAPPLIED))

    def outbox_unapplied_of_kinds(self, kinds: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """The entries of these kinds queued here and not applied yet, oldest first."""
        return _entries(self._all(_UNAPPLIED_OF_KINDS, (json.dumps(list(kinds)),)))

    def outbox_mark_applied(self, entry_ids: Sequence[str]) -> None:
        self.conn.executemany(_MARK_APPLIED, [(e,) for e in entry_ids])

    def outbox_unpublished(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        return _entries(self._all(_UNPUBLISHED, (limit,)))

    def prepare_segment(
        self, seq: int, key: str, data: bytes, hlc: int, entry_ids: Sequence[str], *, now_ms: int
    ) -> None:
        self.conn.execute(_INSERT_SEGMENT, (seq, key, data, hlc, iso_from_ms(now_ms)))
        self.conn.executemany(_PACK_ENTRY, [(seq, e) for e in entry_ids])

    def prepared_segments(self) -> list[PreparedSegment]:
        return [
            PreparedSegment(int(r[0]), str(r[1]), bytes(r[2]), int(r[3]))
            for r in self._all(_PREPARED)
        ]

    def segment_written(self, key: str) -> bool:
        """Whether this store prepared the segment `key` (for publishing under its name)."""
        return self._one(_SEGMENT_WRITTEN, (key,)) is not None

    def finish_segment(self, seq: int, status: str) -> None:
        self.conn.execute(_FINISH_SEGMENT, (status, seq))
