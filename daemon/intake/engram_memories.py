"""What an engram memory becomes here: an observation or a session summary read from engram,
mapped onto a chunk's fields, under the identity that finds it again at the next import.

A memory's identity is its `sync_id`, else its normalised content hash with project, scope,
type and title; `session:<id>` for a session summary. See docs/import.md.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Final

import blake3

from dreamcycle.store.database import NewObservation

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


#: The columns of engram's `observations` a memory is made from, in the order they are read;
#: a version that lacks one reads it as NULL.
OBSERVATION_FIELDS: Final = (
    "sync_id", "session_id", "type", "title", "content", "tool_name", "project", "scope",
    "topic_key", "normalized_hash", "revision_count", "created_at", "updated_at", "deleted_at",
)  # fmt: skip
#: Of those, the ones read as numbers; the rest are text.
OBSERVATION_NUMBERS: Final = ("revision_count",)
OBSERVATION_TEXTS: Final = tuple(f for f in OBSERVATION_FIELDS if f not in OBSERVATION_NUMBERS)
#: The columns of engram's `sessions` a summary is made from.
SESSION_FIELDS: Final = ("id", "project", "started_at", "ended_at", "summary")


def observation_memory(
    source: str, rowid: int, row: Mapping[str, str | None], revision_count: object
) -> SourceMemory:
    """The memory in row `rowid` of `observations` in the engram database `source`: `row`
    holds its OBSERVATION_TEXTS decoded, `revision_count` its count as read."""
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
    return SourceMemory(
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
        revision_count=revision_count if isinstance(revision_count, int) else None,
        deleted_at=_deletion_time(row["deleted_at"]),
    )


def session_memory(source: str, row: Mapping[str, str | None]) -> SourceMemory | None:
    """The summary of the session in `row` (its SESSION_FIELDS decoded) of the engram
    database `source`; None when the session has none."""
    session_id, text = row["id"], row["summary"]
    if not text or not text.strip():
        return None  # a session without a summary is not a memory
    return SourceMemory(
        key=f"session:{session_id}",
        source_id=str(session_id),
        item=NewObservation(
            content=text,
            type=SESSION_SUMMARY_TYPE,
            kind=SESSION_SUMMARY_KIND,
            project=row["project"],
            topic_key=f"session/{session_id}",
            session_id=str(session_id),
            source_ref=f"engram:{source}#session/{session_id}",
        ),
        created_at=row["started_at"],
        updated_at=row["ended_at"],
        revision_count=None,
        deleted_at=None,
    )


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


def normalized_hash(content: str) -> str:
    """engram's own `normalized_hash` (sha256 of the lowercased, whitespace-collapsed
    content), for versions that did not store it: identities then survive an upgrade."""
    return hashlib.sha256(" ".join(content.split()).lower().encode("utf-8")).hexdigest()
