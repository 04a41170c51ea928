"""`dreamcycle backup PATH`: a consistent copy of the database, safe while the daemon runs."""

from __future__ import annotations

import argparse
import os
import time
from contextlib import closing, suppress
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.cli.common import (
    config_options,
    existing_data_epilog,
    load_existing,
    run_guarded,
)

#: How many of the problems an integrity check finds are named.
PROBLEMS_SHOWN: Final = 3


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "backup",
        parents=[config_options()],
        help="copy the database to PATH, consistent even while the daemon runs",
        description="Copy the database with SQLite's online backup API: one read transaction "
        "sees a single committed state, so the copy is consistent while the daemon and the "
        "commands keep writing. The copy is checked (PRAGMA integrity_check) before it is "
        "moved into place. The index is not copied: it is rebuilt from the database. "
        "docs/operations.md says how to restore.",
        epilog=existing_data_epilog(),
    )
    parser.add_argument(
        "path", type=Path, metavar="PATH", help="the file to write (must not exist)"
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _backup(args)))


def _backup(args: argparse.Namespace) -> int:
    config = load_existing(args)
    source_path = config.database_path
    target: Path = args.path
    if target.exists():
        raise ValueError(f"{target} exists; choose a new file name")
    if not target.parent.is_dir():
        raise ValueError(f"{target.parent} is not a directory")
    partial = target.with_name(f".{target.name}.partial")
    started = time.monotonic()
    try:
        pages = _copy(source_path, partial)
        _durably_rename(partial, target)
    except BaseException:
        with suppress(OSError):
            partial.unlink(missing_ok=True)
        raise
    size_mb = target.stat().st_size / 1e6
    print(
        f"backed up {source_path} to {target}: {pages} pages, {size_mb:.1f} MB, "
        f"integrity ok, {time.monotonic() - started:.1f} s"
    )
    return 0


def _copy(source_path: Path, partial: Path) -> int:
    """Copy the database at `source_path` into the new file `partial` and check the copy;
    the pages copied. What is wrong with the source is an unusable database (exit 3), what
    stops the copy being written a bad PATH (exit 2)."""
    import apsw

    from dreamcycle.store.database import BUSY_TIMEOUT_MS, DatabaseError, unusable_database
    from dreamcycle.store.migrations import refuse_foreign

    try:
        source = apsw.Connection(str(source_path), flags=apsw.SQLITE_OPEN_READONLY)
    except apsw.Error as exc:
        raise unusable_database(source_path, exc) from exc
    with closing(source):
        try:
            source.set_busy_timeout(BUSY_TIMEOUT_MS)
            refuse_foreign(source)
        except apsw.Error as exc:
            raise unusable_database(source_path, exc) from exc
        try:
            copy = apsw.Connection(str(partial))
        except apsw.Error as exc:
            raise _unwritable(partial, exc) from exc
        with closing(copy):
            try:
                # All pages in one step: one read transaction, hence one committed state
                # (WAL lets writers go on meanwhile; a step at a time would restart after
                # each write).
                with copy.backup("main", source, "main") as backup:
                    backup.step(-1)
                    pages = int(backup.page_count)
                # One self-contained file, without a -wal beside it.
                copy.execute("PRAGMA journal_mode = DELETE")
                problems = [str(row[0]) for row in copy.execute("PRAGMA integrity_check")]
            except (apsw.NotADBError, apsw.CorruptError, apsw.BusyError) as exc:
                # Reading the source failed, or the copy holds the source's pages as they
                # were and the damage found in it is the source's.
                raise unusable_database(source_path, exc) from exc
            except apsw.Error as exc:
                raise _unwritable(partial, exc) from exc
    if problems != ["ok"]:
        raise DatabaseError(
            f"{source_path} is corrupt: its copy failed the integrity check: "
            f"{'; '.join(problems[:PROBLEMS_SHOWN])}"
        )
    return pages


def _durably_rename(partial: Path, target: Path) -> None:
    try:
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        os.rename(partial, target)
    except OSError as exc:
        raise _unwritable(target, exc) from exc


def _unwritable(path: Path, exc: Exception) -> ValueError:
    """The backup's file cannot be written where PATH asked: a bad argument."""
    if not os.access(path.parent, os.W_OK | os.X_OK):
        return ValueError(f"cannot write the backup in {path.parent}: permission denied")
    return ValueError(f"cannot write the backup to {path}: {type(exc).__name__}: {exc}")
