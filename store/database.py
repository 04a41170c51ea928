"""The local SQLite database (apsw): the connection, its transactions and its migrations.

One `Database` per process. The daemon and the CLIs open the same file; WAL
and a busy timeout let `pulse-emit` and `recall` write while the daemon runs.
Each table's queries live in a module of their own (store/observations.py,
store/outbox.py, ...); `Database` assembles them. The names they define that
callers import from here are re-exported below.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Final

import apsw
import apsw.bestpractice
import apsw.ext

from dreamcycle.store.attributions import AttributionQueries
from dreamcycle.store.attributions import AttributionRecord as AttributionRecord
from dreamcycle.store.attributions import OutcomeRecord as OutcomeRecord
from dreamcycle.store.attributions import SuccessfulDecision as SuccessfulDecision
from dreamcycle.store.attributions import outcomes_of_decision as outcomes_of_decision
from dreamcycle.store.counts import CountQueries
from dreamcycle.store.cycles import CycleQueries
from dreamcycle.store.embeddings import EmbeddingQueries
from dreamcycle.store.embeddings import PendingChunk as PendingChunk
from dreamcycle.store.embeddings import blob_to_vector as blob_to_vector
from dreamcycle.store.embeddings import embedding_text as embedding_text
from dreamcycle.store.embeddings import vector_to_blob as vector_to_blob
from dreamcycle.store.implicit_credits import ImplicitCreditQueries
from dreamcycle.store.journal import JournalQueries
from dreamcycle.store.journal import JournalStep as JournalStep
from dreamcycle.store.learned_keys_awaiting import LearnedKeysAwaitingQueries
from dreamcycle.store.log_applied import AppliedLogQueries
from dreamcycle.store.meta import METADATA_EPOCH_META_KEY as METADATA_EPOCH_META_KEY
from dreamcycle.store.meta import ROWS_DELETED_META_KEY, MetaQueries
from dreamcycle.store.meta import TIER_EPOCH_META_KEY as TIER_EPOCH_META_KEY
from dreamcycle.store.migrations import apply_migrations, refuse_foreign
from dreamcycle.store.observations import CHUNK_KINDS as CHUNK_KINDS
from dreamcycle.store.observations import DELETION_POLICIES as DELETION_POLICIES
from dreamcycle.store.observations import EFFICACY_TYPE as EFFICACY_TYPE
from dreamcycle.store.observations import (
    INITIAL_SALIENCE_BASE as INITIAL_SALIENCE_BASE,
)
from dreamcycle.store.observations import (
    INITIAL_SALIENCE_PER_IMPORTANCE as INITIAL_SALIENCE_PER_IMPORTANCE,
)
from dreamcycle.store.observations import (
    LOCAL_METADATA_COLUMNS as LOCAL_METADATA_COLUMNS,
)
from dreamcycle.store.observations import REVISABLE_COLUMNS as REVISABLE_COLUMNS
from dreamcycle.store.observations import Added as Added
from dreamcycle.store.observations import InvalidObservation as InvalidObservation
from dreamcycle.store.observations import NewObservation as NewObservation
from dreamcycle.store.observations import Observation as Observation
from dreamcycle.store.observations import ObservationQueries
from dreamcycle.store.observations import initial_salience as initial_salience
from dreamcycle.store.outbox import OutboxQueries
from dreamcycle.store.outbox import PreparedSegment as PreparedSegment
from dreamcycle.store.pulses_applied import PulseQueries
from dreamcycle.store.references import hashes_with_prefix as hashes_with_prefix
from dreamcycle.store.salience_rows import DecayCandidate as DecayCandidate
from dreamcycle.store.salience_rows import SalienceQueries
from dreamcycle.store.salience_rows import SalienceRow as SalienceRow
from dreamcycle.store.tombstones import TombstoneQueries

#: How long a writer waits for another process's transaction before failing.
BUSY_TIMEOUT_MS: Final = 10_000

#: How long closing a connection may wait to refresh the planner's statistics: a command
#: ending under another process's lock does not wait out the busy timeout for them.
OPTIMIZE_TIMEOUT_MS: Final = 100


def tier_stamp(change_stamp: str) -> str:
    """The part of a `Database.change_stamp` that moves when a chunk changes tier, is
    tombstoned or a row is deleted (the tombstoned count, the tier epoch, rows deleted).

    What is read per tier (the cold tier's vectors, the tombstoned and cold sets, learned
    keys of chunks not tombstoned) is kept per this part: a save or an admission adds a
    live chunk and moves the whole stamp, and re-reading the cold tier then made the next
    recall read every cold embedding (scripts/bench_recall.py's save-then-recall with
    `--cold-share` measures it).
    """
    return change_stamp.split(":", 2)[-1]


def connection_busy_timeout_first(connection: apsw.Connection) -> None:
    """The full busy timeout, before anything else touches the file: bestpractice's own is
    100 ms, and its set-up of a new connection already waits for locks."""
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)


def library_logging() -> None:
    """SQLite's log on the `dreamcycle.sqlite` logger at bestpractice's levels, but for
    SQLITE_SCHEMA: a statement prepared before the schema changed (the migrations' tables)
    is prepared again by SQLite itself, an expected retry logged at debug level only."""
    levels = {apsw.SQLITE_SCHEMA: logging.DEBUG, apsw.SQLITE_WARNING: logging.WARNING}
    levels[apsw.SQLITE_NOTICE] = logging.WARNING

    def forward(code: int, message: str) -> None:
        name = apsw.ext.result_string(code)
        extra = {"sqlite_code": code, "sqlite_code_name": name, "sqlite_message": message}
        level = levels.get(code & 0xFF, logging.ERROR)
        logging.getLogger("dreamcycle.sqlite").log(
            level, "SQLITE_LOG: %s (%d) %s", message, code, name, extra=extra
        )

    apsw.config(apsw.SQLITE_CONFIG_LOG, forward)


# bestpractice's `PRAGMA optimize` at open needs the write lock whenever statistics are
# stale: under another process's transaction every command failed after 100 ms. It runs
# when a connection closes instead (Database.close), and never waits long there.
# Its switch to WAL writes the file's header at open, before anything could tell another
# application's database from ours: `Database` switches once it has.
apsw.bestpractice.apply(
    (
        connection_busy_timeout_first,
        library_logging,
        *(
            setup
            for setup in apsw.bestpractice.recommended
            if setup
            not in (
                apsw.bestpractice.connection_busy_timeout,
                apsw.bestpractice.connection_optimize,
                apsw.bestpractice.connection_wal,
                apsw.bestpractice.library_logging,
            )
        ),
    )
)

#: Set on an SQLite error raised through `Database.transaction`: the file it concerns, for
#: the one line a command prints about it (`storage_refusal`).
_FILE_ATTRIBUTE: Final = "dreamcycle_database_path"


class DatabaseError(Exception):
    """The database file is unusable; the message names the file and the problem."""


def storage_refusal(exc: BaseException) -> str | None:
    """The one line a command prints when the file system or another process stopped it
    writing the database (locked, read-only, unopenable, full, failing): the file and the
    problem. None for any other failure.

    The daemon waits these faults out (daemon/observe/storage_health.py); a command reports
    them, and nothing it meant to write was committed."""
    if not isinstance(exc, apsw.Error):
        return None
    path = getattr(exc, _FILE_ATTRIBUTE, None)
    return _fault_text(path if isinstance(path, Path) else None, exc)


def _fault_text(path: Path | None, exc: apsw.Error) -> str | None:
    where = str(path) if path is not None else "the database"
    if path is not None and path.is_dir():
        # SQLite says "disk I/O error" or "unable to open database file".
        return f"{where} cannot be opened: it is a directory"
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return (
            f"{where} is locked by another process (held past the "
            f"{BUSY_TIMEOUT_MS / 1000:g} s busy timeout); try again"
        )
    if isinstance(exc, apsw.ReadOnlyError):
        reason = _why_unwritable(path) if path is not None else None
        return f"{where} is read-only: {reason or exc}"
    if isinstance(exc, apsw.CantOpenError | apsw.PermissionsError):
        reason = _why_unopenable(path) if path is not None else None
        return f"{where} cannot be opened: {reason or exc}"
    if isinstance(exc, apsw.FullError):
        return f"{where} cannot grow: the disk is full ({exc})"
    if isinstance(exc, apsw.IOError):
        return f"{where} cannot be read or written: the file system failed ({exc})"
    return None


def _companions(path: Path) -> list[Path]:
    """The files SQLite keeps beside a WAL database, and must read and write."""
    return [path.with_name(path.name + suffix) for suffix in ("-wal", "-shm")]


def _why_unopenable(path: Path) -> str | None:
    for file in (path, *_companions(path)):
        if file.exists() and not os.access(file, os.R_OK | os.W_OK):
            return f"permission denied on {file.name} (it must be readable and writable)"
    if not os.access(path.parent, os.R_OK | os.W_OK | os.X_OK):
        return f"permission denied on its directory {path.parent}"
    return None


def _why_unwritable(path: Path) -> str | None:
    if not os.access(path.parent, os.W_OK):
        return (
            f"its directory {path.parent} cannot be written (permissions or a read-only "
            f"mount), and SQLite keeps {path.name}-wal and -shm there"
        )
    for file in (path, *_companions(path)):
        if file.exists() and not os.access(file, os.W_OK):
            return f"{file.name} cannot be written (permissions)"
    return None


def unusable_database(path: Path, exc: apsw.Error) -> DatabaseError:
    """Why SQLite could not open, read or check the database at `path`, in one line."""
    if isinstance(exc, apsw.NotADBError):
        return DatabaseError(f"{path} is not an SQLite database: {exc}")
    if isinstance(exc, apsw.CorruptError):
        return DatabaseError(f"{path} is corrupt: {exc}")
    fault = _fault_text(path, exc)
    if fault is not None:
        return DatabaseError(fault)
    return DatabaseError(f"{path} cannot be opened: {type(exc).__name__}: {exc}")


#: The largest database whose every page is checked when it is opened (PRAGMA quick_check):
#: the check reads the whole file, so its time grows with the store (most when its pages
#: are not cached), and every command opens the database.
QUICK_CHECK_MAX_BYTES: Final = 512 * 1024 * 1024
#: What a larger database gets instead: the schema is read (a damaged header or a file that
#: is not a database fails here too) and the meta table, which every phase reads, checked.
_LARGE_CHECK: Final = "PRAGMA quick_check(meta)"


class Database(
    ObservationQueries,
    EmbeddingQueries,
    SalienceQueries,
    TombstoneQueries,
    JournalQueries,
    PulseQueries,
    AttributionQueries,
    ImplicitCreditQueries,
    AppliedLogQueries,
    LearnedKeysAwaitingQueries,
    OutboxQueries,
    CycleQueries,
    CountQueries,
    MetaQueries,
):
    """The connection to one database file, and every table's queries through it (each
    table's in its own module of store/)."""

    def __init__(self, path: Path, *, prepare: bool = True, read_only: bool = False) -> None:
        """`prepare=False` opens another connection to a file this process has already
        checked and migrated (a server's per-thread readers): no integrity scan, no
        migrations. `read_only` opens an existing file for diagnosis: nothing is created,
        checked or migrated."""
        self.path = path
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        #: (data_version, total_changes) -> change_stamp: valid until anyone commits.
        self._stamp_memo: tuple[tuple[int, int], str] | None = None
        try:
            if read_only:
                self.conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            else:
                self.conn = apsw.Connection(str(path))
            self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            if not read_only:
                if prepare:
                    refuse_foreign(self.conn)
                self._use_wal()
            self.conn.execute("PRAGMA synchronous = FULL")
            if prepare and not read_only:
                self._check_integrity_quick()
                apply_migrations(self.conn)
        except BaseException as exc:
            if hasattr(self, "conn"):
                self.conn.close()
            if isinstance(exc, apsw.Error):
                # Chained: the daemon's storage_fault still finds the lock, the read-only
                # file or the full disk behind it.
                raise unusable_database(path, exc) from exc
            raise

    def _use_wal(self) -> None:
        """WAL: the daemon and the commands read while one of them writes. A file SQLite
        could only open for reading (its mode) is left in its journal mode, so that the
        commands that only read can still read it."""
        with suppress(apsw.ReadOnlyError):
            if not self.conn.readonly("main"):
                self.conn.execute("PRAGMA journal_mode = WAL")

    def _check_integrity_quick(self) -> None:
        """Every page of a database up to QUICK_CHECK_MAX_BYTES; of a larger one, the
        schema and the small table of cursors and counters (the full check would read
        gigabytes at every start and every command)."""
        try:
            size = os.path.getsize(self.path)
        except OSError:
            size = 0
        check = "PRAGMA quick_check(1)" if size <= QUICK_CHECK_MAX_BYTES else _LARGE_CHECK
        rows = self._all(check)
        if rows and rows[0][0] != "ok":
            raise DatabaseError(f"{self.path} failed its integrity check: {rows[0][0]}")

    def close(self) -> None:
        # Statistics are an optimisation: a lock, a full disk, a read-only file (or a
        # connection closed already) leaves them as they were.
        with suppress(apsw.Error):
            if not self.conn.readonly("main"):
                self.conn.set_busy_timeout(OPTIMIZE_TIMEOUT_MS)
                self.conn.execute("PRAGMA optimize")
        self.conn.close()

    def before_each_statement(self, hook: Callable[[apsw.Cursor, str, Any], bool] | None) -> None:
        """Call `hook` before each statement this connection runs (apsw's exec tracer: a
        false answer refuses the statement); None: no hook."""
        self.conn.exec_trace = hook

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """All-or-nothing: a crash inside leaves the database as before.

        The outermost level begins IMMEDIATE: it takes the write lock up front
        (waiting out the busy timeout). A deferred transaction that read first
        could not upgrade once another process (the daemon, pulse-emit) had
        committed meanwhile; SQLite would answer "database is locked" at once.
        Nested levels are savepoints.
        """
        try:
            if self.conn.in_transaction:
                with self.conn:
                    yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException:
                self.conn.execute("ROLLBACK")
                raise
            self.conn.execute("COMMIT")
        except apsw.Error as exc:
            # The error itself goes on unchanged (the daemon classifies it by its type);
            # a command names the file when it reports it.
            if not hasattr(exc, _FILE_ATTRIBUTE):
                setattr(exc, _FILE_ATTRIBUTE, self.path)
            raise

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state of the database, whatever commits meanwhile."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    def filter_stamp(self) -> str:
        """Changes whenever the chunks a recall filter matches may have: the index's stamp
        (chunks added, tombstoned, moved between tiers) and the metadata epoch."""
        return f"{self.change_stamp()}/{self.get_meta(METADATA_EPOCH_META_KEY) or '0'}"

    def change_stamp(self) -> str:
        """Changes whenever chunks are added, embedded, tombstoned, swept or revived: the
        index's freshness mark.

        Reading it costs a few index pages, and more after a commit elsewhere (SQLite
        then drops this connection's page cache), so the value is kept until a commit by
        another connection (`PRAGMA data_version`) or a change through this one
        (`total_changes`) may have moved it.
        """
        if self.conn.txn_state("main") == apsw.SQLITE_TXN_WRITE:
            # Changes of an open write transaction may yet be rolled back: count them afresh.
            return self._count_stamp()
        version = (int(self._one("PRAGMA data_version")[0]), self.conn.total_changes())
        if self._stamp_memo is not None and self._stamp_memo[0] == version:
            return self._stamp_memo[1]
        stamp = self._count_stamp()
        self._stamp_memo = (version, stamp)
        return stamp

    def _count_stamp(self) -> str:
        # A few index pages only (a commit elsewhere empties this connection's page cache,
        # and counting every row would then read them all again): the largest id
        # (rows added), pending rows (admissions), tombstoned rows, the tier epoch, and
        # rows ever deleted (migration 0012: none are, so the first three see every change).
        row = self._one(
            "SELECT coalesce((SELECT max(id) FROM observations), 0), "
            "(SELECT count(*) FROM observations WHERE admitted_seq IS NULL), "
            "(SELECT count(*) FROM observations WHERE deleted_at IS NOT NULL), "
            "(SELECT coalesce(max(value), '0') FROM meta WHERE key = ?), "
            "(SELECT coalesce(max(value), '0') FROM meta WHERE key = ?)",
            (TIER_EPOCH_META_KEY, ROWS_DELETED_META_KEY),
        )
        # ":" where the stamps before 0012 had "-": an index saved under one of those is
        # rebuilt once rather than matched by accident. The three parts after the first
        # two are what tiers depend on: `tier_stamp` takes them by position.
        return ":".join(str(v) for v in row) if row else "0:0:0:0:0"
