"""Apply migrations/NNNN_name.sql in order, once each, recording what was applied."""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib.abc import Traversable
from typing import Final

import apsw

from dreamcycle import migrations

_NAME: Final = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
#: Where the versions applied are recorded: a file without it was never a dreamcycle database.
MIGRATIONS_TABLE: Final = "schema_migrations"
#: Tables named so are SQLite's own (sqlite_sequence, sqlite_stat1): any database may have them.
_SQLITE_INTERNAL_PREFIX: Final = "sqlite_"
#: How many of a foreign database's tables its refusal names.
_TABLES_NAMED: Final = 5


class MigrationError(Exception):
    """A migration file is misnamed, or the database knows migrations this version does not."""


class NotDreamcycleDatabase(MigrationError):
    """The file is some other application's SQLite database."""


def known_migrations() -> list[tuple[int, Traversable]]:
    """(version, file) of every migration this version knows, in the order they apply."""
    known: list[tuple[int, Traversable]] = []
    seen: set[int] = set()
    for file in migrations.migration_files():
        match = _NAME.match(file.name)
        if match is None:
            raise MigrationError(f"migration file {file.name!r} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in seen:
            raise MigrationError(f"two migration files have version {version:04d}")
        seen.add(version)
        known.append((version, file))
    return known


def unknown_versions(applied: Iterable[int]) -> list[int]:
    """The versions in `applied` that this dreamcycle has no migration for (a newer one wrote
    them), ascending."""
    known = {version for version, _ in known_migrations()}
    return sorted(set(applied) - known)


def foreign_tables(conn: apsw.Connection) -> list[str]:
    """The tables and views of a database that has them but no record of dreamcycle's
    migrations: another application's, which nothing here may write to. Empty for a
    dreamcycle database and for one holding nothing yet (a new file)."""
    names = [
        str(name)
        for (name,) in conn.execute(
            "SELECT name FROM sqlite_schema WHERE type IN ('table', 'view') ORDER BY name"
        )
    ]
    if MIGRATIONS_TABLE in names:
        return []
    return [name for name in names if not name.startswith(_SQLITE_INTERNAL_PREFIX)]


def refuse_foreign(conn: apsw.Connection) -> None:
    """Raise NotDreamcycleDatabase for another application's database, before anything
    writes to it (a migration, or even switching it to WAL)."""
    tables = foreign_tables(conn)
    if tables:
        shown = ", ".join(tables[:_TABLES_NAMED]) + (", ..." if len(tables) > _TABLES_NAMED else "")
        raise NotDreamcycleDatabase(
            f"{_filename(conn)} is not a dreamcycle database: it holds tables ({shown}) but no "
            f"{MIGRATIONS_TABLE}; check --data-dir / peer.data_dir (nothing was written to it)"
        )


def apply_migrations(conn: apsw.Connection) -> list[str]:
    """Apply pending migrations, each in its own transaction. Returns the names applied.

    Refused before anything is written: another application's database, and one a newer
    dreamcycle migrated (its tables may no longer be what this version's code expects).
    """
    refuse_foreign(conn)
    known = known_migrations()
    applied = applied_versions(conn)
    newer = sorted(applied - {version for version, _ in known})
    if newer:
        raise MigrationError(
            f"{_filename(conn)} was written by a newer dreamcycle (migrations {newer} are "
            "unknown here); upgrade dreamcycle instead of downgrading the database"
        )
    conn.execute(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
        "(version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
    )
    # A migration may copy a table to change a constraint (SQLite's documented way);
    # foreign keys are checked as a whole before each commit instead of row by row.
    enforced = conn.execute("PRAGMA foreign_keys").fetchall() == [(1,)]
    conn.execute("PRAGMA foreign_keys = OFF")
    try:
        return _apply_pending(conn, known, applied)
    finally:
        if enforced:
            conn.execute("PRAGMA foreign_keys = ON")


def applied_versions(conn: apsw.Connection) -> set[int]:
    """The versions the database records as applied (none in a new file); reads only."""
    row = conn.execute(
        "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?", (MIGRATIONS_TABLE,)
    ).fetchone()
    if not (row and row[0]):
        return set()
    return {int(v) for (v,) in conn.execute(f"SELECT version FROM {MIGRATIONS_TABLE}")}


def _filename(conn: apsw.Connection) -> str:
    # SQLite names no file for an in-memory or temporary database.
    return str(conn.db_filename("main")) or "the database"


def _apply_pending(
    conn: apsw.Connection, known: list[tuple[int, Traversable]], applied: set[int]
) -> list[str]:
    done: list[str] = []
    for version, file in known:
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
                f"INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at) "
                "VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                (version, file.name),
            )
        done.append(file.name)
    return done
