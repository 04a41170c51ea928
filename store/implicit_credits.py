"""The tables of credit inferred from what agent sessions do (migration 0015): credits
waiting to be converted, questions asked again, results reported for a whole session,
and the reads the inference makes (saves of a session, decisions made in sessions)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, NamedTuple

from dreamcycle.store.attributions import ATTRIBUTION_COLUMNS, AttributionRecord, attribution_of
from dreamcycle.store.queries import TableQueries


class ImplicitCredit(NamedTuple):
    signal: str
    decision_hash: str
    chunk_hash: str
    amount: float
    reason: str


class SessionOutcome(NamedTuple):
    id: int
    session_id: str
    reward: float
    reason: str
    ts_ms: int


class SessionSave(NamedTuple):
    """A memory saved in an agent session, as the inference reads it."""

    rowid: int
    session_id: str
    type: str
    title: str
    content: str
    created_at: str


_RECORD_CREDIT: Final = (
    "INSERT INTO implicit_credits (signal, decision_hash, chunk_hash, amount, reason, "
    "created_ms) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1"
)
_WAITING_CREDITS: Final = (
    "SELECT signal, decision_hash, chunk_hash, amount, reason FROM implicit_credits "
    "WHERE status = 'waiting' ORDER BY created_ms, decision_hash, signal, chunk_hash"
)
_SETTLE_CREDITS: Final = (
    "UPDATE implicit_credits SET status = ? WHERE decision_hash = ? AND status = 'waiting'"
)
_CREDITS_OF_CHUNK: Final = (
    "SELECT signal, decision_hash, chunk_hash, amount, reason FROM implicit_credits "
    "WHERE chunk_hash = ? AND status = 'converted' ORDER BY created_ms DESC LIMIT ?"
)
# Local saves only: a chunk adopted from another peer was saved in that peer's sessions.
_SESSION_SAVES: Final = (
    "SELECT id, session_id, type, coalesce(title, ''), content, created_at FROM observations "
    "WHERE id > ? AND id <= ? AND session_id IS NOT NULL AND deleted_at IS NULL "
    "AND (origin_peer IS NULL OR origin_peer = ?) ORDER BY id"
)
_NEWEST_OBSERVATION: Final = "SELECT coalesce(max(id), 0) FROM observations"
_SESSION_DECISIONS_AFTER: Final = (
    f"SELECT {ATTRIBUTION_COLUMNS} FROM attributions WHERE hlc > ? AND peer = ? "
    "AND session_id IS NOT NULL ORDER BY hlc, decision_hash"
)


class ImplicitCreditQueries(TableQueries):
    def record_implicit_credit(
        self,
        signal: str,
        decision_hash: str,
        chunk_hash: str,
        *,
        amount: float,
        reason: str,
        created_ms: int,
    ) -> bool:
        """False when this signal already credited this chunk for this decision."""
        row = self._one(
            _RECORD_CREDIT, (signal, decision_hash, chunk_hash, amount, reason, created_ms)
        )
        return row is not None

    def waiting_implicit_credits(self) -> list[ImplicitCredit]:
        return [ImplicitCredit(str(s), str(d), str(c), float(a), str(r))
                for s, d, c, a, r in self._all(_WAITING_CREDITS)]  # fmt: skip

    def settle_implicit_credits(self, decision_hash: str, status: str) -> None:
        self.conn.execute(_SETTLE_CREDITS, (status, decision_hash))

    def implicit_credits_of(self, chunk_hash: str, limit: int) -> list[ImplicitCredit]:
        """The newest converted credits a chunk received, for `explain`."""
        return [ImplicitCredit(str(s), str(d), str(c), float(a), str(r))
                for s, d, c, a, r in self._all(_CREDITS_OF_CHUNK, (chunk_hash, limit))]  # fmt: skip

    def record_rephrasing(self, earlier: str, later: str) -> None:
        self.conn.execute(
            "INSERT INTO rephrasings (earlier, later) VALUES (?, ?) ON CONFLICT DO NOTHING",
            (earlier, later),
        )

    def earlier_rephrasings(self, later: str) -> list[str]:
        """The decisions that `later` asked again, oldest first."""
        return [str(e) for (e,) in self._all(
            "SELECT r.earlier FROM rephrasings r JOIN attributions a ON a.decision_hash = "
            "r.earlier WHERE r.later = ? ORDER BY a.hlc", (later,))]  # fmt: skip

    def rephrasings_among(self, decisions: Sequence[str]) -> list[tuple[str, str]]:
        """(earlier, later) pairs with the later decision among `decisions`."""
        if not decisions:
            return []
        marks = ",".join("?" * len(decisions))
        return [(str(e), str(lt)) for e, lt in self._all(
            f"SELECT earlier, later FROM rephrasings WHERE later IN ({marks}) "
            "ORDER BY later, earlier", tuple(decisions))]  # fmt: skip

    def record_session_outcome(
        self, session_id: str, *, reward: float, reason: str, ts_ms: int
    ) -> int:
        row = self._one(
            "INSERT INTO session_outcomes (session_id, reward, reason, ts_ms) "
            "VALUES (?, ?, ?, ?) RETURNING id",
            (session_id, reward, reason, ts_ms),
        )
        return int(row[0])

    def waiting_session_outcomes(self) -> list[SessionOutcome]:
        return [SessionOutcome(int(i), str(s), float(r), str(why), int(t)) for i, s, r, why, t
                in self._all("SELECT id, session_id, reward, reason, ts_ms FROM session_outcomes "
                             "WHERE status = 'waiting' ORDER BY id")]  # fmt: skip

    def settle_session_outcome(self, outcome_id: int) -> None:
        self.conn.execute(
            "UPDATE session_outcomes SET status = 'converted' WHERE id = ?", (outcome_id,)
        )

    def session_saves(self, after_rowid: int, upto_rowid: int, peer_id: str) -> list[SessionSave]:
        """Memories saved here in a session, after `after_rowid` and up to `upto_rowid`, in
        order."""
        rows = self._all(_SESSION_SAVES, (after_rowid, upto_rowid, peer_id))
        return [SessionSave(int(i), str(s), str(t), str(ti), str(c), str(at))
                for i, s, t, ti, c, at in rows]  # fmt: skip

    def newest_observation_id(self) -> int:
        """The rowid of the newest stored chunk (0 for none); chunks are never deleted, so
        every chunk stored later has a larger one."""
        return int(self._one(_NEWEST_OBSERVATION)[0])

    def session_decisions_after(self, after_hlc: int, peer: str) -> list[AttributionRecord]:
        """Decisions `peer` made in a named session after `after_hlc`, oldest first."""
        return [
            attribution_of(row) for row in self._all(_SESSION_DECISIONS_AFTER, (after_hlc, peer))
        ]
