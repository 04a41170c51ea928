"""The `tombstones` table: chunk hashes retracted for good, and what a tombstone hides.

A hash keeps its first tombstone (later ones change nothing), whether or not the chunk is
stored here. Recording one hides the stored chunk (`deleted_at`) and drops its learned
keys and their words in full text, in the caller's transaction: nothing recalls a
retracted chunk. The cold tier (store/tiers.py) is not this: cold chunks come back.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms

_INSERT_TOMBSTONE: Final = (
    "INSERT INTO tombstones (hash, reason, origin_peer, ts, collectable_after, journal_seq) "
    "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING RETURNING hash"
)
_HIDE_CHUNK: Final = (
    "UPDATE observations SET deleted_at = ?, updated_at = ? "
    "WHERE content_hash = ? AND deleted_at IS NULL RETURNING id"
)
_DROP_LEARNED_KEYS: Final = "DELETE FROM learned_keys WHERE chunk_id = ?"
_IS_TOMBSTONED: Final = "SELECT 1 FROM tombstones WHERE hash = ?"
_BY_REASON: Final = (
    "SELECT coalesce(reason, ''), count(*) FROM tombstones GROUP BY 1 ORDER BY 2 DESC"
)


class TombstoneQueries(TableQueries):
    def tombstone(
        self,
        digest: str,
        *,
        reason: str,
        origin_peer: str,
        now_ms: int,
        collectable_after_ms: int | None,
        journal_seq: int | None,
    ) -> int | None:
        """Tombstone a chunk hash (known locally or not). Returns the rowid it hid, if any.

        A hash already tombstoned keeps its first tombstone: tombstones are permanent.
        """
        inserted = self._one(
            _INSERT_TOMBSTONE,
            (
                digest,
                reason,
                origin_peer,
                iso_from_ms(now_ms),
                None if collectable_after_ms is None else iso_from_ms(collectable_after_ms),
                journal_seq,
            ),
        )
        if inserted is None:
            return None
        row = self._one(_HIDE_CHUNK, (iso_from_ms(now_ms), iso_from_ms(now_ms), digest))
        if row is None:
            return None
        # Learned keys go with the chunk: nothing may recall a retracted chunk by them. Their
        # words leave full text with its own, by the triggers of migrations 0011 and 0019.
        self.conn.execute(_DROP_LEARNED_KEYS, (row[0],))
        return int(row[0])

    def is_tombstoned_hash(self, digest: str) -> bool:
        return self._one(_IS_TOMBSTONED, (digest,)) is not None

    def tombstones_by_reason(self) -> dict[str, int]:
        return {str(reason): int(n) for reason, n in self._all(_BY_REASON)}
