"""The `attributions` and `outcomes` tables: decisions, the chunks they were made from, and
the outcomes reported for them.

Both are keyed by id and written once (a second record of the same decision or outcome
changes nothing), so an entry read again from the log applies once. An outcome waits
until the cycle credits it (`settle_outcome` sets its status and the pulses it became).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import numpy as np
import numpy.typing as npt

from dreamcycle.store.embeddings import blob_to_vector, vector_to_blob
from dreamcycle.store.queries import TableQueries
from dreamcycle.store.timefmt import iso_from_ms


@dataclass(frozen=True)
class AttributionRecord:
    """A recorded decision: chunks best first (when known), who decided, and the query."""

    chunk_hashes: list[str]
    peer: str
    hlc: int
    decision_text: str
    ranked: list[str]
    query_text: str | None
    query_embedding: npt.NDArray[np.float32] | None
    decision_hash: str = ""
    #: The agent session the decision was made in, when the caller named one.
    session_id: str | None = None


@dataclass(frozen=True)
class OutcomeRecord:
    outcome_id: str
    decision_hash: str
    reward: float
    observer_peer: str
    hlc: int
    reason: str
    expires_ms: int
    cited: list[str]


class SuccessfulDecision(NamedTuple):
    """A decision of this peer's with a positive outcome, and the query it answered."""

    decision_hash: str
    ranked: list[str]
    cited: list[str]
    query_text: str
    query_embedding: npt.NDArray[np.float32]


_INSERT_ATTRIBUTION: Final = (
    "INSERT INTO attributions (decision_hash, chunk_hashes_json, peer, ts, hlc, "
    "decision_text, ranked_json, query_text, query_embedding, session_id) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (decision_hash) DO NOTHING RETURNING 1"
)
ATTRIBUTION_COLUMNS: Final = (
    "chunk_hashes_json, peer, hlc, decision_text, ranked_json, query_text, "
    "query_embedding, decision_hash, session_id"
)
_ATTRIBUTION: Final = f"SELECT {ATTRIBUTION_COLUMNS} FROM attributions WHERE decision_hash = ?"
_SESSION_DECISIONS: Final = (
    f"SELECT {ATTRIBUTION_COLUMNS} FROM attributions WHERE session_id = ? AND peer = ? "
    "AND hlc >= ? AND hlc <= ? ORDER BY hlc, decision_hash"
)
_SUCCESSFUL_DECISIONS: Final = (
    "SELECT a.decision_hash, coalesce(a.ranked_json, a.chunk_hashes_json), o.cited_json, "
    "a.query_text, a.query_embedding FROM outcomes o "
    "JOIN attributions a ON a.decision_hash = o.decision_hash "
    "WHERE o.reward > 0 AND a.peer = ? AND a.query_embedding IS NOT NULL AND a.ts >= ? "
    "GROUP BY a.decision_hash ORDER BY max(o.hlc) DESC LIMIT ?"
)
_INSERT_OUTCOME: Final = (
    "INSERT INTO outcomes (outcome_id, decision_hash, reward, observer_peer, hlc, reason, "
    "status, expires_ms, cited_json) VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?, ?) "
    "ON CONFLICT (outcome_id) DO NOTHING RETURNING 1"
)
_WAITING_OUTCOMES: Final = (
    "SELECT outcome_id, decision_hash, reward, observer_peer, hlc, reason, expires_ms, "
    "cited_json FROM outcomes WHERE status = 'waiting' ORDER BY hlc, outcome_id"
)
_SETTLE_OUTCOME: Final = "UPDATE outcomes SET status = ?, pulses = ? WHERE outcome_id = ?"
# Applied outcomes (from any peer) and this peer's own still queued in the outbox.
_OUTCOMES_OF_DECISION: Final = (
    "SELECT hlc, outcome_id, reward, reason FROM outcomes WHERE decision_hash = ?1 "
    "UNION ALL SELECT hlc, entry_id, json_extract(body, '$.reward'), "
    "json_extract(body, '$.reason') FROM outbox WHERE kind = 'outcome' "
    "AND json_extract(body, '$.decision_hash') = ?1 ORDER BY 1, 2"
)


class AttributionQueries(TableQueries):
    def record_attribution(
        self,
        decision_hash: str,
        chunk_hashes: Sequence[str],
        *,
        peer: str,
        hlc: int,
        ts_ms: int,
        decision_text: str,
        ranked: Sequence[str] | None = None,
        query_text: str | None = None,
        query_embedding: npt.NDArray[np.float32] | None = None,
        session_id: str | None = None,
    ) -> bool:
        """False if the decision was already recorded (attributions are idempotent).

        `ranked` (best first), the query and its embedding are known only to the
        peer that recalled; they let an outcome credit by rank and teach keys.
        """
        row = self._one(
            _INSERT_ATTRIBUTION,
            (
                decision_hash,
                json.dumps(sorted(chunk_hashes)),
                peer,
                iso_from_ms(ts_ms),
                hlc,
                decision_text,
                None if ranked is None else json.dumps(list(ranked)),
                query_text,
                None if query_embedding is None else vector_to_blob(query_embedding),
                session_id,
            ),
        )
        return row is not None

    def attribution(self, decision_hash: str) -> AttributionRecord | None:
        row = self._one(_ATTRIBUTION, (decision_hash,))
        return None if row is None else attribution_of(row)

    def session_decisions(
        self, session_id: str, peer: str, *, from_hlc: int, to_hlc: int
    ) -> list[AttributionRecord]:
        """Decisions `peer` made in an agent session between two HLCs, oldest first."""
        rows = self._all(_SESSION_DECISIONS, (session_id, peer, from_hlc, to_hlc))
        return [attribution_of(row) for row in rows]

    def successful_decisions(
        self, peer: str, *, since_ms: int, limit: int
    ) -> list[SuccessfulDecision]:
        """Recent decisions of `peer` with a positive outcome, newest first."""
        rows = self._all(_SUCCESSFUL_DECISIONS, (peer, iso_from_ms(since_ms), limit))
        return [
            SuccessfulDecision(
                str(d),
                list(json.loads(r)),
                list(json.loads(c)),
                str(q or ""),
                blob_to_vector(bytes(e)),
            )
            for d, r, c, q, e in rows
        ]

    def record_outcome(
        self,
        outcome_id: str,
        *,
        decision_hash: str,
        reward: float,
        observer_peer: str,
        hlc: int,
        reason: str,
        expires_ms: int,
        cited: Sequence[str] = (),
    ) -> bool:
        row = self._one(
            _INSERT_OUTCOME,
            (
                outcome_id,
                decision_hash,
                reward,
                observer_peer,
                hlc,
                reason,
                expires_ms,
                json.dumps(list(cited)),
            ),
        )
        return row is not None

    def waiting_outcomes(self) -> list[OutcomeRecord]:
        """Outcomes not yet converted, oldest first."""
        return [
            OutcomeRecord(
                str(a), str(b), float(c), str(d), int(e), str(f), int(g), list(json.loads(h))
            )
            for a, b, c, d, e, f, g, h in self._all(_WAITING_OUTCOMES)
        ]

    def settle_outcome(self, outcome_id: str, status: str, pulses: int = 0) -> None:
        self.conn.execute(_SETTLE_OUTCOME, (status, pulses, outcome_id))


def attribution_of(row: Sequence[Any]) -> AttributionRecord:
    chunks = list(json.loads(str(row[0])))
    embedding = row[6]
    return AttributionRecord(
        chunk_hashes=chunks,
        peer=str(row[1]),
        hlc=int(row[2]),
        decision_text=str(row[3]),
        ranked=chunks if row[4] is None else list(json.loads(str(row[4]))),
        query_text=None if row[5] is None else str(row[5]),
        query_embedding=None if embedding is None else blob_to_vector(bytes(embedding)),
        decision_hash=str(row[7]),
        session_id=None if row[8] is None else str(row[8]),
    )


def outcomes_of_decision(db: TableQueries, decision_hash: str) -> list[tuple[str, float, str]]:
    """Outcomes reported for a decision, oldest first, as (entry id, reward, reason): those
    applied here (from any peer) and this peer's own still waiting in the outbox."""
    rows = db.fetch_all(_OUTCOMES_OF_DECISION, (decision_hash,))
    # An outcome of this peer's, once applied, is in both tables under the same id.
    found = {str(entry): (float(reward), str(reason)) for _, entry, reward, reason in rows}
    return [(entry, reward, reason) for entry, (reward, reason) in found.items()]
