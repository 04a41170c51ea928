"""Revisions of stored chunks: a supersede (new content replacing old) and a reconsolidate
(new metadata on the same content), and the retractions queued here that a new supersede
must not contradict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from dreamcycle.daemon.intake.emit import (
    Emitted,
    check_chunk_hash,
    check_reason,
    queue_entry,
    request_key,
)
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import Database
from dreamcycle.zeitgeist.entries import (
    ChangeValue,
    ReconsolidateEntry,
    SupersedeEntry,
    TombstoneEntry,
)


def emit_supersede(rt: Runtime, *, old_hash: str, new_hash: str, reason: str) -> Emitted:
    """Queue `new_hash` replacing `old_hash`: the new chunk inherits the old one's salience and
    the old is tombstoned, here and on every peer."""
    for digest in (old_hash, new_hash):
        check_chunk_hash(digest)
    check_reason(reason)
    return queue_entry(
        rt,
        request_key("supersede", old=old_hash, new=new_hash),
        lambda hlc: SupersedeEntry(
            hlc=hlc, origin=rt.peer_id, old_hash=old_hash, new_hash=new_hash, reason=reason
        ),
    )


@dataclass(frozen=True)
class QueuedRetractions:
    """The retractions queued here and not applied yet: supersedes (old hash -> new) and
    tombstoned hashes. Read once (`queued_retractions`) for as many edits as are weighed."""

    superseded: Mapping[str, str]
    tombstoned: frozenset[str]

    def contradiction(self, old_hash: str, new_hash: str) -> str | None:
        """Why superseding `old_hash` by `new_hash` would contradict them, None if it would
        not: the old chunk already superseded by another or tombstoned, or the new one
        itself on its way out. Applied in order at the next cycle, either would retract
        both versions (an edit and its undo), or leave two successors."""
        due = "at the next dream cycle"
        if old_hash in self.tombstoned:
            return f"chunk {old_hash} is queued to be retracted (tombstoned) {due}"
        successor = self.superseded.get(old_hash)
        if successor is not None and successor != new_hash:
            return (
                f"chunk {old_hash} is queued to be superseded by {successor} {due}: change "
                "that one instead"
            )
        if new_hash in self.tombstoned or new_hash in self.superseded:
            return (
                f"the new content is chunk {new_hash}, which is queued to be retracted {due}; "
                "a retracted chunk's content cannot be saved again"
            )
        return None


def queued_retractions(db: Database) -> QueuedRetractions:
    superseded: dict[str, str] = {}
    tombstoned: set[str] = set()
    for _, body in db.outbox_unapplied_of_kinds((SupersedeEntry.KIND, TombstoneEntry.KIND)):
        if body.get("kind") == SupersedeEntry.KIND:
            superseded[str(body["old_hash"])] = str(body["new_hash"])
        else:
            tombstoned.add(str(body["content_hash"]))
    return QueuedRetractions(superseded, frozenset(tombstoned))


def emit_revision(
    rt: Runtime, *, digest: str, changes: Mapping[str, ChangeValue], nonce: str
) -> Emitted:
    """Queue metadata changes (title, topic_key, importance, pin_floor) to a chunk. `nonce`
    names the revision, so a change back to an earlier value is a new request rather than a
    repeat."""
    check_chunk_hash(digest)
    return queue_entry(
        rt,
        request_key("reconsolidate", digest=digest, changes=dict(changes), nonce=nonce),
        lambda hlc: ReconsolidateEntry(
            hlc=hlc, origin=rt.peer_id, content_hash=digest, changes=changes
        ),
    )
