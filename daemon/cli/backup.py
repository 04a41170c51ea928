"""`dreamcycle backup PATH`: a consistent copy of the database, safe while the daemon runs."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from dreamcycle.daemon.cli.common import (
    config_options,
    existing_data_epilog,
    load_existing,
    run_guarded,
)


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
    import apsw

    from dreamcycle.store.database import BUSY_TIMEOUT_MS, DatabaseError

    config = load_existing(args)
    source_path = config.database_path
    target: Path = args.path
    if target.exists():
        raise ValueError(f"{target} exists; choose a new file name")
    if not target.parent.is_dir():
        raise ValueError(f"{target.parent} is not a directory")
    partial = target.with_name(f".{target.name}.partial")
    started = time.monotonic()
    source = apsw.Connection(str(source_path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        source.set_busy_timeout(BUSY_TIMEOUT_MS)
        copy = apsw.Connection(str(partial))
        try:
            # All pages in one step: one read transaction, hence one committed state (WAL
            # lets writers go on meanwhile; a step at a time would restart after each write).
            with copy.backup("main", source, "main") as backup:
                backup.step(-1)
                pages = backup.page_count
            # One self-contained file, without a -wal beside it.
            copy.execute("PRAGMA journal_mode = DELETE")
            problems = [str(row[0]) for row in copy.execute("PRAGMA integrity_check")]
        finally:
            copy.close()
        if problems != ["ok"]:
            raise DatabaseError(f"the copy failed its integrity check: {'; '.join(problems[:3])}")
        with open(partial, "rb") as handle:
            os.fsync(handle.fileno())
        os.rename(partial, target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    finally:
        source.close()
    size_mb = target.stat().st_size / 1e6
    print(
        f"backed up {source_path} to {target}: {pages} pages, {size_mb:.1f} MB, "
        f"integrity ok, {time.monotonic() - started:.1f} s"
    )
    return 0
