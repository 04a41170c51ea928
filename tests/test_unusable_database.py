"""A database the commands cannot use: refused in one line naming the file and the
problem, with the documented exit code, and nothing stored lost or changed.

Each case is made from a copy of one template data directory: permissions taken away (run
as root, the commands run under setpriv without the capabilities that bypass file modes),
another process holding the write lock, another application's SQLite file, a database a
newer dreamcycle wrote, an empty file, and damage that `backup` meets.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw
import pytest

from dreamcycle import migrations
from dreamcycle.daemon.cli import main as dreamcycle_cli
from dreamcycle.daemon.cli import pulse_emit as pulse_emit_cli
from dreamcycle.daemon.observe.storage_health import StorageFault, storage_fault
from dreamcycle.store import database
from dreamcycle.store.database import Database, DatabaseError
from tests import daemon_helpers
from tests.daemon_helpers import (
    CLI_TIMEOUT_S,
    DREAMCYCLE,
    PULSE_EMIT,
    Peer,
    documentation_chunks,
    run_in_process,
    side_by_side,
    write_jsonl,
)
from tests.permission_helpers import MODE_OBEYING_PREFIX, modes_taken, needs_file_modes

EXIT_USAGE: Final = 2
EXIT_UNAVAILABLE: Final = 3
#: SQLite's page size, which dreamcycle leaves at its default.
PAGE_BYTES: Final = 4096
#: A busy timeout short enough for a test to wait out (the real one is 10 s).
SHORT_BUSY_TIMEOUT_MS: Final = 300
PULSE: Final = ("pulse", "--kind", "reward", "--text", "assert statements", "--reason", "test")
#: A command of each way into the database: through `Database` alone, through the runtime
#: (model and index too), and queuing a pulse.
COMMANDS: Final = (
    (DREAMCYCLE, "status"),
    (DREAMCYCLE, "recall", "--direct", "assert statements"),
    (PULSE_EMIT, *PULSE),
)
#: Settings of the commands run in this process: no metrics port, no network for the model.
ENVIRONMENT: Final = {"DREAMCYCLE_METRICS_LISTEN": "", "HF_HUB_OFFLINE": "1"}


def reading_writing_running_and_doctor(chunks: Path) -> list[tuple[str, ...]]:
    """A command that reads, one that writes, the daemon and doctor (last)."""
    return [
        (DREAMCYCLE, "status"),
        (DREAMCYCLE, "ingest", "--direct", str(chunks)),
        (DREAMCYCLE, "run", "--once"),
        (DREAMCYCLE, "doctor", "--json"),
    ]


# ---- the commands, as a user runs them ---------------------------------------------------


@dataclass(frozen=True)
class Ran(daemon_helpers.Ran):
    """A command's exit and output, its error lines those that begin with "error:"."""

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.startswith("error:")]

    def refused(self, code: int, *words: str) -> str:
        """The one error line of a refused command, checked to name each of `words`."""
        assert self.code == code, self
        assert "Traceback" not in self.err, self.err
        assert len(self.errors) == 1, self
        for word in words:
            assert word in self.errors[0], (word, self.errors[0])
        return self.errors[0]


def run(peer: Peer, program: str, verb: str, *args: str, obey_modes: bool = False) -> Ran:
    """`program verb args` against `peer` in a subprocess; under `obey_modes`, without the
    capabilities that would let root ignore the permissions a test took away."""
    prefix = (MODE_OBEYING_PREFIX or []) if obey_modes else []
    result = subprocess.run(
        [*prefix, program, verb, *args, *peer.options()],
        capture_output=True,
        text=True,
        env=peer.environment(),
        timeout=CLI_TIMEOUT_S,
        check=False,
    )
    return Ran(result.returncode, result.stdout, result.stderr)


def run_all(
    peer: Peer, commands: Sequence[Sequence[str]], *, obey_modes: bool = False
) -> list[Ran]:
    return side_by_side(
        [functools.partial(run, peer, c[0], c[1], *c[2:], obey_modes=obey_modes) for c in commands]
    )


def run_here(entry: Callable[[Sequence[str]], int], peer: Peer, *args: str) -> Ran:
    """One command in this process (a module constant can then be changed for it), its
    output captured."""
    ran = run_in_process(entry, [*args, *peer.options()])
    return Ran(ran.code, ran.out, ran.err)


def files_of(directory: Path) -> dict[str, bytes]:
    """Every file of a data directory and its bytes: equal means nothing was changed."""
    return {
        path.name: path.read_bytes()
        for path in sorted(directory.iterdir())
        if path.is_file() and path.name != "daemon.lock"
    }


def leave_a_wal(path: Path) -> None:
    """A WAL holding a committed transaction no checkpoint has copied into the database, as
    a process killed after its commit leaves it."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            "import os, sqlite3, sys\n"
            "conn = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "conn.execute('PRAGMA user_version = 0')\n"
            "os._exit(0)\n",
            str(path),
        ],
        check=True,
        timeout=CLI_TIMEOUT_S,
    )
    assert path.with_name(path.name + "-wal").stat().st_size > 0


# ---- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """Chunks ingested and a signing key; copy before changing."""
    root = tmp_path_factory.mktemp("unusable")
    peer = Peer(root / "template", "unusable", root / "zeitgeist")
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(["assert", "try"], 4))
    peer.dreamcycle("ingest", str(chunks))
    peer.provision_key()
    return peer


@pytest.fixture
def peer(template: Peer, tmp_path: Path) -> Peer:
    return template.copy_to(tmp_path / "data")


@pytest.fixture
def chunks(tmp_path: Path) -> Path:
    return write_jsonl(
        tmp_path / "more.jsonl", [{"content": "a memory to store while the database is unusable"}]
    )


@pytest.fixture
def in_this_process() -> Iterator[pytest.MonkeyPatch]:
    """The environment the commands get when a test runs them in this process."""
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("DREAMCYCLE_")]:
            patch.delenv(name)
        for name, value in ENVIRONMENT.items():
            patch.setenv(name, value)
        yield patch


# ---- permissions -------------------------------------------------------------------------


@needs_file_modes
def test_a_read_only_data_directory_is_refused_in_one_line(peer: Peer, chunks: Path) -> None:
    before = files_of(peer.data_dir)
    everything = [peer.data_dir, *(p for p in peer.data_dir.iterdir() if p.is_file())]
    read_only = [(p, stat.S_IMODE(p.stat().st_mode) & ~0o222) for p in everything]
    commands = [
        *COMMANDS,
        (DREAMCYCLE, "ingest", "--direct", str(chunks)),
        (DREAMCYCLE, "backup", str(peer.data_dir.parent / "copy.db")),
    ]
    with modes_taken(*reversed(read_only)):
        runs = run_all(peer, [*commands, (DREAMCYCLE, "doctor", "--json")], obey_modes=True)
    for ran in runs[:-1]:
        ran.refused(EXIT_UNAVAILABLE, str(peer.database_path), "read-only", str(peer.data_dir))
    assert files_of(peer.data_dir) == before
    check = {c["name"]: c for c in json.loads(runs[-1].out)["checks"]}["database"]
    assert check["status"] == "fail" and "read-only" in check["detail"], check
    # Following the advice loses nothing: the file is not to be moved aside.
    assert "chmod" in check["fix"] and "do not move it aside" in check["fix"], check
    assert "empty database" not in check["fix"], check


@needs_file_modes
def test_an_unreadable_database_or_wal_is_refused_naming_it(peer: Peer, chunks: Path) -> None:
    wal = peer.database_path.with_name(peer.database_path.name + "-wal")
    other = peer.copy_to(peer.data_dir.parent / "unreadable")
    leave_a_wal(peer.database_path)
    before = files_of(peer.data_dir)
    commands = reading_writing_running_and_doctor(chunks)
    with modes_taken((wal, 0), (other.database_path, 0)):
        *refusals, doctor = run_all(peer, commands, obey_modes=True)
        unreadable = run(other, DREAMCYCLE, "status", obey_modes=True)
    for ran in refusals:
        ran.refused(EXIT_UNAVAILABLE, str(peer.database_path), "permission denied", wal.name)
    unreadable.refused(EXIT_UNAVAILABLE, str(other.database_path), "permission denied")
    # The transaction only the WAL holds is still there, for the next command to read.
    assert files_of(peer.data_dir) == before
    check = {c["name"]: c for c in json.loads(doctor.out)["checks"]}["database"]
    assert check["status"] == "fail" and "permission denied" in check["detail"], check
    assert "chmod" in check["fix"] and "do not move it aside" in check["fix"], check
    assert "empty database" not in check["fix"], check


def test_a_directory_in_the_database_s_place_is_named(peer: Peer, chunks: Path) -> None:
    for leftover in peer.data_dir.glob("dreamcycle.db*"):
        leftover.unlink()
    peer.database_path.mkdir()
    ingest, reading = run_all(
        peer, [(DREAMCYCLE, "ingest", "--direct", str(chunks)), (DREAMCYCLE, "status")]
    )
    ingest.refused(EXIT_UNAVAILABLE, str(peer.database_path), "is a directory")
    reading.refused(EXIT_USAGE, "no dreamcycle database")


def test_corruption_alone_is_advised_a_restore(peer: Peer) -> None:
    for leftover in peer.data_dir.glob("dreamcycle.db-*"):
        leftover.unlink()
    peer.database_path.write_bytes(os.urandom(64 * 1024))
    ran = run(peer, DREAMCYCLE, "doctor", "--json")
    check = {c["name"]: c for c in json.loads(ran.out)["checks"]}["database"]
    assert check["status"] == "fail" and "not an SQLite database" in check["detail"], check
    fix: str = check["fix"]
    assert "restore the last backup" in fix and "aside" in fix, fix
    assert fix.index("restore the last backup") < fix.index("aside"), fix


# ---- another process's lock --------------------------------------------------------------


def test_a_write_lock_held_past_the_busy_timeout_is_refused_as_locked(
    peer: Peer, chunks: Path, in_this_process: pytest.MonkeyPatch
) -> None:
    in_this_process.setattr(database, "BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
    before = peer.dump()
    holder = apsw.Connection(str(peer.database_path))
    try:
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO meta (key, value) VALUES ('held', 'by another process')")
        ingest = run_here(dreamcycle_cli.main, peer, "ingest", "--direct", str(chunks))
        emit = run_here(pulse_emit_cli.main, peer, *PULSE)
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    for ran in (ingest, emit):
        line = ran.refused(EXIT_UNAVAILABLE, str(peer.database_path), "locked by another process")
        assert line.endswith("try again"), line
    assert peer.dump() == before


def test_a_lock_at_open_is_refused_as_locked(
    peer: Peer, in_this_process: pytest.MonkeyPatch
) -> None:
    in_this_process.setattr(database, "BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
    holder = apsw.Connection(str(peer.database_path))
    try:
        # Exclusive locking mode: once it writes, not even a reader gets in.
        holder.execute("PRAGMA locking_mode = EXCLUSIVE")
        holder.execute("BEGIN IMMEDIATE")
        holder.execute("INSERT INTO meta (key, value) VALUES ('held', 'exclusively')")
        status = run_here(dreamcycle_cli.main, peer, "status")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
    status.refused(EXIT_UNAVAILABLE, str(peer.database_path), "locked by another process")


def test_the_daemon_still_tells_a_lock_from_other_failures(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Commands name the file; the daemon waits out the same faults by their kind."""
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", SHORT_BUSY_TIMEOUT_MS)
    db = Database(peer.database_path)
    holder = apsw.Connection(str(peer.database_path))
    try:
        holder.execute("BEGIN IMMEDIATE")
        with pytest.raises(apsw.BusyError) as raised, db.transaction():
            db.set_meta("never", "written")
        holder.execute("ROLLBACK")
    finally:
        holder.close()
        db.close()
    assert storage_fault(raised.value) is StorageFault.BUSY
    assert str(peer.database_path) in (database.storage_refusal(raised.value) or "")
    assert database.storage_refusal(ValueError("not the database's")) is None

    exclusive = apsw.Connection(str(peer.database_path))
    try:
        exclusive.execute("PRAGMA locking_mode = EXCLUSIVE")
        exclusive.execute("BEGIN IMMEDIATE")
        exclusive.execute("INSERT INTO meta (key, value) VALUES ('held', 'exclusively')")
        with pytest.raises(DatabaseError) as at_open:
            Database(peer.database_path)
        exclusive.execute("ROLLBACK")
    finally:
        exclusive.close()
    assert storage_fault(at_open.value) is StorageFault.BUSY


# ---- not a dreamcycle database -----------------------------------------------------------


def another_application_s_database(path: Path) -> None:
    with closing(sqlite3.connect(path)) as conn:
        conn.execute("CREATE TABLE observations (id INTEGER PRIMARY KEY, content TEXT)")
        conn.execute("INSERT INTO observations (content) VALUES ('not ours')")
        conn.commit()


def test_another_application_s_database_is_refused_and_left_as_it_was(
    tmp_path: Path, chunks: Path
) -> None:
    peer = Peer(tmp_path / "data", "foreign", tmp_path / "zeitgeist")
    peer.data_dir.mkdir()
    another_application_s_database(peer.database_path)
    # `run` would refuse to start without a key before it opened the database.
    peer.provision_key()
    before = files_of(peer.data_dir)
    commands = reading_writing_running_and_doctor(chunks)
    *refusals, doctor = run_all(peer, commands)
    for ran in refusals:
        ran.refused(EXIT_UNAVAILABLE, str(peer.database_path), "not a dreamcycle database")
    assert files_of(peer.data_dir) == before
    assert doctor.code == 1 and "Traceback" not in doctor.err, doctor
    check = {c["name"]: c for c in json.loads(doctor.out)["checks"]}["database"]
    assert check["status"] == "fail" and "not a dreamcycle database" in check["detail"], check
    assert files_of(peer.data_dir) == before


def test_doctor_fails_a_database_lacking_its_tables_rather_than_crashing(peer: Peer) -> None:
    for leftover in peer.data_dir.glob("dreamcycle.db*"):
        leftover.unlink()
    with closing(sqlite3.connect(peer.database_path)) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations "
            "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        conn.commit()
    # An index file to check against the database.
    (peer.data_dir / "index.hnsw").write_bytes(b"")
    ran = run(peer, DREAMCYCLE, "doctor", "--json")
    assert ran.code == 1 and "Traceback" not in ran.err, ran
    checks: dict[str, Any] = {c["name"]: c for c in json.loads(ran.out)["checks"]}
    assert checks["index"]["status"] == "fail" and "meta" in checks["index"]["detail"], checks
    assert checks["index"]["fix"], checks


def test_a_database_a_newer_dreamcycle_wrote_fails_doctor_too(peer: Peer) -> None:
    with closing(sqlite3.connect(peer.database_path)) as conn:
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) "
            "VALUES (9999, '9999_from_the_future.sql', '2100-01-01T00:00:00Z')"
        )
        conn.commit()
    status, doctor = run_all(peer, [(DREAMCYCLE, "status"), (DREAMCYCLE, "doctor", "--json")])
    status.refused(EXIT_UNAVAILABLE, str(peer.database_path), "newer dreamcycle", "9999")
    assert doctor.code == 1, doctor
    check = {c["name"]: c for c in json.loads(doctor.out)["checks"]}["database"]
    assert check["status"] == "fail" and "newer dreamcycle" in check["detail"], check
    assert "9999" in check["detail"] and "upgrade" in check["fix"], check


# ---- an empty file -----------------------------------------------------------------------


def test_an_empty_database_file_is_no_memory_until_run_creates_one(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "empty", tmp_path / "zeitgeist")
    peer.data_dir.mkdir()
    peer.database_path.touch()
    commands = [
        (DREAMCYCLE, "status"),
        (DREAMCYCLE, "backup", str(tmp_path / "copy.db")),
        (DREAMCYCLE, "doctor", "--json"),
    ]
    *refusals, doctor = run_all(peer, commands)
    for ran in refusals:
        ran.refused(EXIT_USAGE, str(peer.data_dir), "empty")
    check = {c["name"]: c for c in json.loads(doctor.out)["checks"]}["database"]
    assert check["status"] == "fail" and "empty" in check["detail"], check
    assert peer.database_path.stat().st_size == 0
    assert sorted(p.name for p in peer.data_dir.iterdir()) == ["dreamcycle.db"]
    peer.dreamcycle("run", "--once")
    applied = peer.scalar("SELECT count(*) FROM schema_migrations")
    assert applied == len(migrations.migration_files())


# ---- backup ------------------------------------------------------------------------------


def test_backup_names_the_source_or_the_target_that_failed(peer: Peer, tmp_path: Path) -> None:
    garbage = peer.copy_to(tmp_path / "garbage")
    garbage.database_path.write_bytes(os.urandom(64 * 1024))
    corrupt = peer.copy_to(tmp_path / "corrupt")
    data = bytearray(corrupt.database_path.read_bytes())
    # The header and the first pages of the schema stay; the rest is noise.
    data[3 * PAGE_BYTES :] = os.urandom(len(data) - 3 * PAGE_BYTES)
    corrupt.database_path.write_bytes(bytes(data))
    foreign = Peer(tmp_path / "foreign", "foreign", peer.zeitgeist_dir)
    foreign.data_dir.mkdir()
    another_application_s_database(foreign.database_path)
    copies = tmp_path / "copies"
    copies.mkdir()
    sources = (garbage, corrupt, foreign)
    before = [source.database_path.read_bytes() for source in sources]
    runs = side_by_side(
        [
            functools.partial(run, source, DREAMCYCLE, "backup", str(copies / f"{n}.db"))
            for n, source in enumerate(sources)
        ]
    )
    for ran, source, problem in zip(
        runs,
        sources,
        ("not an SQLite database", "corrupt", "not a dreamcycle database"),
        strict=True,
    ):
        ran.refused(EXIT_UNAVAILABLE, str(source.database_path), problem)
    assert list(copies.iterdir()) == []
    assert [source.database_path.read_bytes() for source in sources] == before


@needs_file_modes
def test_backup_into_a_read_only_directory_is_a_bad_path(peer: Peer, tmp_path: Path) -> None:
    target = tmp_path / "read-only"
    target.mkdir()
    with modes_taken((target, 0o555)):
        ran = run(peer, DREAMCYCLE, "backup", str(target / "copy.db"), obey_modes=True)
    ran.refused(EXIT_USAGE, str(target), "permission denied")
    assert list(target.iterdir()) == []
