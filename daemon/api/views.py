"""What the read operations assemble from the database: filters as SQL, the tiers of a
context bundle, a memory's explanation, the timeline. Every function runs inside the
caller's read transaction and writes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import model_fields, recall_models, report_models
from dreamcycle.daemon.config import DownscaleConfig
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.pulses.context import Candidate
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import checkpoints
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import EFFICACY_TYPE, Database
from dreamcycle.store.timefmt import iso_from_ms, ms_from_iso

#: Journal steps that name the chunk itself (pulses name it by their seed hash).
_OWN_STEPS = (
    JournalKind.CHUNK,
    JournalKind.TOMBSTONE,
    JournalKind.SUPERSEDE,
    JournalKind.RECONSOLIDATE,
    JournalKind.SWEEP,
    JournalKind.REVIVE,
    JournalKind.CONFIDENCE,
)
#: The longest UTF-8 encoding of a character, in bytes.
_UTF8_MAX_BYTES = 4
#: Bytes of a content read for its timeline preview: enough for its characters whole.
_PREVIEW_BYTES = defaults.TIMELINE_PREVIEW_CHARS * _UTF8_MAX_BYTES
#: The cause shown for a step that carries nothing more to say.
_PLAIN_CAUSES = {
    JournalKind.TOMBSTONE: "tombstoned",
    JournalKind.SWEEP: "swept to the cold tier",
    JournalKind.REVIVE: "revived from the cold tier",
}


def filter_clauses(filters: recall_models.RecallFilters) -> tuple[list[str], list[Any]]:
    """SQL conditions (and their parameters) on `observations` for recall's filters; chunks
    tombstoned and the daemon's own records never match."""
    where = ["deleted_at IS NULL", f"type != '{EFFICACY_TYPE}'"]
    params: list[Any] = []
    for column in ("project", "scope", "session_id", "kind"):
        value = getattr(filters, column)
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if filters.topic_key_prefix is not None:
        # substr, not LIKE: a prefix holding % or _ means itself. Of the bytes: SQLite's
        # substr of a text ends at a NUL character.
        prefix = filters.topic_key_prefix
        where.append("substr(CAST(topic_key AS BLOB), 1, ?) = CAST(? AS BLOB)")
        params += [len(prefix.encode()), prefix]
    if filters.created_after_ms is not None:
        where.append("created_at >= ?")
        params.append(iso_from_ms(filters.created_after_ms))
    if filters.created_before_ms is not None:
        where.append("created_at < ?")
        params.append(iso_from_ms(filters.created_before_ms))
    return where, params


# ---- context bundle tiers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Held:
    """A candidate and what the bundle needs of its row."""

    candidate: Candidate
    rowid: int
    cold: bool


def pinned_tier(db: Database, filters: recall_models.RecallFilters) -> list[Held]:
    """Pinned memories (a pin floor, or deletion policy never) matching the filters, highest
    salience first."""
    where, params = filter_clauses(filters)
    where.append("(pin_floor > 0 OR deletion_policy = 'never')")
    rows = db.fetch_packed(
        "json_array(id, content_hash, title, content, salience, cold)",
        "FROM (SELECT id, content_hash, title, content, salience, cold_at IS NOT NULL AS cold "
        f"FROM observations WHERE {' AND '.join(where)} ORDER BY salience DESC, id LIMIT ?)",
        (*params, defaults.CONTEXT_PINNED_LIMIT),
        order_by="salience DESC, id",
    )
    return [_held(row) for row in rows]


def outcome_tier(
    db: Database, peer: str, task: Vector, allowed: frozenset[int] | None, now_ms: int
) -> list[Held]:
    """Memories cited by this peer's recent successful decisions about a similar task: the
    closest decisions first, each decision's citations in hash order."""
    decisions = db.successful_decisions(
        peer,
        since_ms=now_ms - int(defaults.CONTEXT_OUTCOME_WINDOW_S * 1000),
        limit=defaults.CONTEXT_OUTCOME_DECISIONS,
    )
    scored = [
        (float(np.dot(query_vector, task)), cited)
        for _digest, _ranked, cited, _query, query_vector in decisions
        if cited and query_vector.shape == task.shape
    ]
    scored = [item for item in scored if item[0] >= defaults.CONTEXT_OUTCOME_MIN_SIMILARITY]
    scored.sort(key=lambda item: -item[0])
    wanted = list(dict.fromkeys(digest for _score, cited in scored for digest in cited))
    if not wanted:
        return []
    marks = ",".join("?" * len(wanted))
    rows = db.fetch_packed(
        "json_array(id, content_hash, title, content, salience, cold_at IS NOT NULL)",
        f"FROM observations WHERE content_hash IN ({marks}) AND deleted_at IS NULL "
        f"AND type != '{EFFICACY_TYPE}'",
        tuple(wanted),
    )
    by_hash = {str(row[1]): _held(row) for row in rows}
    return [
        by_hash[digest]
        for digest in wanted
        if digest in by_hash and (allowed is None or by_hash[digest].rowid in allowed)
    ]


def _held(row: Sequence[Any]) -> Held:
    rowid, digest, title, content, salience, cold = row
    return Held(
        Candidate(str(digest), str(title), str(content), float(salience)), int(rowid), bool(cold)
    )


# ---- explain --------------------------------------------------------------------------------


def explain(db: Database, memory: report_models.Memory) -> report_models.ExplainResponse:
    digest = memory.content_hash
    obs = db.observation_by_hash(digest)
    assert obs is not None  # the caller just read it
    own = ",".join(f"'{kind}'" for kind in _OWN_STEPS)
    # Pulses name their seed inside the body; a supersede names the chunk it replaced, and
    # the new chunk by rowid.
    about = (
        f"FROM journal WHERE (ref = ?1 AND kind IN ({own})) "
        f"OR (kind = '{JournalKind.PULSE}' AND json_extract(body, '$.pulse.seed_hash') = ?1) "
        f"OR (kind = '{JournalKind.SUPERSEDE}' AND json_extract(body, '$.new') = ?2)"
    )
    total = int(db.fetch_one(f"SELECT count(*) {about}", (digest, obs.rowid))[0])
    rows = db.fetch_all(
        f"SELECT seq, kind, body, at_ms {about} ORDER BY seq DESC LIMIT ?3",
        (digest, obs.rowid, defaults.EXPLAIN_STEPS),
    )
    history = [_step(db, obs.rowid, int(s), str(k), json.loads(b), int(a)) for s, k, b, a in rows]
    tombstone = db.fetch_one("SELECT reason FROM tombstones WHERE hash = ?", (digest,))
    return report_models.ExplainResponse(
        memory=memory,
        tombstone_reason=None if tombstone is None else tombstone[0],
        history=history,
        history_total=total,
        history_since_ms=checkpoints.history_since_ms(db),
        downscale=_downscale(db, obs.rowid, memory.kind, memory.stability),
        decisions=_decisions(db, digest),
        decisions_total=int(
            db.fetch_one(
                "SELECT count(*) FROM attributions WHERE instr(chunk_hashes_json, ?) > 0",
                (f'"{digest}"',),
            )[0]
        ),
        learned_keys=[
            report_models.LearnedKeySummary(weight=k.weight, updated_ms=k.updated_ms, text=k.text)
            for k in key_store.keys_of(db, obs.rowid)
        ],
    )


def _step(
    db: Database, rowid: int, seq: int, kind: str, body: dict[str, Any], at_ms: int
) -> report_models.SalienceStep:
    step = report_models.SalienceStep(seq=seq, at_ms=at_ms, step=kind, cause=kind)  # type: ignore[arg-type]
    if kind == JournalKind.CHUNK:
        step.cause = "admitted"
        step.salience = body.get("initial")
        step.pin_floor = body.get("pin_floor")
    elif kind == JournalKind.PULSE:
        pulse = body["pulse"]
        step.pulse_id = pulse.get("pulse_id")
        step.pulse_kind = pulse["kind"]
        step.strength = None if pulse["strength"] == "inf" else float(pulse["strength"])
        step.origin_peer = pulse["origin_peer"]
        step.reason = pulse["reason"]
        # An outcome's pulses carry its HLC and reason.
        outcome = db.fetch_one(
            "SELECT outcome_id, decision_hash FROM outcomes WHERE hlc = ? AND reason = ? "
            "AND status = 'converted' LIMIT 1",
            (pulse["ts"], pulse["reason"]),
        )
        if outcome is not None:
            step.outcome_id, step.decision_hash = str(outcome[0]), str(outcome[1])
            step.cause = f"outcome {step.pulse_kind} pulse"
        else:
            step.cause = f"{step.pulse_kind} pulse seeded here"
    elif kind == JournalKind.SUPERSEDE:
        replaced = body.get("new") == rowid
        step.cause = "inherited the salience of the chunk it replaced" if replaced else "superseded"
    elif kind == JournalKind.RECONSOLIDATE:
        step.pin_floor = body.get("pin_floor")
        step.cause = "pinned" if (step.pin_floor or 0) > 0 else "unpinned"
    elif kind in _PLAIN_CAUSES:
        step.cause = _PLAIN_CAUSES[JournalKind(kind)]
    elif kind == JournalKind.CONFIDENCE:
        step.confidence = body.get("after")
        step.reason = body.get("reason") or None
        direction = "lowered" if body.get("after", 0.0) < body.get("before", 0.0) else "raised"
        step.cause = f"confidence {direction} from {body.get('before'):.3f}: {body.get('cause')}"
    return step


def _downscale(
    db: Database, rowid: int, kind: str, stability: float
) -> report_models.DownscaleSummary:
    row = db.fetch_one(
        f"SELECT count(*), max(seq) FROM journal WHERE kind = '{JournalKind.DOWNSCALE}' AND seq > "
        "coalesce((SELECT admitted_seq FROM observations WHERE id = ?), 9e18)",
        (rowid,),
    )
    steps, last = int(row[0]), row[1]
    # A step decays only the chunks due then: when this one's decay counts from is its row's.
    decayed = db.fetch_one(
        "SELECT coalesce(last_decay_ts, created_at) FROM observations WHERE id = ?", (rowid,)
    )
    last_at_ms = None if decayed is None else ms_from_iso(str(decayed[0]))
    if last is None:
        return report_models.DownscaleSummary(steps=0, last_at_ms=last_at_ms, half_life_s=None)
    step = json.loads(db.fetch_one("SELECT body FROM journal WHERE seq = ?", (last,))[0])
    if kind not in step.get("half_life_s", {}):
        return report_models.DownscaleSummary(steps=steps, last_at_ms=last_at_ms, half_life_s=None)
    half_lives = HalfLives.from_journal(step, DownscaleConfig())
    return report_models.DownscaleSummary(
        steps=steps, last_at_ms=last_at_ms, half_life_s=half_lives.of(kind, stability)
    )


def _decisions(db: Database, digest: str) -> list[report_models.DecisionSummary]:
    rows = db.fetch_all(
        "SELECT decision_hash, ts, peer, coalesce(ranked_json, chunk_hashes_json), query_text, "
        "ranked_json IS NOT NULL FROM attributions WHERE instr(chunk_hashes_json, ?) > 0 "
        "ORDER BY hlc DESC LIMIT ?",
        (f'"{digest}"', defaults.EXPLAIN_DECISIONS),
    )
    out = []
    for decision, ts, peer, ranked_json, query, ranked in rows:
        order = list(json.loads(ranked_json))
        outcomes = db.fetch_all(
            "SELECT outcome_id, reward, reason, status, cited_json FROM outcomes "
            "WHERE decision_hash = ? ORDER BY hlc DESC",
            (decision,),
        )
        out.append(
            report_models.DecisionSummary(
                decision_hash=str(decision),
                at=str(ts),
                peer=str(peer),
                rank=order.index(digest) + 1 if ranked and digest in order else None,
                query=query,
                outcomes=[
                    report_models.OutcomeSummary(
                        outcome_id=str(oid),
                        reward=float(reward),
                        reason=str(reason),
                        status=str(status),
                        cited=digest in json.loads(cited),
                    )
                    for oid, reward, reason, status, cited in outcomes
                ],
            )
        )
    return out


# ---- timeline -------------------------------------------------------------------------------


def timeline(
    db: Database, request: report_models.TimelineRequest
) -> report_models.TimelineResponse:
    where, params = filter_clauses(request.filters())
    if request.around_ms is not None:
        span_ms = int(request.span_s * 1000)
        where.append("created_at >= ? AND created_at <= ?")
        params += [
            iso_from_ms(max(0, request.around_ms - span_ms)),
            iso_from_ms(min(request.around_ms + span_ms, model_fields.MAX_TIME_MS)),
        ]
    condition = " AND ".join(where)
    total = int(
        db.fetch_one(f"SELECT count(*) FROM observations WHERE {condition}", tuple(params))[0]
    )
    # The content's first bytes, enough for the preview's characters, cut in Python: SQLite's
    # substr of a text ends at a NUL character, and reading whole contents would read up to
    # MAX_TEXT_CHARS per row.
    rows = db.fetch_all(
        "SELECT content_hash, title, substr(CAST(content AS BLOB), 1, ?), kind, project, "
        f"session_id, topic_key, created_at, salience, cold_at IS NOT NULL FROM observations "
        f"WHERE {condition} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?",
        (_PREVIEW_BYTES, *params, request.limit, request.offset),
    )
    end = request.offset + len(rows)
    return report_models.TimelineResponse(
        total=total,
        next_offset=end if end < total else None,
        memories=[
            report_models.TimelineMemory(
                content_hash=digest,
                title=title,
                preview=_preview(head),
                kind=kind,
                project=project,
                session_id=session,
                topic_key=topic,
                created_at=created,
                salience=salience,
                state="cold" if cold else "live",
            )
            for digest, title, head, kind, project, session, topic, created, salience, cold in rows
        ],
    )


def _preview(head: bytes) -> str:
    """The preview from a content's first _PREVIEW_BYTES bytes, which hold at least its
    first TIMELINE_PREVIEW_CHARS characters whole: a character cut at the end is dropped
    with the rest."""
    return head.decode("utf-8", errors="replace")[: defaults.TIMELINE_PREVIEW_CHARS]
