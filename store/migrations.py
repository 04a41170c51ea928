"""Apply migrations/NNNN_name.sql in order, once each, recording what was applied."""

from __future__ import annotations

import re
from typing import Final

import apsw

from dreamcycle import migrations

_NAME: Final = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


class MigrationError(Exception):
    """A migration file is misnamed, or the database knows migrations this version does not."""


def apply_migrations(conn: apsw.Connection) -> list[str]:
    """Apply pending migrations, each in its own transaction. Returns the names applied."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    applied = {int(v) for (v,) in conn.execute("SELECT version FROM schema_migrations")}
    # A migration may copy a table to change a constraint (SQLite's documented way);
    # foreign keys are checked as a whole before each commit instead of row by row.
    enforced = conn.execute("PRAGMA foreign_keys").fetchall() == [(1,)]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        return _apply_pending(conn, applied)
    finally:
        if enforced:
            conn.execute("PRAGMA foreign_keys = ON")


def _apply_pending(conn: apsw.Connection, applied: set[int]) -> list[str]:
    files = migrations.migration_files()
    known: set[int] = set()
    done: list[str] = []
    for file in files:
        match = _NAME.match(file.name)
        if match is None:
            raise MigrationError(f"migration file {file.name!r} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in known:
            raise MigrationError(f"two migration files have version {version:04d}")
        known.add(version)
        if version in applied:
            continue
        with conn:
            conn.execute(file.read_text(encoding="utf-8"))
            broken = conn.execute("PRAGMA foreign_key_check").fetchall()
            if broken:
                raise MigrationError(
                    f"migration {file.name} would break foreign keys: {broken[:5]}"
                )
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) "
                "VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                (version, file.name),
            )
        done.append(file.name)
    newer = sorted(applied - known)
    if newer:
        raise MigrationError(
            f"the database was written by a newer dreamcycle (migrations {newer} are unknown here); "
            "upgrade dreamcycle instead of downgrading the database"
        )
    return done
