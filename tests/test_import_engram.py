"""`dreamcycle import engram` on engram databases built here from engram's two schemas.

The current schema (with sync_id) is written in WAL mode by a connection that stays
open, as a running engram's would, so the import reads through an un-checkpointed
-wal file; the old one lacks sync_id and every optional column. Imports run on the
real database, embedder, index and dream cycles (ManualClock), and through the real
command line for its output and exit codes.
"""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import SUPERSEDED_REASON, run_cycle_blocking
from dreamcycle.daemon.intake.engram_import import (
    TOMBSTONE_REASON,
    Action,
    ImportReport,
    import_engram,
)
from dreamcycle.daemon.intake.engram_memories import SESSION_SUMMARY_KIND, normalized_hash
from dreamcycle.daemon.intake.engram_source import read_engram
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import Runtime
from tests.daemon_helpers import DREAMCYCLE, Peer, documentation_chunks

START_MS: Final = 1_700_000_000_000
#: Reference topics whose paragraphs become engram observations: distinct real text.
TOPICS: Final = ("assert", "raise", "try", "with", "yield", "lambda", "global", "del")
MEMORIES: Final = 16

CURRENT_SCHEMA: Final = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, project TEXT NOT NULL, directory TEXT NOT NULL,
    started_at TEXT NOT NULL DEFAULT (datetime('now')), ended_at TEXT, summary TEXT
);
CREATE TABLE observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, sync_id TEXT, session_id TEXT NOT NULL,
    type TEXT NOT NULL, title TEXT NOT NULL, content TEXT NOT NULL, tool_name TEXT,
    project TEXT, scope TEXT NOT NULL DEFAULT 'project', topic_key TEXT, normalized_hash TEXT,
    revision_count INTEGER NOT NULL DEFAULT 1, duplicate_count INTEGER NOT NULL DEFAULT 1,
    last_seen_at TEXT, created_at TEXT NOT NULL DEFAULT (datetime('now')),
    updated_at TEXT NOT NULL DEFAULT (datetime('now')), deleted_at TEXT,
    FOREIGN KEY (session_id) REFERENCES sessions(id)
);
"""
OLD_SCHEMA: Final = """
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, project TEXT NOT NULL, directory TEXT NOT NULL,
    started_at TEXT NOT NULL DEFAULT (datetime('now')), ended_at TEXT, summary TEXT
);
CREATE TABLE observations (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, type TEXT NOT NULL,
    title TEXT NOT NULL, content TEXT NOT NULL, project TEXT,
    created_at TEXT NOT NULL DEFAULT (datetime('now'))
);
"""
TYPES: Final = ("bugfix", "decision", "pattern", "manual")
SUMMARY: Final = (
    "Session summary: the deploy pipeline now retries S3 uploads with exponential backoff, "
    "and flaky integration tests were quarantined behind a marker."
)


def texts() -> list[dict[str, str]]:
    return documentation_chunks(TOPICS, limit=MEMORIES)


def insert_observations(
    conn: sqlite3.Connection, rows: list[dict[str, str]], *, sync: bool
) -> None:
    for i, row in enumerate(rows):
        values: dict[str, Any] = {
            "session_id": "s1",
            "type": TYPES[i % len(TYPES)],
            "title": row["title"],
            "content": row["content"],
            "project": "dreamcycle",
        }
        if sync:
            values |= {"sync_id": str(uuid.uuid4()), "topic_key": row["topic_key"]}
        columns = ", ".join(values)
        marks = ", ".join("?" * len(values))
        conn.execute(
            f"INSERT INTO observations ({columns}) VALUES ({marks})", tuple(values.values())
        )


@pytest.fixture
def current_engram(tmp_path: Path) -> Iterator[tuple[Path, sqlite3.Connection]]:
    """engram's current schema, in WAL mode, held open by its writer: nothing checkpointed."""
    path = tmp_path / "engram" / "engram.db"
    path.parent.mkdir()
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.executescript(CURRENT_SCHEMA)
    conn.execute("BEGIN")
    conn.execute(
        "INSERT INTO sessions (id, project, directory, summary) VALUES "
        "('s1', 'dreamcycle', '/src/dreamcycle', ?), ('s2', 'dreamcycle', '/src', NULL)",
        (SUMMARY,),
    )
    insert_observations(conn, texts(), sync=True)
    # Deleted before any import, and an empty row engram's own checks would have refused.
    conn.execute(
        "INSERT INTO observations (sync_id, session_id, type, title, content, deleted_at) "
        "VALUES (?, 's1', 'manual', 'gone', 'A memory deleted before the import ran.', "
        "datetime('now'))",
        (str(uuid.uuid4()),),
    )
    conn.execute(
        "INSERT INTO observations (sync_id, session_id, type, title, content) "
        "VALUES (?, 's1', 'manual', 'blank', '   ')",
        (str(uuid.uuid4()),),
    )
    conn.execute("COMMIT")
    assert Path(f"{path}-wal").stat().st_size > 0, "the writes must still be in the WAL"
    try:
        yield path, conn
    finally:
        conn.close()


@pytest.fixture
def old_engram(tmp_path: Path) -> Path:
    """An engram from before sync_id: no optional columns, rollback journal."""
    path = tmp_path / "old-engram.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.executescript(OLD_SCHEMA)
        conn.execute(
            "INSERT INTO sessions (id, project, directory, summary) "
            "VALUES ('s1', 'dreamcycle', '/src', ?)",
            (SUMMARY,),
        )
        rows = texts()
        insert_observations(conn, rows, sync=False)
        # The same memory saved twice: one identity, one chunk.
        insert_observations(conn, rows[:1], sync=False)
        conn.commit()
    return path


def open_runtime(tmp_path: Path) -> Runtime:
    overrides = {
        "peer.id": "a",
        "peer.data_dir": str(tmp_path / "data"),
        "zeitgeist.dir": str(tmp_path / "zeitgeist"),
        "metrics.listen": "",
        "downscale.enabled": False,
        "sweep.enabled": False,
        "efficacy.enabled": False,
    }
    return Runtime.open(load_config(environ={}, overrides=overrides), clock=ManualClock(START_MS))


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = open_runtime(tmp_path)
    try:
        yield runtime
    finally:
        runtime.close()


def run_import(rt: Runtime, path: Path, **kwargs: Any) -> ImportReport:
    return import_engram(rt, read_engram(path), **kwargs)


def counts(report: ImportReport) -> dict[str, int]:
    return {action.value: report.actions[action] for action in Action if report.actions[action]}


def file_states(path: Path) -> dict[str, tuple[bytes, int]]:
    """Bytes and mtime of the database and its -wal and -shm files."""
    return {
        f.name: (f.read_bytes(), f.stat().st_mtime_ns)
        for f in (path, Path(f"{path}-wal"), Path(f"{path}-shm"))
        if f.exists()
    }


def chunk(rt: Runtime, content: str) -> tuple[str, str, str | None, str | None]:
    """(content hash, kind, deleted_at, title) of the chunk holding `content`."""
    row = rt.db.fetch_one(
        "SELECT content_hash, kind, deleted_at, title FROM observations WHERE content = ?",
        (content,),
    )
    assert row is not None, f"no chunk holds {content[:40]!r}"
    return str(row[0]), str(row[1]), row[2], row[3]


def tombstone_reason(rt: Runtime, digest: str) -> str | None:
    row = rt.db.fetch_one("SELECT reason FROM tombstones WHERE hash = ?", (digest,))
    return None if row is None else str(row[0])


# ---- the current schema, in WAL mode -------------------------------------------------------


def test_import_is_incremental_and_edits_become_supersedes_and_tombstones(
    rt: Runtime, current_engram: tuple[Path, sqlite3.Connection]
) -> None:
    path, writer = current_engram
    before = file_states(path)
    assert set(before) == {path.name, f"{path.name}-wal", f"{path.name}-shm"}

    first = run_import(rt, path)
    assert counts(first) == {"imported": MEMORIES + 1, "skipped": 2}
    assert first.skipped == {"deleted before import": 1, "content is empty": 1}
    assert first.embedded == MEMORIES + 1
    assert file_states(path) == before, "the engram files were modified"

    rows = texts()
    _, kind, _, title = chunk(rt, rows[2]["content"])
    assert (kind, title) == ("insight", rows[2]["title"])  # a 'pattern' observation
    summary_hash, summary_kind, _, _ = chunk(rt, SUMMARY)
    assert summary_kind == SESSION_SUMMARY_KIND
    topic = rt.db.fetch_one("SELECT topic_key FROM observations WHERE content = ?", (SUMMARY,))
    assert topic == ("session/s1",)

    # Recall finds an imported memory by what it says.
    hits = recall(rt, "retry S3 uploads with exponential backoff", record=False).hits
    assert hits[0].content_hash == summary_hash

    second = run_import(rt, path)
    assert counts(second) == {"unchanged": MEMORIES + 1, "skipped": 2}
    assert second.embedded == 0
    assert rt.db.counts()["outbox_unpublished"] == 0

    # engram edits one memory, deletes another and retitles a third.
    edited, deleted, retitled = rows[0], rows[1], rows[2]
    new_content = edited["content"] + " Edited: this now also covers chained exceptions."
    writer.execute(
        "UPDATE observations SET content = ?, revision_count = 2, updated_at = datetime('now') "
        "WHERE content = ?",
        (new_content, edited["content"]),
    )
    writer.execute(
        "UPDATE observations SET deleted_at = datetime('now') WHERE content = ?",
        (deleted["content"],),
    )
    writer.execute(
        "UPDATE observations SET title = 'Renamed in engram' WHERE content = ?",
        (retitled["content"],),
    )
    before = file_states(path)
    third = run_import(rt, path)
    assert counts(third) == {
        "superseded": 1,
        "tombstoned": 1,
        "revised": 1,
        "unchanged": MEMORIES - 3 + 1,
        "skipped": 2,
    }
    assert file_states(path) == before

    old_hash = chunk(rt, edited["content"])[0]
    new_hash = chunk(rt, new_content)[0]
    deleted_hash = chunk(rt, deleted["content"])[0]
    retitled_hash = chunk(rt, retitled["content"])[0]
    # Queued, not yet applied: the daemon applies them in its next cycle.
    assert chunk(rt, edited["content"])[2] is None
    peer = rt.open_peer()
    try:
        run_cycle_blocking(peer)
    finally:
        peer.close()
    assert tombstone_reason(rt, old_hash) == SUPERSEDED_REASON
    assert tombstone_reason(rt, deleted_hash) == TOMBSTONE_REASON
    assert tombstone_reason(rt, new_hash) is None and chunk(rt, new_content)[2] is None
    assert chunk(rt, retitled["content"])[3] == "Renamed in engram"
    assert tombstone_reason(rt, retitled_hash) is None
    # Published like any local entry.
    published = {
        str(kind)
        for (kind,) in rt.db.fetch_all("SELECT kind FROM outbox WHERE segment_seq IS NOT NULL")
    }
    assert {"supersede", "tombstone", "reconsolidate"} <= published

    fourth = run_import(rt, path)
    assert counts(fourth) == {"unchanged": MEMORIES + 1, "skipped": 2}


def test_dry_run_reports_and_writes_nothing(
    rt: Runtime, current_engram: tuple[Path, sqlite3.Connection]
) -> None:
    path, _ = current_engram
    report = run_import(rt, path, dry_run=True)
    assert counts(report) == {"imported": MEMORIES + 1, "skipped": 2}
    assert rt.db.counts()["observations"] == 0
    assert rt.db.fetch_all("SELECT * FROM engram_imports") == []


@pytest.mark.parametrize("leftover", ["wal without shm", "checkpointed"])
def test_reading_creates_no_files_beside_the_source(
    tmp_path: Path, current_engram: tuple[Path, sqlite3.Connection], leftover: str
) -> None:
    live, writer = current_engram
    path = tmp_path / "copy" / "engram.db"
    path.parent.mkdir()
    if leftover == "wal without shm":
        # What a crashed engram leaves once its -shm is gone: the rows are only in the WAL.
        for suffix in ("", "-wal"):
            Path(f"{path}{suffix}").write_bytes(Path(f"{live}{suffix}").read_bytes())
    else:
        writer.close()  # the last connection checkpoints and removes -wal and -shm
        path.write_bytes(live.read_bytes())
    before = file_states(path)
    source = read_engram(path)
    assert len(source.memories) == MEMORIES + 3
    assert file_states(path) == before
    assert sorted(f.name for f in path.parent.iterdir()) == sorted(before)


# ---- an old engram -------------------------------------------------------------------------


def test_old_schema_without_sync_id_imports_once(rt: Runtime, old_engram: Path) -> None:
    first = run_import(rt, old_engram)
    assert counts(first) == {"imported": MEMORIES + 1, "skipped": 1}
    assert first.skipped == {"same identity as an earlier row": 1}
    keys = [str(k) for (k,) in rt.db.fetch_all("SELECT source_key FROM engram_imports")]
    assert sum(k.startswith("fields:") for k in keys) == MEMORIES
    assert "session:s1" in keys
    assert counts(run_import(rt, old_engram)) == {"unchanged": MEMORIES + 1, "skipped": 1}


def test_normalized_hash_matches_engram() -> None:
    # engram: sha256 of strings.ToLower(strings.Join(strings.Fields(content), " ")).
    expected = hashlib.sha256(b"retry with backoff").hexdigest()
    assert normalized_hash("  Retry\n\twith   BACKOFF ") == expected


# ---- refused sources, through the command line ---------------------------------------------


def broken_sources(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """(engram database that cannot be imported, what the error must name)."""
    no_table = tmp_path / "no-observations.db"
    with closing(sqlite3.connect(no_table)) as conn:
        conn.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY, summary TEXT)")
    yield no_table, "no 'observations' table"
    no_content = tmp_path / "no-content.db"
    with closing(sqlite3.connect(no_content)) as conn:
        conn.execute("CREATE TABLE observations (id INTEGER PRIMARY KEY, title TEXT)")
    yield no_content, "has no 'content' column"
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database\n" * 300)
    yield garbage, "not a readable SQLite database"
    yield tmp_path / "missing.db", "no such file"


def test_unusable_sources_are_refused_with_exit_2(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "a", tmp_path / "zeitgeist")
    sources = list(broken_sources(tmp_path))
    results = peer.run_concurrently(
        [(DREAMCYCLE, "import", "engram", str(source)) for source, _ in sources]
    )
    for (source, message), result in zip(sources, results, strict=True):
        assert result.returncode == 2, f"{source}: exit {result.returncode}\n{result.stderr}"
        assert message in result.stderr and str(source) in result.stderr, result.stderr
    assert not peer.data_dir.exists(), "a refused import must not create the data directory"


def test_command_line_prints_progress_and_summary(
    tmp_path: Path, current_engram: tuple[Path, sqlite3.Connection]
) -> None:
    path, _ = current_engram
    peer = Peer(tmp_path / "data", "a", tmp_path / "zeitgeist")
    result = peer.dreamcycle("import", "engram", str(path))
    assert result.stdout.startswith(f"read {MEMORIES + 3}  imported {MEMORIES + 1}"), result.stdout
    assert "deleted before import: 1" in result.stdout
    assert "stored" in result.stderr and "embedded" in result.stderr  # the progress bars
    dry = peer.dreamcycle("import", "engram", str(path), "--dry-run")
    assert dry.stdout.startswith("dry run: "), dry.stdout
    assert f"unchanged {MEMORIES + 1}" in dry.stdout
    assert peer.scalar("SELECT count(*) FROM engram_imports") == MEMORIES + 1
