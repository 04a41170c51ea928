"""Content ingested again with other metadata: the metadata changes, the chunk stays.

The content hash names a chunk, so the same content cannot become a new chunk; what a file
says about it now (title, project, topic, ...) is applied to the chunk already stored:

* title, topic_key, importance and pin_floor are queued as a revision (a `reconsolidate`
  entry, as `update` and `pin` make): applied at the next cycle, journaled there (the audit
  trail `explain` reads) and sent to every peer;
* project, scope, session_id and tool_name only describe the chunk to this peer's filters:
  updated here at once. They are not journaled: the journal's kinds are the steps replay
  knows (a CHECK constraint), and none of these moves salience;
* type, kind and deletion_policy decide how the chunk decays, ranks and may be deleted, and
  the journal's replay depends on them: a change of them is refused before anything is
  stored (new content, which supersedes the old, can carry them);
* confidence and stability are the store's own judgement, moved by evidence (saving the
  same content again is one): a file's value does not overwrite them.

A file cannot tell a field it leaves out from one it sets to the default, so a field at its
default (an empty title, importance 5, ...) is taken as not given: `update` clears one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final

from dreamcycle.daemon.intake.emit_revisions import emit_revision
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import LOCAL_METADATA_COLUMNS, Database, NewObservation
from dreamcycle.store.hashing import content_hash

#: Fields queued as a revision (reconsolidate entry).
REVISED: Final = ("title", "topic_key", "importance", "pin_floor")
#: Fields updated in place, here only.
LOCAL: Final = LOCAL_METADATA_COLUMNS
#: Fields that do not change without new content.
FIXED: Final = ("type", "kind", "deletion_policy")

_DEFAULTS: Final = {f.name: f.default for f in fields(NewObservation)}
_COLUMNS: Final = ("id", "updated_at", "deleted_at", *REVISED, *LOCAL, *FIXED)


@dataclass(frozen=True)
class MetadataReport:
    revisions: int  # queued, applied at the next cycle
    updated: int  # chunks whose local metadata changed here


def _given(item: NewObservation, names: Sequence[str]) -> dict[str, Any]:
    return {n: getattr(item, n) for n in names if getattr(item, n) != _DEFAULTS[n]}


def _stored(db: Database, digest: str) -> dict[str, Any] | None:
    row = db.fetch_one(
        f"SELECT {', '.join(_COLUMNS)} FROM observations WHERE content_hash = ?", (digest,)
    )
    return None if row is None else dict(zip(_COLUMNS, row, strict=True))


def _where(item: NewObservation) -> str:
    return item.source_ref.removeprefix("file:") if item.source_ref else "an item"


def check_fixed(db: Database, items: Sequence[NewObservation]) -> None:
    """Refuse (ValueError naming the item, the field and both values) content stored, or
    given earlier in `items`, with another type, kind or deletion policy."""
    first: dict[str, NewObservation] = {}
    for item in items:
        digest = content_hash(item.content)
        stored = _stored(db, digest)
        earlier = first.setdefault(digest, item)
        if stored is not None:
            reference, where = stored, f"is stored as chunk {digest[:12]}"
        elif earlier is not item:
            reference, where = {n: getattr(earlier, n) for n in FIXED}, f"is in {_where(earlier)}"
        else:
            continue
        for name, value in _given(item, FIXED).items():
            if value != reference[name]:
                raise ValueError(
                    f"{_where(item)}: this content {where} with {name} "
                    f"{reference[name]!r}, not {value!r}; {name} cannot change without new "
                    "content (save the corrected memory as new content: it supersedes the old)"
                )


def apply_metadata(rt: Runtime, items: Sequence[NewObservation]) -> MetadataReport:
    """Give chunks stored before (or earlier in `items`) the metadata `items` state now."""
    revisions = updated = 0
    for item in items:
        stored = _stored(rt.db, content_hash(item.content))
        if stored is None or stored["deleted_at"] is not None:
            continue  # retracted content stays as it was
        digest = content_hash(item.content)
        revised = {n: v for n, v in _given(item, REVISED).items() if v != stored[n]}
        if revised:
            # Named by the stored state it revises: repeating the ingest before the next
            # cycle queues nothing new, and a later change back is a new revision.
            nonce = f"ingest after {stored['updated_at']}"
            revisions += emit_revision(rt, digest=digest, changes=revised, nonce=nonce).new
        local = {n: v for n, v in _given(item, LOCAL).items() if v != stored[n]}
        if local:
            _update_here(rt, stored["id"], local)
            updated += 1
    return MetadataReport(revisions, updated)


def _update_here(rt: Runtime, rowid: int, changes: dict[str, Any]) -> None:
    with rt.db.transaction():
        rt.db.update_local_metadata(rowid, changes)
