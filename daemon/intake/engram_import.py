"""Import an engram database: its observations (and session summaries) become chunks.

The source is opened read-only and nothing in it is ever written, checkpointed or
recovered: engram may be running. Its schema is read with `PRAGMA table_info`, so
every engram version with an `observations(content)` table can be imported, and text
that is not valid in the database's encoding is imported with replacement characters
rather than refusing the whole file.

One module of about 600 lines: reading engram's schema, keying its memories and
deciding what changed are one pass over the source, read in the order it runs.

Each engram memory has an identity (its `sync_id`, else its normalised content
hash with project, scope, type and title; `session/<id>` for a session summary)
recorded in `engram_imports` with the chunk it became. An import takes only what
changed since the last one: new memories are stored and embedded as `ingest`
does, edited content queues a `supersede` of the old chunk, a changed title or
topic a `reconsolidate`, and a deletion a `tombstone`; the daemon applies them
in its next cycle and publishes them. See docs/import.md.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import string
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import apsw
import blake3

from dreamcycle.daemon.intake.emit import (
    QueuedRetractions,
    emit_revision,
    emit_supersede,
    emit_tombstone,
    queued_retractions,
)
from dreamcycle.daemon.intake.ingest import INGEST_BATCH, embed_stored
from dreamcycle.daemon.memory.limits import FieldOverLimit, check_observation_limits
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import Database, InvalidObservation, NewObservation
from dreamcycle.store.engram_imports import ImportRecord, import_records, save_import_record
from dreamcycle.store.hashing import content_hash

#: engram's observation types -> the chunk kind whose decay half-life suits them.
KIND_BY_TYPE: Final = {
    "preference": "preference",
    "decision": "insight",
    "architecture": "insight",
    "pattern": "insight",
    "learning": "insight",
    "discovery": "insight",
    "bugfix": "fact",
    "config": "fact",
    "summary": "summary",
    "session_summary": "summary",
}
#: Everything else (manual, tool_use, file_change, ...) is a note.
DEFAULT_KIND: Final = "note"
#: The type and kind of a session's summary imported as a chunk.
SESSION_SUMMARY_TYPE: Final = "session_summary"
SESSION_SUMMARY_KIND: Final = "summary"
SUPERSEDE_REASON: Final = "edited in engram"
TOMBSTONE_REASON: Final = "deleted in engram"
#: Metadata a change in engram can revise on an existing chunk (see zeitgeist reconsolidate).
REVISED_FIELDS: Final = ("title", "topic_key")
#: Why an edit is left for a later import (docs/import.md).
EDITED_AGAIN_REASON: Final = "edited again before the last edit was applied; import after a cycle"
#: Why a memory with a field longer than the log takes is skipped (docs/import.md).
OVER_LIMIT_REASON: Final = "a field longer than any peer takes"
#: The header bytes (18, 19) of an SQLite file in WAL mode: file format versions 2 and 2.
_WAL_FORMAT: Final = b"\x02\x02"
#: `PRAGMA encoding` -> the codec of the bytes `CAST(text AS BLOB)` returns.
_CODECS: Final = {"UTF-8": "utf-8", "UTF-16le": "utf-16-le", "UTF-16be": "utf-16-be"}
#: SQLite folds only ASCII letters when it compares identifiers.
_IDENTIFIER_CASE: Final = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
#: Rows with undecodable text named in the import's note; the rest are counted.
_NAMED_LOSSY_ROWS: Final = 5


class EngramSourceError(ValueError):
    """The engram database cannot be read; the message names the file and what is missing."""


class Action(StrEnum):
    IMPORTED = "imported"
    SUPERSEDED = "superseded"
    REVISED = "revised"
    TOMBSTONED = "tombstoned"
    UNCHANGED = "unchanged"
    SKIPPED = "skipped"


#: Actions that write to the database.
WRITING_ACTIONS: Final = frozenset(
    {Action.IMPORTED, Action.SUPERSEDED, Action.REVISED, Action.TOMBSTONED}
)


@dataclass(frozen=True)
class SourceMemory:
    """One engram observation or session summary, mapped onto dreamcycle's fields."""

    key: str
    source_id: str
    item: NewObservation
    created_at: str | None
    updated_at: str | None
    revision_count: int | None
    deleted_at: str | None

    @property
    def fingerprint(self) -> str:
        """Changes whenever a mapped field does (the source path is not one: a moved file
        is the same memory)."""
        fields = {**asdict(self.item), "source_ref": None}
        return blake3.blake3(json.dumps(fields, sort_keys=True).encode()).hexdigest()


@dataclass(frozen=True)
class Step:
    action: Action
    memory: SourceMemory
    prior: ImportRecord | None
    #: Why a memory is skipped.
    reason: str | None = None
    #: What a revision changes.
    changes: dict[str, str | None] = field(default_factory=dict)
    #: A skip whose record still moves on, so the next import does not weigh it again.
    remember: bool = False

    @property
    def writes(self) -> bool:
        return self.action in WRITING_ACTIONS or self.remember


@dataclass
class ImportReport:
    source: Path
    dry_run: bool
    read: int = 0
    actions: Counter[Action] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    #: Imported memories whose content was already stored (one chunk serves both).
    already_stored: int = 0
    #: Memories imported from this file before that are no longer in it (kept here).
    gone_from_source: int = 0
    embedded: int = 0
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        parts = [f"read {self.read}"]
        for action in Action:
            text = f"{action.value} {self.actions[action]}"
            if action is Action.IMPORTED and self.already_stored:
                text += f" ({self.already_stored} already stored)"
            if action is Action.SKIPPED and self.skipped:
                text += " (" + ", ".join(f"{r}: {n}" for r, n in sorted(self.skipped.items())) + ")"
            parts.append(text)
        if self.gone_from_source:
            parts.append(f"gone from source {self.gone_from_source} (kept)")
        if not self.dry_run:
            parts.append(f"embedded {self.embedded}")
        return "  ".join(parts)


# ---- reading the source ------------------------------------------------------------------


@contextmanager
def open_engram(path: Path) -> Iterator[apsw.Connection]:
    """A read-only connection to an engram database that cannot change any of its files."""
    if not path.is_file():
        raise EngramSourceError(f"{path}: no such file")
    # SQLite looks for -wal and -shm beside the file it opens: beside a symlink they
    # would be missed, and rows only in the WAL read as never written.
    database = path.resolve()
    wal, shm = Path(f"{database}-wal"), Path(f"{database}-shm")
    with tempfile.TemporaryDirectory(prefix="dreamcycle-engram-") as scratch:
        if shm.exists() and wal.exists():
            # A plain read-only connection still writes its read marks into the -shm file
            # (and recovers a stale one); readonly_shm reads the WAL without touching it.
            # Without the -wal it would create an empty one.
            target, options = database, "mode=ro&readonly_shm=1"
        elif wal.exists() and wal.stat().st_size > 0:
            # A WAL without its index: no process has the database open, and reading it in
            # place would create the index beside it. Read a copy.
            target = Path(scratch) / database.name
            shutil.copyfile(database, target)
            shutil.copyfile(wal, Path(f"{target}-wal"))
            options = "mode=ro"
        elif _header_bytes(database)[18:20] == _WAL_FORMAT:
            # WAL mode, nothing pending and nobody attached (an attached connection keeps
            # the -wal; an -shm alone is left over from a crash): a read-only open would
            # still create -wal and -shm files beside it.
            target, options = database, "mode=ro&immutable=1"
        else:
            target, options = database, "mode=ro"
        uri = f"file:{quote(str(target))}?{options}"
        try:
            conn = apsw.Connection(uri, flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI)
            conn.execute("SELECT count(*) FROM sqlite_schema").fetchall()
        except apsw.Error as exc:
            raise EngramSourceError(f"{path}: not a readable SQLite database ({exc})") from None
        try:
            yield conn
        finally:
            conn.close()


def _header_bytes(path: Path) -> bytes:
    with path.open("rb") as handle:
        return handle.read(100)


def _columns(conn: apsw.Connection, table: str) -> dict[str, str]:
    """`table`'s columns by the name SQL matches them under, to their declared name."""
    return {
        str(row[1]).translate(_IDENTIFIER_CASE): str(row[1])
        for row in conn.execute(f"PRAGMA table_info({table})")
    }


class _TextDecoder:
    """Decodes text columns read as blobs: SQLite does not check that text is valid in its
    encoding, and one such value must not keep every other memory from being imported."""

    def __init__(self, conn: apsw.Connection) -> None:
        ((encoding,),) = conn.execute("PRAGMA encoding").fetchall()
        self.codec = _CODECS.get(str(encoding), "utf-8")
        self.lossy_rows: list[str] = []

    def row(self, table: str, row_id: object, values: Sequence[Any]) -> list[str | None]:
        decoded = [self._decode(value) for value in values]
        if any(text is not None and text[1] for text in decoded):
            self.lossy_rows.append(f"{table} {row_id}")
        return [None if text is None else text[0] for text in decoded]

    def _decode(self, value: Any) -> tuple[str, bool] | None:
        """The text and whether some of it was replaced."""
        if value is None:
            return None
        if not isinstance(value, bytes):
            return str(value), False
        try:
            return value.decode(self.codec), False
        except UnicodeDecodeError:
            return value.decode(self.codec, errors="replace"), True

    def note(self) -> str | None:
        if not self.lossy_rows:
            return None
        named = ", ".join(self.lossy_rows[:_NAMED_LOSSY_ROWS])
        more = len(self.lossy_rows) - _NAMED_LOSSY_ROWS
        rows = named + (f" and {more} more" if more > 0 else "")
        return (
            f"text that is not valid {self.codec} imported with replacement characters "
            f"(U+FFFD) from {len(self.lossy_rows)} row(s): {rows}"
        )


@dataclass(frozen=True)
class EngramSource:
    """What an engram database holds, read whole before anything is stored."""

    path: Path  # resolved: records name the file they came from
    memories: list[SourceMemory]
    #: What this engram version lacks that an import would otherwise use.
    notes: list[str]


def read_engram(path: Path) -> EngramSource:
    """Every observation and non-empty session summary, oldest first."""
    with open_engram(path) as conn:
        columns = _columns(conn, "observations")
        if not columns:
            raise EngramSourceError(f"{path}: no 'observations' table: not an engram database")
        if "content" not in columns:
            raise EngramSourceError(
                f"{path}: table 'observations' has no 'content' column "
                f"(it has {', '.join(sorted(columns.values()))})"
            )
        source = path.resolve()
        notes: list[str] = []
        try:
            decoder = _TextDecoder(conn)
            memories = list(_observations(conn, str(source), set(columns), decoder))
            session_columns = set(_columns(conn, "sessions"))
            if {"id", "summary"} <= session_columns:
                memories.extend(_session_summaries(conn, str(source), session_columns, decoder))
            elif session_columns:
                notes.append("table 'sessions' has no 'summary' column: no summaries imported")
        except apsw.Error as exc:
            raise EngramSourceError(f"{path}: cannot be read: {exc}") from None
        lossy = decoder.note()
        if lossy is not None:
            notes.append(lossy)
    return EngramSource(source, memories, notes)


def _select(columns: set[str], wanted: Sequence[str], *, numeric: Sequence[str] = ()) -> str:
    """`wanted` columns in order, NULL for those this engram version lacks."""
    return ", ".join(_selected(name, columns, numeric) for name in wanted)


def _selected(name: str, columns: set[str], numeric: Sequence[str]) -> str:
    if name not in columns:
        return f"NULL AS {name}"
    if name in numeric:
        return name
    # apsw raises on text that is not valid in the database's encoding before any row
    # can be looked at; as a blob it reaches _TextDecoder whole.
    return f"CAST({name} AS BLOB) AS {name}"


def _deletion_time(deleted_at: str | None) -> str | None:
    """engram's `deleted_at` if it records a deletion. engram writes a timestamp there;
    an empty or blank value, or a zero one (another tool's "unset"), is not one."""
    if deleted_at is None or not deleted_at.strip():
        return None
    try:
        if float(deleted_at) == 0:
            return None
    except ValueError:
        pass
    return deleted_at


_OBSERVATION_FIELDS: Final = (
    "sync_id", "session_id", "type", "title", "content", "tool_name", "project", "scope",
    "topic_key", "normalized_hash", "revision_count", "created_at", "updated_at", "deleted_at",
)  # fmt: skip


_OBSERVATION_NUMBERS: Final = ("revision_count",)
_OBSERVATION_TEXTS: Final = tuple(f for f in _OBSERVATION_FIELDS if f not in _OBSERVATION_NUMBERS)


def _observations(
    conn: apsw.Connection, source: str, columns: set[str], decoder: _TextDecoder
) -> Iterator[SourceMemory]:
    fields = _select(columns, _OBSERVATION_FIELDS, numeric=_OBSERVATION_NUMBERS)
    sql = f"SELECT rowid, {fields} FROM observations ORDER BY rowid"
    for rowid, *values in conn.execute(sql):
        raw = dict(zip(_OBSERVATION_FIELDS, values, strict=True))
        texts = decoder.row("observations", rowid, [raw[name] for name in _OBSERVATION_TEXTS])
        row = dict(zip(_OBSERVATION_TEXTS, texts, strict=True))
        content = row["content"] or ""
        obs_type = row["type"] or "manual"
        title = row["title"] or ""
        scope = row["scope"] or "project"
        project = row["project"]
        if row["sync_id"]:
            key = f"sync:{row['sync_id']}"
        else:
            digest = row["normalized_hash"] or normalized_hash(content)
            parts = json.dumps([digest, project, scope, obs_type, title])
            key = "fields:" + blake3.blake3(parts.encode()).hexdigest()[:32]
        yield SourceMemory(
            key=key,
            source_id=str(rowid),
            item=NewObservation(
                content=content,
                title=title,
                type=obs_type,
                kind=KIND_BY_TYPE.get(obs_type.lower(), DEFAULT_KIND),
                project=project,
                scope=scope,
                topic_key=row["topic_key"],
                session_id=row["session_id"],
                tool_name=row["tool_name"],
                source_ref=f"engram:{source}#{rowid}",
            ),
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            revision_count=raw["revision_count"]
            if isinstance(raw["revision_count"], int)
            else None,
            deleted_at=_deletion_time(row["deleted_at"]),
        )


_SESSION_FIELDS: Final = ("id", "project", "started_at", "ended_at", "summary")


def _session_summaries(
    conn: apsw.Connection, source: str, columns: set[str], decoder: _TextDecoder
) -> Iterator[SourceMemory]:
    sql = f"SELECT rowid, {_select(columns, _SESSION_FIELDS)} FROM sessions ORDER BY rowid"
    for rowid, *values in conn.execute(sql):
        session_id, project, started_at, ended_at, text = decoder.row("sessions", rowid, values)
        if not text or not text.strip():
            continue  # a session without a summary is not a memory
        yield SourceMemory(
            key=f"session:{session_id}",
            source_id=str(session_id),
            item=NewObservation(
                content=text,
                type=SESSION_SUMMARY_TYPE,
                kind=SESSION_SUMMARY_KIND,
                project=project,
                topic_key=f"session/{session_id}",
                session_id=str(session_id),
                source_ref=f"engram:{source}#session/{session_id}",
            ),
            created_at=started_at,
            updated_at=ended_at,
            revision_count=None,
            deleted_at=None,
        )


def normalized_hash(content: str) -> str:
    """engram's own `normalized_hash` (sha256 of the lowercased, whitespace-collapsed
    content), for versions that did not store it: identities then survive an upgrade."""
    return hashlib.sha256(" ".join(content.split()).lower().encode("utf-8")).hexdigest()


# ---- planning ------------------------------------------------------------------------------


def plan_import(
    memories: Sequence[SourceMemory], records: dict[str, ImportRecord], db: Database
) -> list[Step]:
    """What to do with each memory, given what earlier imports recorded."""
    # Which identities use each chunk: a chunk that another live memory still maps to is
    # neither superseded nor tombstoned on behalf of one of them.
    users: dict[str, set[str]] = {}
    for record in records.values():
        if record.deleted_at is None:
            users.setdefault(record.content_hash, set()).add(record.source_key)
    queued = queued_retractions(db)
    steps: list[Step] = []
    seen: set[str] = set()
    for memory in memories:
        prior = records.get(memory.key)
        if memory.key in seen:
            steps.append(Step(Action.SKIPPED, memory, prior, "same identity as an earlier row"))
            continue
        seen.add(memory.key)
        step = _decide(memory, prior, users, db, queued)
        steps.append(step)
        moved = step.action in (Action.SUPERSEDED, Action.IMPORTED)
        if prior is not None and (memory.deleted_at is not None or moved):
            users.get(prior.content_hash, set()).discard(memory.key)
        if memory.deleted_at is None and step.action is not Action.SKIPPED:
            users.setdefault(content_hash(memory.item.content), set()).add(memory.key)
    return steps


def _decide(
    memory: SourceMemory,
    prior: ImportRecord | None,
    users: dict[str, set[str]],
    db: Database,
    queued: QueuedRetractions,
) -> Step:
    live_prior = prior if prior is not None and prior.deleted_at is None else None
    shared = live_prior is not None and bool(
        users.get(live_prior.content_hash, set()) - {memory.key}
    )
    if memory.deleted_at is not None:
        if prior is None:
            return Step(Action.SKIPPED, memory, prior, "deleted before import")
        if live_prior is None:
            return Step(Action.UNCHANGED, memory, prior)
        if shared:
            return Step(
                Action.SKIPPED,
                memory,
                prior,
                "deleted, content kept for another memory",
                remember=True,
            )
        return Step(Action.TOMBSTONED, memory, prior)
    try:
        memory.item.validate()
        check_observation_limits(memory.item)
    except FieldOverLimit:
        # Stored, it would stop every later cycle: its entry could never be published.
        return Step(Action.SKIPPED, memory, prior, OVER_LIMIT_REASON)
    except InvalidObservation as exc:
        return Step(Action.SKIPPED, memory, prior, str(exc))
    digest = content_hash(memory.item.content)
    if live_prior is not None and live_prior.fingerprint == memory.fingerprint:
        return Step(Action.UNCHANGED, memory, prior)
    if live_prior is not None and live_prior.content_hash == digest:
        chunk = db.observation_by_hash(digest)
        changes = {
            name: getattr(memory.item, name)
            for name in REVISED_FIELDS
            if chunk is not None and getattr(memory.item, name) != getattr(chunk, name)
        }
        if not changes:
            # project, scope, type, tool or session: a chunk's content is its identity here.
            return Step(
                Action.SKIPPED, memory, prior, "metadata change kept in engram only", remember=True
            )
        return Step(Action.REVISED, memory, prior, changes=changes)
    if db.is_tombstoned_hash(digest):
        return Step(Action.SKIPPED, memory, prior, "content retracted here (tombstoned)")
    if live_prior is not None and not shared:
        if queued.contradiction(live_prior.content_hash, digest) is not None:
            # Edited again (or back) before the last edit was applied: both supersedes,
            # applied in turn, would retract every version. Weighed again next import.
            return Step(Action.SKIPPED, memory, prior, EDITED_AGAIN_REASON)
        return Step(Action.SUPERSEDED, memory, prior)
    return Step(Action.IMPORTED, memory, prior)


# ---- applying --------------------------------------------------------------------------------

#: progress(stage, chunks done in this call, total expected or None).
Progress = Callable[[str, int, int | None], None]


def import_engram(
    rt: Runtime, engram: EngramSource, *, dry_run: bool = False, progress: Progress | None = None
) -> ImportReport:
    """Import (with `dry_run`, only plan) what changed in `engram` (from read_engram)."""
    report = ImportReport(source=engram.path, dry_run=dry_run, notes=list(engram.notes))
    report.read = len(engram.memories)
    records = import_records(rt.db)
    steps = plan_import(engram.memories, records, rt.db)
    source = str(engram.path)
    present = {m.key for m in engram.memories}
    report.gone_from_source = sum(
        r.source_path == source and r.deleted_at is None and r.source_key not in present
        for r in records.values()
    )
    for step in steps:
        report.actions[step.action] += 1
        if step.action is Action.SKIPPED and step.reason is not None:
            report.skipped[step.reason] += 1
    if dry_run:
        return report
    writes = [s for s in steps if s.writes]
    for start in range(0, len(writes), INGEST_BATCH):
        batch = writes[start : start + INGEST_BATCH]
        # One short transaction per batch: the daemon and other commands wait at most that long.
        with rt.db.transaction():
            report.already_stored += sum(_apply(rt, step, source) for step in batch)
        if progress:
            progress("stored", len(batch), len(writes))
    report.embedded = embed_stored(
        rt, progress=None if progress is None else lambda stage, n: progress(stage, n, None)
    )
    return report


def _apply(rt: Runtime, step: Step, source: str) -> bool:
    """Carry out one step inside the caller's transaction. True if its content was already
    stored (by another memory, or by `ingest`): one chunk then serves both."""
    memory, prior = step.memory, step.prior
    now_ms = rt.clock.now_ms()
    digest = prior.content_hash if prior is not None else content_hash(memory.item.content)
    already = False
    if step.action in (Action.IMPORTED, Action.SUPERSEDED):
        (added,) = rt.db.add_observations([memory.item], now_ms=now_ms)
        already = not added.created
        if step.action is Action.SUPERSEDED:
            emit_supersede(
                rt, old_hash=digest, new_hash=added.content_hash, reason=SUPERSEDE_REASON
            )
        digest = added.content_hash
    elif step.action is Action.REVISED:
        emit_revision(rt, digest=digest, changes=step.changes, nonce=memory.fingerprint)
    elif step.action is Action.TOMBSTONED:
        emit_tombstone(rt, digest=digest, reason=TOMBSTONE_REASON, ttl_s=rt.config.pulses.ttl_s)
    save_import_record(
        rt.db,
        ImportRecord(
            source_key=memory.key,
            content_hash=digest,
            fingerprint=memory.fingerprint,
            source_path=source,
            source_id=memory.source_id,
            created_at=memory.created_at,
            updated_at=memory.updated_at,
            revision_count=memory.revision_count,
            deleted_at=memory.deleted_at,
            imported_ms=now_ms,
        ),
    )
    return already
