"""Reading an engram database: opened so that none of its files changes, its schema read
as it is, and its text decoded whatever its encoding holds.

The source is opened read-only and nothing in it is ever written, checkpointed or
recovered: engram may be running. Its schema is read with `PRAGMA table_info`, so
every engram version with an `observations(content)` table can be imported, and text
that is not valid in the database's encoding is imported with replacement characters
rather than refusing the whole file.
"""

from __future__ import annotations

import shutil
import string
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote

import apsw

from dreamcycle.daemon.intake.engram_memories import (
    OBSERVATION_FIELDS,
    OBSERVATION_NUMBERS,
    OBSERVATION_TEXTS,
    SESSION_FIELDS,
    SourceMemory,
    observation_memory,
    session_memory,
)

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


def _observations(
    conn: apsw.Connection, source: str, columns: set[str], decoder: _TextDecoder
) -> Iterator[SourceMemory]:
    fields = _select(columns, OBSERVATION_FIELDS, numeric=OBSERVATION_NUMBERS)
    sql = f"SELECT rowid, {fields} FROM observations ORDER BY rowid"
    for rowid, *values in conn.execute(sql):
        raw = dict(zip(OBSERVATION_FIELDS, values, strict=True))
        texts = decoder.row("observations", rowid, [raw[name] for name in OBSERVATION_TEXTS])
        row = dict(zip(OBSERVATION_TEXTS, texts, strict=True))
        yield observation_memory(source, rowid, row, raw["revision_count"])


def _session_summaries(
    conn: apsw.Connection, source: str, columns: set[str], decoder: _TextDecoder
) -> Iterator[SourceMemory]:
    sql = f"SELECT rowid, {_select(columns, SESSION_FIELDS)} FROM sessions ORDER BY rowid"
    for rowid, *values in conn.execute(sql):
        texts = decoder.row("sessions", rowid, values)
        memory = session_memory(source, dict(zip(SESSION_FIELDS, texts, strict=True)))
        if memory is not None:
            yield memory
