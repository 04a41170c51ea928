"""The `meta` table: small named values of this store, and the counters kept among them.

A key holds one value; writing it again replaces it. The epoch counters below only ever
grow, so a stamp that includes one changes whenever what it counts moves.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.queries import TableQueries

#: meta key counting moves between the live and the cold tier (part of the index's stamp).
TIER_EPOCH_META_KEY: Final = "tier_epoch"
#: meta key counting rows of observations deleted (migration 0012's trigger; none are):
#: part of the index's stamp, which otherwise sees rows added, not rows removed.
ROWS_DELETED_META_KEY: Final = "observations_deleted"
#: meta key counting changes of the metadata recall filters on (project, scope, session,
#: tool, topic key), which the index's stamp does not see: part of the filters' stamp.
METADATA_EPOCH_META_KEY: Final = "metadata_epoch"


class MetaQueries(TableQueries):
    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def next_counter(self, key: str) -> int:
        """Increment and return an integer counter kept in meta (call inside a transaction)."""
        current = int(self.get_meta(key) or "0") + 1
        self.set_meta(key, str(current))
        return current
