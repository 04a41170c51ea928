"""What `dreamcycle import engram` reads from engram databases in unusual states.

Each database is built here with Python's sqlite3: a stale -shm without its -wal, a
source reached through a symlink while its newest rows are only in the WAL, text that
is not valid UTF-8, columns declared in another case, and `deleted_at` values that do
not record a deletion. The source's files must come out byte for byte as they went in.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.cycle import SUPERSEDED_REASON, run_cycle_blocking
from dreamcycle.daemon.intake.engram_import import EDITED_AGAIN_REASON, OVER_LIMIT_REASON
from dreamcycle.daemon.intake.engram_source import read_engram
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.hashing import content_hash
from tests.daemon_helpers import Peer
from tests.test_import_engram import (
    counts,
    file_states,
    open_runtime,
    run_import,
    tombstone_reason,
)

MINIMAL_SCHEMA: Final = """
CREATE TABLE sessions (id TEXT PRIMARY KEY, summary TEXT);
CREATE TABLE observations (
    id INTEGER PRIMARY KEY, title TEXT, content TEXT NOT NULL, deleted_at TEXT
);
"""
KEPT: Final = (
    "Retries of S3 uploads use exponential backoff capped at thirty seconds.",
    "Integration tests that talk to the network are quarantined behind a marker.",
    "The release checklist lives in docs/release.md and is run before every tag.",
)
#: Deleted in engram after the last checkpoint: the main file alone still shows it live.
DELETED_IN_WAL: Final = "Builds pin the compiler version in the toolchain file."
#: Written after the last checkpoint: the main file alone does not have it.
ADDED_IN_WAL: Final = "Database migrations run in a single transaction per version."


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = open_runtime(tmp_path)
    try:
        yield runtime
    finally:
        runtime.close()


def directory_listing(*directories: Path) -> dict[str, list[str]]:
    return {str(d): sorted(f.name for f in d.iterdir()) for d in directories}


def stored_contents(rt: Runtime) -> set[str]:
    return {str(content) for (content,) in rt.db.fetch_all("SELECT content FROM observations")}


def create_minimal(path: Path, *, encoding: str = "UTF-8") -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"PRAGMA encoding = '{encoding}'")
    conn.executescript(MINIMAL_SCHEMA)
    return conn


# ---- the source's files are never touched ---------------------------------------------------


def test_shm_without_wal_is_read_without_creating_a_wal(tmp_path: Path) -> None:
    # A WAL-mode database whose last connection checkpointed and removed its -wal, with an
    # -shm left over (a crash after the checkpoint, or a copy of the directory).
    path = tmp_path / "engram" / "engram.db"
    path.parent.mkdir()
    with closing(create_minimal(path)) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.executemany("INSERT INTO observations (content) VALUES (?)", [(c,) for c in KEPT])
    Path(f"{path}-shm").write_bytes(bytes(32768))
    before, listing = file_states(path), directory_listing(path.parent)
    assert set(before) == {path.name, f"{path.name}-shm"}

    assert [m.item.content for m in read_engram(path).memories] == list(KEPT)
    peer = Peer(tmp_path / "data", "a", tmp_path / "zeitgeist")
    dry = peer.dreamcycle("import", "engram", str(path), "--dry-run")
    assert dry.stdout.startswith(f"dry run: read {len(KEPT)}  imported {len(KEPT)}"), dry.stdout

    assert directory_listing(path.parent) == listing
    assert file_states(path) == before


def write_engram_with_pending_wal(path: Path) -> sqlite3.Connection:
    """A running engram's database: checkpointed once, then changed only in its WAL."""
    conn = create_minimal(path)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.executemany(
        "INSERT INTO observations (content) VALUES (?)", [(c,) for c in (*KEPT, DELETED_IN_WAL)]
    )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute(
        "UPDATE observations SET deleted_at = datetime('now') WHERE content = ?", (DELETED_IN_WAL,)
    )
    conn.execute("INSERT INTO observations (content) VALUES (?)", (ADDED_IN_WAL,))
    assert Path(f"{path}-wal").stat().st_size > 0, "the changes must still be in the WAL"
    return conn


@pytest.mark.parametrize("state", ["engram running", "wal without shm"])
def test_source_through_a_symlink_reads_the_wal_beside_the_real_file(
    rt: Runtime, tmp_path: Path, state: str
) -> None:
    running = tmp_path / "running" / "engram.db"
    running.parent.mkdir()
    writer = write_engram_with_pending_wal(running)
    try:
        if state == "engram running":
            real = running
        else:
            # What a crashed engram leaves once its -shm is gone.
            real = tmp_path / "crashed" / "engram.db"
            real.parent.mkdir()
            for suffix in ("", "-wal"):
                Path(f"{real}{suffix}").write_bytes(Path(f"{running}{suffix}").read_bytes())
        link = tmp_path / "links" / "engram.db"
        link.parent.mkdir()
        link.symlink_to(Path("..") / real.parent.name / real.name)
        before, listing = file_states(real), directory_listing(real.parent, link.parent)

        source = read_engram(link)
        report = run_import(rt, link)

        assert directory_listing(real.parent, link.parent) == listing
        assert file_states(real) == before
    finally:
        writer.close()
    assert source.path == real
    live = {m.item.content for m in source.memories if m.deleted_at is None}
    assert live == {*KEPT, ADDED_IN_WAL}
    assert [m.item.content for m in source.memories if m.deleted_at is not None] == [DELETED_IN_WAL]
    assert counts(report) == {"imported": len(KEPT) + 1, "skipped": 1}
    assert report.skipped == {"deleted before import": 1}
    assert stored_contents(rt) == {*KEPT, ADDED_IN_WAL}


# ---- text and column names ----------------------------------------------------------------


def test_text_that_is_not_utf8_is_imported_with_replacement_characters(
    rt: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "engram.db"
    with closing(create_minimal(path)) as conn:
        conn.executemany("INSERT INTO observations (content) VALUES (?)", [(c,) for c in KEPT])
        conn.execute(
            "UPDATE observations SET content = CAST(? AS TEXT), title = CAST(? AS TEXT) "
            "WHERE id = 2",
            (b"Latin-1 left this: caf\xe9 \xff in the notes.", b"\xfe title"),
        )
        conn.execute(
            "INSERT INTO sessions (id, summary) VALUES ('s1', CAST(? AS TEXT))",
            (b"Session summary written by a broken encoder: \xc3\x28 and more.",),
        )

    report = run_import(rt, path)
    assert counts(report) == {"imported": len(KEPT) + 1}
    assert any("observations 2, sessions 1" in note for note in report.notes), report.notes
    assert stored_contents(rt) == {
        KEPT[0],
        "Latin-1 left this: caf\ufffd \ufffd in the notes.",
        KEPT[2],
        "Session summary written by a broken encoder: \ufffd( and more.",
    }
    title = rt.db.fetch_one("SELECT title FROM observations WHERE content LIKE 'Latin-1%'")
    assert title == ("\ufffd title",)
    assert counts(run_import(rt, path)) == {"unchanged": len(KEPT) + 1}


@pytest.mark.parametrize("encoding", ["UTF-16le", "UTF-16be"])
def test_utf16_database_text_is_decoded_in_its_own_encoding(tmp_path: Path, encoding: str) -> None:
    path = tmp_path / "engram.db"
    content = "Café notes: the ☕ machine is on floor 3, naïvely documented."
    with closing(create_minimal(path, encoding=encoding)) as conn:
        conn.execute("INSERT INTO observations (title, content) VALUES ('Büro', ?)", (content,))
    source = read_engram(path)
    assert [(m.item.title, m.item.content) for m in source.memories] == [("Büro", content)]
    assert source.notes == []


def test_column_names_match_in_any_case(tmp_path: Path) -> None:
    path = tmp_path / "engram.db"
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE Sessions (ID TEXT PRIMARY KEY, Summary TEXT)")
        conn.execute(
            "CREATE TABLE Observations "
            "(ID INTEGER PRIMARY KEY, Content TEXT, Title TEXT, Deleted_At TEXT)"
        )
        conn.execute(
            "INSERT INTO Observations (Content, Title, Deleted_At) VALUES (?, 'Retries', NULL), "
            "(?, 'Gone', '2024-05-01 10:00:00')",
            (KEPT[0], DELETED_IN_WAL),
        )
        conn.execute("INSERT INTO Sessions (ID, Summary) VALUES ('s1', ?)", (KEPT[1],))
        conn.commit()
    source = read_engram(path)
    assert [(m.item.title, m.item.content, m.deleted_at) for m in source.memories] == [
        ("Retries", KEPT[0], None),
        ("Gone", DELETED_IN_WAL, "2024-05-01 10:00:00"),
        ("", KEPT[1], None),
    ]
    assert source.notes == []


# ---- deletion ------------------------------------------------------------------------------


def test_only_a_deletion_time_marks_a_memory_deleted(rt: Runtime, tmp_path: Path) -> None:
    not_deleted: list[object] = [None, "", "   ", 0, "0", 0.0]
    path = tmp_path / "engram.db"
    with closing(create_minimal(path)) as conn:
        rows = [
            (f"Memory number {i} about the deploy pipeline.", v) for i, v in enumerate(not_deleted)
        ]
        rows.append((DELETED_IN_WAL, "2024-05-01 10:00:00"))
        conn.executemany("INSERT INTO observations (content, deleted_at) VALUES (?, ?)", rows)
    source = read_engram(path)
    assert [m.deleted_at for m in source.memories] == [None] * len(not_deleted) + [
        "2024-05-01 10:00:00"
    ]
    report = run_import(rt, path, dry_run=True)
    assert counts(report) == {"imported": len(not_deleted), "skipped": 1}
    assert report.skipped == {"deleted before import": 1}


def test_a_memory_longer_than_any_peer_takes_is_skipped_and_the_rest_imported(
    rt: Runtime, tmp_path: Path
) -> None:
    # Stored, it could never be published: every later cycle would fail on it.
    path = tmp_path / "engram.db"
    with closing(create_minimal(path)) as conn:
        conn.execute(
            "INSERT INTO observations (title, content) VALUES (?, ?)", ("T" * 10_001, KEPT[0])
        )
        conn.execute("INSERT INTO observations (title, content) VALUES (?, ?)", ("fine", KEPT[1]))
    report = run_import(rt, path)
    assert counts(report) == {"imported": 1, "skipped": 1}
    assert report.skipped == {OVER_LIMIT_REASON: 1}
    assert stored_contents(rt) == {KEPT[1]}


def test_an_edit_undone_before_a_cycle_waits_and_no_version_is_lost(
    rt: Runtime, tmp_path: Path
) -> None:
    path = tmp_path / "engram.db"
    first, second = KEPT[0], KEPT[0] + " Edited: the cap is now sixty seconds."
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        # With a sync_id, an edit of the content is the same memory's new version.
        conn.execute(
            "CREATE TABLE observations (id INTEGER PRIMARY KEY, sync_id TEXT, content TEXT)"
        )
        conn.execute("INSERT INTO observations VALUES (1, 'sync-1', ?)", (first,))
    assert counts(run_import(rt, path)) == {"imported": 1}
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE observations SET content = ? WHERE id = 1", (second,))
    assert counts(run_import(rt, path)) == {"superseded": 1}
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("UPDATE observations SET content = ? WHERE id = 1", (first,))
    undone = run_import(rt, path)
    # Both supersedes, applied in turn, would have retracted both versions.
    assert undone.skipped == {EDITED_AGAIN_REASON: 1}
    peer = rt.open_peer()
    try:
        run_cycle_blocking(peer)
    finally:
        peer.close()
    assert tombstone_reason(rt, content_hash(first)) == SUPERSEDED_REASON
    assert tombstone_reason(rt, content_hash(second)) is None
    assert stored_contents(rt) >= {second}
