"""The `keys_awaiting_attribution` table: learned keys that came before their decision.

A peer publishes a decision's attribution before any key learned from it, but a reader
may meet the key first: the attribution's segment listed late, or refused until its seal's
key was trusted. Such a key waits here, as its verified wire object, and is applied once
the attribution is recorded; a wait is bounded in time (by the caller) and in number.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store.queries import TableQueries

_AWAIT: Final = (
    "INSERT INTO keys_awaiting_attribution (entry_id, decision_hash, hlc, wire_json) "
    "VALUES (?, ?, ?, ?) ON CONFLICT (entry_id) DO NOTHING"
)
_ATTRIBUTED: Final = (
    "SELECT k.entry_id, k.wire_json FROM keys_awaiting_attribution AS k "
    "JOIN attributions AS a ON a.decision_hash = k.decision_hash "
    "ORDER BY k.hlc, k.entry_id LIMIT ?"
)
_STOP: Final = "DELETE FROM keys_awaiting_attribution WHERE entry_id = ?"
# The oldest go first: past the time limit, or beyond the number kept.
_OVERDUE: Final = (
    "SELECT entry_id, wire_json FROM keys_awaiting_attribution WHERE hlc < ? "
    "UNION SELECT entry_id, wire_json FROM keys_awaiting_attribution WHERE entry_id NOT IN "
    "(SELECT entry_id FROM keys_awaiting_attribution ORDER BY hlc DESC, entry_id DESC LIMIT ?)"
)


class LearnedKeysAwaitingQueries(TableQueries):
    def await_attribution(
        self, entry_id: str, *, decision_hash: str, hlc: int, wire_json: str
    ) -> None:
        self.conn.execute(_AWAIT, (entry_id, decision_hash, hlc, wire_json))

    def learned_keys_now_attributed(self, limit: int) -> list[tuple[str, str]]:
        """Waiting keys whose decision's attribution is here: (entry id, wire JSON)."""
        return [(str(row[0]), str(row[1])) for row in self._all(_ATTRIBUTED, (limit,))]

    def stop_awaiting_attribution(self, entry_id: str) -> None:
        self.conn.execute(_STOP, (entry_id,))

    def drop_overdue_learned_keys(self, *, oldest_hlc: int, most: int) -> list[tuple[str, str]]:
        """Forget keys dated before `oldest_hlc`, then all but the newest `most`: (entry id,
        wire JSON) of each."""
        dropped = [(str(row[0]), str(row[1])) for row in self._all(_OVERDUE, (oldest_hlc, most))]
        for entry_id, _ in dropped:
            self.conn.execute(_STOP, (entry_id,))
        return dropped
