"""How much each table holds, for `status`, metrics and the daemon's log. Read only.

Every count is answered from an index: the observations' rows carry embeddings, and a
count that had to read them would read every embedding with them.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.observations import COLD_ROWS, EFFICACY_TYPE
from dreamcycle.store.queries import TableQueries

# Not tombstoned, less the cold tier: each count read from an index alone (asking for both
# conditions at once reads every live row, embedding included).
_LIVE_AND_TOMBSTONED: Final = (
    "SELECT (SELECT count(*) FROM observations WHERE deleted_at IS NULL) "
    f"- (SELECT count(*) {COLD_ROWS}), "
    "(SELECT count(*) FROM tombstones)"
)
#: What `counts` reports, each by the query that counts it.
_COUNTS: Final = {
    "observations": f"SELECT count(*) FROM observations WHERE type != '{EFFICACY_TYPE}'",
    # Live and not cold at once, or pending, read every row: each is one count less another.
    "live": "SELECT (SELECT count(*) FROM observations "
    f"WHERE deleted_at IS NULL AND type != '{EFFICACY_TYPE}') - (SELECT count(*) "
    "FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL "
    f"AND type != '{EFFICACY_TYPE}')",
    "cold": f"SELECT count(*) {COLD_ROWS}",
    "learned_keys": "SELECT count(*) FROM learned_keys",
    "pinned": "SELECT count(*) FROM observations WHERE deleted_at IS NULL AND pin_floor > 0",
    "tombstones": "SELECT count(*) FROM tombstones",
    "pulses_applied": "SELECT count(*) FROM applied_pulses WHERE status = 'applied'",
    "pulses_rejected": "SELECT count(*) FROM applied_pulses "
    "WHERE status IN ('rejected', 'skipped')",
    "pulses_expired": "SELECT count(*) FROM applied_pulses WHERE status = 'expired'",
    "attributions": "SELECT count(*) FROM attributions",
    "outcomes_waiting": "SELECT count(*) FROM outcomes WHERE status = 'waiting'",
    "segments_applied": "SELECT count(*) FROM applied_segments",
    "outbox_unpublished": "SELECT count(*) FROM outbox WHERE segment_seq IS NULL",
    "pending_admission": "SELECT count(*) FROM observations INDEXED BY observations_pending "
    "WHERE admitted_seq IS NULL AND deleted_at IS NULL",
}


class CountQueries(TableQueries):
    #: live_and_tombstoned's last answer, and what it was counted under.
    _live_memo: tuple[tuple[str, int], tuple[int, int]] | None = None

    def change_stamp(self) -> str:
        raise NotImplementedError  # store.database.Database's

    def live_and_tombstoned(self) -> tuple[int, int]:
        """The two counts the daemon reports after every cycle, cheaply: counted again only
        when chunks were added, tombstoned, swept or revived (the change stamp) or a
        tombstone was recorded. Counting both reads every live and cold index entry, a cost
        in every cycle that grows with the store (scripts/bench_scale.py measures idle
        cycles), and most cycles change neither."""
        # Tombstones are only ever added, each as a new row: its largest rowid marks them.
        newest = self._one("SELECT coalesce(max(rowid), 0) FROM tombstones")
        key = (self.change_stamp(), int(newest[0]))
        if self._live_memo is not None and self._live_memo[0] == key:
            return self._live_memo[1]
        row = self._one(_LIVE_AND_TOMBSTONED)
        counts = int(row[0]), int(row[1])
        self._live_memo = (key, counts)
        return counts

    def counts(self) -> dict[str, int]:
        return {name: self._count(sql) for name, sql in _COUNTS.items()}

    def _count(self, sql: str) -> int:
        row = self._one(sql)
        return int(row[0]) if row else 0
