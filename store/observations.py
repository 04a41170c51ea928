"""The `observations` table: stored chunks, their content and the metadata beside it.

A chunk is stored once per content hash (a second save counts a duplicate); its content
never changes afterwards, only the metadata `revise` (shared with peers) and
`update_local_metadata` (this peer's alone) name. Every such change bumps the metadata
epoch, so recall's filter caches see it. The `recall_fts` triggers of the migrations keep
full text in step with the rows written here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from dreamcycle.pulses.confidence import (
    InvalidConfidence,
    check_unit,
    default_confidence,
    default_stability,
)
from dreamcycle.store.hashing import content_hash, normalise_content
from dreamcycle.store.meta import METADATA_EPOCH_META_KEY, MetaQueries
from dreamcycle.store.timefmt import iso_from_ms

#: Kinds of chunk; each has its own decay half-life (fact, preference, insight, summary, note).
CHUNK_KINDS: Final = ("fact", "preference", "insight", "summary", "note")
DELETION_POLICIES: Final = ("auto_prune", "manual_only", "never")
#: Metadata a `reconsolidate` entry may change without changing the chunk's content.
REVISABLE_COLUMNS: Final = ("title", "topic_key", "importance")
#: A new chunk's salience is INITIAL_SALIENCE_BASE + INITIAL_SALIENCE_PER_IMPORTANCE *
#: importance: 0.5 at the default importance 5, 0.75 at 10, always below the cap 1.0,
#: so a Reward can still lift it.
INITIAL_SALIENCE_BASE: Final = 0.25
INITIAL_SALIENCE_PER_IMPORTANCE: Final = 0.05
#: Metadata a peer may change here alone (re-ingest): filters read it, peers never see it.
LOCAL_METADATA_COLUMNS: Final = ("project", "scope", "session_id", "tool_name")
#: Observations of this type record the daemon's own efficacy; they are not memory to recall.
EFFICACY_TYPE: Final = "efficacy"
#: The cold tier's rows that are not tombstoned, read from their own index (migration
#: 0013) so that no row, embedding included, is visited to test `deleted_at`.
COLD_ROWS: Final = (
    "FROM observations INDEXED BY observations_cold_live "
    "WHERE cold_at IS NOT NULL AND deleted_at IS NULL"
)


def initial_salience(importance: int) -> float:
    return INITIAL_SALIENCE_BASE + INITIAL_SALIENCE_PER_IMPORTANCE * importance


class InvalidObservation(ValueError):
    """An observation that cannot be stored; the message names the field."""


@dataclass(frozen=True)
class NewObservation:
    content: str
    title: str = ""
    type: str = "manual"
    kind: str = "note"
    project: str | None = None
    scope: str = "project"
    topic_key: str | None = None
    session_id: str | None = None
    tool_name: str | None = None
    pin_floor: float = 0.0
    importance: int = 5
    deletion_policy: str = "auto_prune"
    origin_peer: str | None = None
    source_ref: str | None = None
    #: None: the default of the memory's type and kind (pulses/confidence.py).
    confidence: float | None = None
    #: None: the usual stability of the memory's kind.
    stability: float | None = None

    def validate(self) -> None:
        if not normalise_content(self.content):
            raise InvalidObservation("content is empty")
        if self.kind not in CHUNK_KINDS:
            raise InvalidObservation(f"kind {self.kind!r} is not one of {', '.join(CHUNK_KINDS)}")
        if not 0.0 <= self.pin_floor <= 1.0:
            raise InvalidObservation(f"pin_floor {self.pin_floor} is outside [0, 1]")
        if not 0 <= self.importance <= 10:
            raise InvalidObservation(f"importance {self.importance} is outside 0..10")
        if self.deletion_policy not in DELETION_POLICIES:
            raise InvalidObservation(
                f"deletion_policy {self.deletion_policy!r} is not one of {', '.join(DELETION_POLICIES)}"
            )
        for name in ("confidence", "stability"):
            value = getattr(self, name)
            if value is not None:
                try:
                    check_unit(name, value)
                except InvalidConfidence as exc:
                    raise InvalidObservation(str(exc)) from None

    def resolved_confidence(self) -> float:
        if self.confidence is not None:
            return self.confidence
        return default_confidence(self.type, self.kind)

    def resolved_stability(self) -> float:
        return self.stability if self.stability is not None else default_stability(self.kind)


@dataclass(frozen=True)
class Added:
    rowid: int
    content_hash: str
    created: bool  # False: the content was already stored (duplicate_count bumped)


@dataclass(frozen=True)
class Observation:
    rowid: int
    content_hash: str
    title: str
    content: str
    type: str
    kind: str
    topic_key: str | None
    project: str | None
    salience: float
    pin_floor: float
    deleted_at: str | None
    access_count: int
    deletion_policy: str
    created_at: str
    cold_at: str | None = None
    cold_reason: str | None = None
    importance: int = 5
    confidence: float = 1.0
    stability: float = 0.5

    @property
    def live(self) -> bool:
        return self.deleted_at is None and self.cold_at is None


_OBSERVATION_COLUMNS: Final = (
    "id, content_hash, title, content, type, kind, topic_key, project, salience, pin_floor, "
    "deleted_at, access_count, deletion_policy, created_at, cold_at, cold_reason, importance, "
    "confidence, stability"
)
_ROWID_OF_HASH: Final = "SELECT id FROM observations WHERE content_hash = ?"
_COUNT_DUPLICATE: Final = (
    "UPDATE observations SET duplicate_count = duplicate_count + 1, last_seen_at = ? WHERE id = ?"
)
_INSERT_OBSERVATION: Final = (
    "INSERT INTO observations (session_id, type, title, content, tool_name, project, "
    "scope, topic_key, normalized_hash, created_at, updated_at, last_seen_at, "
    "last_decay_ts, pin_floor, salience, content_hash, kind, importance, "
    "deletion_policy, origin_peer, source_ref, confidence, stability) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_OBSERVATION_BY_ROWID: Final = f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE id = ?"
_OBSERVATION_BY_HASH: Final = (
    f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE content_hash = ?"
)
_BUMP_ACCESS: Final = (
    # A cold chunk recalled by fallback is not thereby revived (see store.tiers).
    "UPDATE observations SET access_count = access_count + 1, "
    "last_seen_at = CASE WHEN cold_at IS NULL THEN ? ELSE last_seen_at END WHERE id = ?"
)
_ROWIDS_AND_HASHES: Final = "SELECT id, content_hash FROM observations"


def _observation(row: Sequence[Any]) -> Observation:
    return Observation(
        rowid=int(row[0]),
        content_hash=str(row[1]),
        title=str(row[2]),
        content=str(row[3]),
        type=str(row[4]),
        kind=str(row[5]),
        topic_key=row[6],
        project=row[7],
        salience=float(row[8]),
        pin_floor=float(row[9]),
        deleted_at=row[10],
        access_count=int(row[11]),
        deletion_policy=str(row[12]),
        created_at=str(row[13]),
        cold_at=row[14],
        cold_reason=row[15],
        importance=int(row[16]),
        confidence=float(row[17]),
        stability=float(row[18]),
    )


class ObservationQueries(MetaQueries):
    def add_observations(self, items: Sequence[NewObservation], *, now_ms: int) -> list[Added]:
        """Store chunks, deduplicated by content hash. Call inside a transaction."""
        now = iso_from_ms(now_ms)
        results: list[Added] = []
        for item in items:
            item.validate()
            digest = content_hash(item.content)
            row = self._one(_ROWID_OF_HASH, (digest,))
            if row is not None:
                self.conn.execute(_COUNT_DUPLICATE, (now, row[0]))
                results.append(Added(int(row[0]), digest, created=False))
                continue
            self.conn.execute(
                _INSERT_OBSERVATION,
                (
                    item.session_id,
                    item.type,
                    item.title,
                    item.content,
                    item.tool_name,
                    item.project,
                    item.scope,
                    item.topic_key,
                    digest,
                    now,
                    now,
                    now,
                    now,
                    item.pin_floor,
                    max(item.pin_floor, initial_salience(item.importance)),
                    digest,
                    item.kind,
                    item.importance,
                    item.deletion_policy,
                    item.origin_peer,
                    item.source_ref,
                    item.resolved_confidence(),
                    item.resolved_stability(),
                ),
            )
            results.append(Added(self.conn.last_insert_rowid(), digest, created=True))
        return results

    def observation(self, rowid: int) -> Observation | None:
        row = self._one(_OBSERVATION_BY_ROWID, (rowid,))
        return None if row is None else _observation(row)

    def observation_by_hash(self, digest: str) -> Observation | None:
        row = self._one(_OBSERVATION_BY_HASH, (digest,))
        return None if row is None else _observation(row)

    def observations(self, rowids: Sequence[int]) -> dict[int, Observation]:
        if not rowids:
            return {}
        rows = self._all_in(
            f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE id IN ({{marks}})", rowids
        )
        return {int(r[0]): _observation(r) for r in rows}

    def bump_access(self, rowids: Sequence[int], *, now_ms: int) -> None:
        self.conn.executemany(_BUMP_ACCESS, [(iso_from_ms(now_ms), r) for r in rowids])

    def revise(self, rowid: int, changes: dict[str, Any], *, now_ms: int) -> None:
        """Update metadata columns (title, topic_key, importance); counts a revision."""
        unknown = set(changes) - set(REVISABLE_COLUMNS)
        if unknown:
            raise InvalidObservation(f"cannot revise {', '.join(sorted(unknown))}")
        for column, value in sorted(changes.items()):
            self.conn.execute(
                f"UPDATE observations SET {column} = ?, updated_at = ?, "
                "revision_count = revision_count + 1 WHERE id = ?",
                (value, iso_from_ms(now_ms), rowid),
            )
        self.next_counter(METADATA_EPOCH_META_KEY)

    def update_local_metadata(self, rowid: int, changes: dict[str, Any]) -> None:
        """Change metadata of LOCAL_METADATA_COLUMNS here only; updated_at is left alone (it
        names the state a queued revision revises). Call inside a transaction."""
        unknown = set(changes) - set(LOCAL_METADATA_COLUMNS)
        if unknown:
            raise InvalidObservation(f"cannot change {', '.join(sorted(unknown))} here")
        for column, value in sorted(changes.items()):
            self.conn.execute(f"UPDATE observations SET {column} = ? WHERE id = ?", (value, rowid))
        self.next_counter(METADATA_EPOCH_META_KEY)

    def rowids_by_hash(self) -> dict[str, int]:
        return {str(h): int(r) for r, h in self._all(_ROWIDS_AND_HASHES)}
