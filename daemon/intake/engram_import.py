"""Import an engram database: what changed in it since the last import, carried over, and
what each engram memory became, recorded.

Each engram memory's identity (engram_memories.py) is recorded in `engram_imports` with
the chunk it became. An import takes only what changed since the last one: new memories
are stored and embedded as `ingest` does, edited content queues a `supersede` of the old
chunk, a changed title or topic a `reconsolidate`, and a deletion a `tombstone`; the
daemon applies them in its next cycle and publishes them. See docs/import.md.

The source is read whole (engram_source.py) before anything is stored.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final

from dreamcycle.daemon.intake.emit_revisions import (
    QueuedRetractions,
    emit_revision,
    emit_supersede,
    queued_retractions,
)
from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone
from dreamcycle.daemon.intake.engram_memories import SourceMemory
from dreamcycle.daemon.intake.engram_source import EngramSource
from dreamcycle.daemon.intake.ingest import INGEST_BATCH, embed_stored
from dreamcycle.daemon.memory.limits import FieldOverLimit, check_observation_limits
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import Database, InvalidObservation
from dreamcycle.store.engram_imports import ImportRecord, import_records, save_import_record
from dreamcycle.store.hashing import content_hash

SUPERSEDE_REASON: Final = "edited in engram"
TOMBSTONE_REASON: Final = "deleted in engram"
#: Metadata a change in engram can revise on an existing chunk (see zeitgeist reconsolidate).
REVISED_FIELDS: Final = ("title", "topic_key")
#: Why an edit is left for a later import (docs/import.md).
EDITED_AGAIN_REASON: Final = "edited again before the last edit was applied; import after a cycle"
#: Why a memory with a field longer than the log takes is skipped (docs/import.md).
OVER_LIMIT_REASON: Final = "a field longer than any peer takes"


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
