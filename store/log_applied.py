"""The `applied_segments` and `seen_entries` tables: what this store took from the shared log.

Both are keyed (a segment by its key, an entry by its id) and written once, in the
transaction that applied them: an entry or a segment read again is skipped, never applied
twice. A segment is recorded only once all its entries are.

`segments_awaiting_key` holds the few segments refused because their seal's key was not
trusted yet, to be read again once it is: at most a bounded number, for a bounded time.
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
_SET_ENTRY_STATUS: Final = "UPDATE seen_entries SET status = ?, reason = ? WHERE entry_id = ?"
_RECORD_ENTRY: Final = (
    "INSERT INTO seen_entries (entry_id, kind, hlc, origin, status, reason) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entry_id) DO NOTHING"
)

_AWAIT_KEY: Final = (
    "INSERT INTO segments_awaiting_key (key, key_id, segment_hlc) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO NOTHING"
)
_AWAITED_KEY_IDS: Final = "SELECT DISTINCT key_id FROM segments_awaiting_key"
_AWAITING_FOR_KEY: Final = (
    "SELECT key FROM segments_awaiting_key WHERE key_id = ? ORDER BY segment_hlc, key LIMIT ?"
)
_STOP_AWAITING: Final = "DELETE FROM segments_awaiting_key WHERE key = ?"
_FORGET_AWAITING_BEFORE: Final = "DELETE FROM segments_awaiting_key WHERE segment_hlc < ?"
# The newest `limit` are kept: an old segment is likelier compacted away meanwhile.
_KEEP_NEWEST_AWAITING: Final = (
    "DELETE FROM segments_awaiting_key WHERE key NOT IN "
    "(SELECT key FROM segments_awaiting_key ORDER BY segment_hlc DESC, key DESC LIMIT ?)"
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

    def set_entry_status(self, entry_id: str, status: str, reason: str | None) -> None:
        """What finally became of an entry recorded as waiting."""
        self.conn.execute(_SET_ENTRY_STATUS, (status, reason, entry_id))

    def await_signer(self, segment_key: str, *, signer_key_id: str, segment_hlc: int) -> None:
        """Read the segment at `segment_key` again once the signing key `signer_key_id` is
        trusted (see `signers_awaited`)."""
        self.conn.execute(_AWAIT_KEY, (segment_key, signer_key_id, segment_hlc))

    def signers_awaited(self) -> list[str]:
        """The ids of the signing keys that segments wait for."""
        return [row[0] for row in self._all(_AWAITED_KEY_IDS)]

    def segments_awaiting(self, signer_key_id: str, limit: int) -> list[str]:
        """The keys of the oldest `limit` segments refused for want of `signer_key_id`."""
        return [row[0] for row in self._all(_AWAITING_FOR_KEY, (signer_key_id, limit))]

    def stop_awaiting(self, segment_key: str) -> None:
        self.conn.execute(_STOP_AWAITING, (segment_key,))

    def bound_awaiting(self, *, oldest_hlc: int, most: int) -> None:
        """Forget segments dated before `oldest_hlc`, then all but the newest `most`."""
        self.conn.execute(_FORGET_AWAITING_BEFORE, (oldest_hlc,))
        self.conn.execute(_KEEP_NEWEST_AWAITING, (most,))
