"""The `journal` table: every applied salience step, in order, for `rebuild` to replay and
`explain` to read.

A step is appended once and keeps its sequence number; its body may only gain fields
(`amend_journal`: where a step that ended early stopped), never lose or change one, so
replay of a step reads what was applied. Steps are deleted only by retention, up to a
checkpoint (store/checkpoints.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Final, NamedTuple

from dreamcycle.store.queries import TableQueries


class JournalStep(NamedTuple):
    seq: int
    kind: str
    ref: str
    body: dict[str, Any]
    at_ms: int


_APPEND: Final = "INSERT INTO journal (kind, ref, body, at_ms) VALUES (?, ?, ?, ?)"
_BODY: Final = "SELECT body FROM journal WHERE seq = ?"
_SET_BODY: Final = "UPDATE journal SET body = ? WHERE seq = ?"
_STEPS: Final = "SELECT seq, kind, ref, body, at_ms FROM journal ORDER BY seq"
_COUNTS_BY_KIND: Final = "SELECT kind, count(*) FROM journal GROUP BY kind"


def _body_json(body: dict[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class JournalQueries(TableQueries):
    def journal(self, kind: str, ref: str, body: dict[str, Any], *, now_ms: int) -> int:
        self.conn.execute(_APPEND, (kind, ref, _body_json(body), now_ms))
        return self.conn.last_insert_rowid()

    def journal_each(
        self, kind: str, steps: Sequence[tuple[str, dict[str, Any]]], *, now_ms: int
    ) -> None:
        """Journal one step of `kind` per (ref, body), in their order."""
        self.conn.executemany(
            _APPEND, [(kind, ref, _body_json(body), now_ms) for ref, body in steps]
        )

    def amend_journal(self, seq: int, changes: dict[str, Any]) -> None:
        """Add fields to a step's body (a step that ended early says where it stopped)."""
        row = self._one(_BODY, (seq,))
        if row is None:
            raise KeyError(f"no journal step {seq}")
        body = {**json.loads(row[0]), **changes}
        self.conn.execute(_SET_BODY, (_body_json(body), seq))

    def journal_entries(self) -> Iterator[JournalStep]:
        for seq, kind, ref, body, at_ms in self._all(_STEPS):
            yield JournalStep(int(seq), str(kind), str(ref), json.loads(body), int(at_ms))

    def journal_counts(self) -> dict[str, int]:
        return {str(k): int(n) for k, n in self._all(_COUNTS_BY_KIND)}
