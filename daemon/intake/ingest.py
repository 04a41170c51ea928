"""Bulk ingest: text or JSONL files into observations, embedded in batches.

Each file is read and validated whole before anything is stored, so a bad
line names itself and leaves the database as it was. The daemon indexes the
new chunks (and announces them to the mesh) in its next cycle.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final, get_args, get_type_hints

from dreamcycle.daemon.memory.confidence import corroborate
from dreamcycle.daemon.memory.limits import check_observation_limits
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import InvalidObservation, NewObservation

#: Rows written per transaction while ingesting.
INGEST_BATCH: Final = 256
#: The most of a refused value an error message repeats.
SHOWN_VALUE_CHARS: Final = 200
#: Suffixes of JSON Lines files, compared in lower case (`NOTES.JSONL` is JSON Lines too).
JSONL_SUFFIXES: Final = (".jsonl", ".ndjson")
_JSONL_FIELDS: Final = {f.name for f in fields(NewObservation)} - {"origin_peer", "source_ref"}


def _json_types(annotation: Any) -> tuple[type, ...]:
    """The JSON values a field accepts: `float` takes integers too, `X | None` takes null."""
    accepted = get_args(annotation) if isinstance(annotation, types.UnionType) else (annotation,)
    return tuple(t for a in accepted for t in ((int, float) if a is float else (a,)))


#: Field -> accepted JSON value types, so a wrong type is refused with its line, not stored.
_JSONL_TYPES: Final = {
    name: _json_types(hint)
    for name, hint in get_type_hints(NewObservation).items()
    if name in _JSONL_FIELDS
}


class IngestError(ValueError):
    """A file that cannot be ingested; the message names the file and line."""


@dataclass(frozen=True)
class IngestReport:
    files: int
    read: int
    created: int
    duplicates: int
    embedded: int


def read_file(path: Path) -> list[NewObservation]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise IngestError(f"{path}: cannot be read: {exc.strerror}") from None
    if is_jsonl(path):
        return list(_jsonl(path, text))
    return list(_paragraphs(path, text))


def is_jsonl(path: Path) -> bool:
    return path.suffix.lower() in JSONL_SUFFIXES


def _source_ref(path: Path) -> str:
    """`file:NAME`; a name that is not UTF-8 (bytes the file system kept as they were) is
    shown with replacement characters, since the database stores only valid text."""
    name = path.name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return f"file:{name}"


def _checked(item: NewObservation, where: str) -> NewObservation:
    """`item`, once it is valid and within the limits every peer can publish; IngestError
    naming `where` otherwise."""
    try:
        item.validate()
        check_observation_limits(item)
    except InvalidObservation as exc:
        raise IngestError(f"{where}: {exc}") from None
    return item


def _paragraphs(path: Path, text: str) -> Iterator[NewObservation]:
    """Plain text: one chunk per blank-line-separated paragraph."""
    line_no = 1
    number = 0
    for paragraph in text.split("\n\n"):
        content = paragraph.strip()
        if content:
            number += 1
            leading = paragraph[: len(paragraph) - len(paragraph.lstrip())]
            first_line = line_no + leading.count("\n")
            yield _checked(
                NewObservation(content=content, source_ref=_source_ref(path)),
                f"{path}: paragraph {number} (line {first_line})",
            )
        line_no += paragraph.count("\n") + 2


def _jsonl(path: Path, text: str) -> Iterator[NewObservation]:
    # Only "\n" ends a line: str.splitlines() also splits at U+2028 and other separators
    # that JSON strings may hold unescaped.
    for line_no, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            obj: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(f"{path}:{line_no}: invalid JSON: {exc.msg}") from None
        if not isinstance(obj, dict):
            raise IngestError(f"{path}:{line_no}: expected a JSON object, got {type(obj).__name__}")
        unknown = sorted(set(obj) - _JSONL_FIELDS)
        if unknown:
            raise IngestError(
                f"{path}:{line_no}: unknown field(s) {', '.join(unknown)} "
                f"(known: {', '.join(sorted(_JSONL_FIELDS))})"
            )
        if not isinstance(obj.get("content"), str):
            raise IngestError(f"{path}:{line_no}: 'content' must be a string")
        for name, value in obj.items():
            accepted = _JSONL_TYPES[name]
            if isinstance(value, bool) or not isinstance(value, accepted):
                names = " or ".join("null" if t is type(None) else t.__name__ for t in accepted)
                raise IngestError(
                    f"{path}:{line_no}: field {name!r} must be {names}, got {_shown(value)}"
                )
        yield _checked(
            NewObservation(**obj, source_ref=f"{_source_ref(path)}:{line_no}"),
            f"{path}:{line_no}",
        )


def _shown(value: Any) -> str:
    """A JSON value as a message shows it: at most SHOWN_VALUE_CHARS characters, which are
    ASCII (a lone surrogate must not make the message itself unprintable)."""
    text = json.dumps(value)
    if len(text) > SHOWN_VALUE_CHARS:
        return f"{text[:SHOWN_VALUE_CHARS]}... ({len(text)} characters)"
    return text


def read_files(paths: Sequence[Path]) -> list[list[NewObservation]]:
    """Every file read and validated before anything is stored."""
    return [read_file(path) for path in paths]


def ingest(
    rt: Runtime,
    files: Sequence[Sequence[NewObservation]],
    *,
    embed: bool = True,
    progress: Callable[[str, int], None] | None = None,
) -> IngestReport:
    """Store the chunks of `files` (from read_files); embed them now when `embed` (the daemon
    reuses the vectors)."""
    created = duplicates = embedded = read = 0
    for items in files:
        read += len(items)
        for start in range(0, len(items), INGEST_BATCH):
            batch = items[start : start + INGEST_BATCH]
            with rt.db.transaction():
                now = rt.clock.now_ms()
                added = rt.db.add_observations(batch, now_ms=now)
                # Content stored already is stated again: a verification of it.
                corroborate(rt.db, added, now_ms=now)
            created += sum(a.created for a in added)
            duplicates += sum(not a.created for a in added)
            if progress:
                progress("stored", len(batch))
    if embed:
        embedded = embed_stored(rt, progress=progress)
    return IngestReport(len(files), read, created, duplicates, embedded)


def embed_stored(rt: Runtime, *, progress: Callable[[str, int], None] | None = None) -> int:
    """Embed every live chunk still lacking a vector, a batch per transaction."""
    done = 0
    while pending := rt.db.unembedded(INGEST_BATCH):
        vectors = rt.embedder.embed([text for _, text in pending])
        with rt.db.transaction():
            rt.db.set_embeddings(
                [rowid for rowid, _ in pending],
                vectors,
                model_id=rt.embedder.model_id,
                index_version=rt.embedder.index_version,
            )
        done += len(pending)
        if progress:
            progress("embedded", len(pending))
    return done
