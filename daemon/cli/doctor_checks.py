"""The checks `dreamcycle doctor` makes of what this host holds: the data directory, the
database, the index, the embedding model and the key files; and `Check`, what each check
finds and how to fix it.

Read-only: they create no data directory and write nothing to the database or the index.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config

OK: Final = "ok"
WARN: Final = "warn"
FAIL: Final = "fail"
SKIP: Final = "skip"
#: The owner of the data directory must be able to list, write and enter it.
OWNER_RWX: Final = stat.S_IRWXU


@dataclass
class Check:
    """What one check found (a status above), and for a failure or a warning, the fix."""

    name: str
    status: str
    detail: str
    fix: str = ""


def check_data_dir(config: Config) -> Check:
    path = config.data_dir
    fix_missing = (
        "check peer.data_dir / --data-dir (a typo?); the daemon creates it at its first start"
    )
    if not path.exists():
        return Check("data_dir", FAIL, f"{path} does not exist", fix_missing)
    if not path.is_dir():
        return Check("data_dir", FAIL, f"{path} is not a directory", fix_missing)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & OWNER_RWX != OWNER_RWX or not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        return Check(
            "data_dir",
            FAIL,
            f"{path} has mode {mode:03o}: its owner cannot list, write and enter it",
            f"chmod 700 {path} (and chown it to the user the daemon runs as)",
        )
    if mode & (stat.S_IWGRP | stat.S_IWOTH):
        return Check(
            "data_dir",
            WARN,
            f"{path} has mode {mode:03o}: other users may write to it",
            f"chmod go-w {path}",
        )
    return Check("data_dir", OK, f"{path} mode {mode:03o}")


def check_database(config: Config) -> Check:
    import apsw

    from dreamcycle.store.database import BUSY_TIMEOUT_MS, unusable_database
    from dreamcycle.store.migrations import (
        MigrationError,
        NotDreamcycleDatabase,
        applied_versions,
        known_migrations,
        refuse_foreign,
        unknown_versions,
    )

    path = config.database_path
    if not path.exists():
        return Check(
            "database",
            FAIL,
            f"{path} does not exist",
            "start the daemon once (it creates the database), or restore a backup",
        )
    wal = path.with_name(f"{path.name}-wal")
    if path.is_file() and path.stat().st_size == 0 and not (wal.exists() and wal.stat().st_size):
        return Check(
            "database",
            FAIL,
            f"{path} is empty (0 bytes): it holds no memory",
            "check peer.data_dir / --data-dir; in the right directory, restore a backup, or "
            "start the daemon (it creates the database in the empty file)",
        )
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            rows = [str(r[0]) for r in conn.execute("PRAGMA quick_check")]
            foreign = ""
            try:
                refuse_foreign(conn)
            except NotDreamcycleDatabase as exc:
                foreign = str(exc)
            applied = applied_versions(conn)
        finally:
            conn.close()
    except apsw.Error as exc:
        return Check(
            "database",
            FAIL,
            f"{unusable_database(path, exc)} ({type(exc).__name__})",
            _database_fix(config, exc),
        )
    if rows != ["ok"]:
        return Check("database", FAIL, f"{path} quick_check: {'; '.join(rows[:3])}", _CORRUPT_FIX)
    if foreign:
        return Check(
            "database",
            FAIL,
            foreign,
            "check peer.data_dir / --data-dir; this file is another application's: move it "
            "out of the data directory rather than deleting it",
        )
    try:
        newer = unknown_versions(applied)
        known = len(known_migrations())
    except MigrationError as exc:
        return Check("database", FAIL, str(exc), "reinstall dreamcycle")
    if newer:
        return Check(
            "database",
            FAIL,
            f"{path} was written by a newer dreamcycle: migrations {newer} are unknown to "
            "this version",
            "upgrade dreamcycle to the version that wrote it (every other command refuses "
            "the database until then); do not restore an older backup over it",
        )
    pending = known - len(applied)
    detail = f"{path}: quick_check ok, {len(applied)} migrations applied"
    if pending:
        detail += f" ({pending} more are applied at the daemon's next start)"
    return Check("database", OK, detail)


#: Only damage to the file itself calls for a backup: moving a sound file aside would lose
#: what it holds.
_CORRUPT_FIX: Final = (
    "stop the daemon and restore the last backup (docs/operations.md); only without one, "
    "move the file (and its -wal and -shm) aside, keeping it, and let the daemon start with "
    "an empty database"
)


def _database_fix(config: Config, exc: Exception) -> str:
    """What to do about an SQLite error opening the database: by its cause, since most of
    them leave every stored memory intact."""
    import apsw

    path = config.database_path
    keep = "the database itself is intact: do not move it aside or restore a backup"
    if isinstance(exc, apsw.NotADBError | apsw.CorruptError):
        return _CORRUPT_FIX
    if isinstance(exc, apsw.BusyError | apsw.LockedError):
        return (
            f"another process holds the database's lock: find it (fuser {path}), let it "
            f"finish or stop it, and try again; {keep}"
        )
    if path.is_dir():
        return (
            f"{path} is a directory: move it out of {config.data_dir} (is peer.data_dir "
            "right?); the daemon then starts with a new database"
        )
    if isinstance(exc, apsw.IOError):
        return (
            "the file system failed a read: check the disk (dmesg) and the mount; restore a "
            "backup only if the disk lost data"
        )
    return (
        f"give the user the daemon runs as read and write access to {config.data_dir} and "
        f"to {path.name} and its -wal and -shm files (chown, chmod), and check the mount is "
        f"not read-only; {keep}"
    )


def check_index(config: Config) -> Check:
    import apsw

    from dreamcycle.store.database import DatabaseError

    try:
        return _index_against_database(config)
    except (apsw.Error, DatabaseError) as exc:
        # The database passed its own check, yet lacks what it records of the index.
        return Check(
            "index",
            FAIL,
            f"the database's record of its index cannot be read: {type(exc).__name__}: {exc}",
            "start the daemon once (it applies pending migrations); if this persists, restore "
            "the last backup (docs/operations.md)",
        )


def _index_against_database(config: Config) -> Check:
    from dreamcycle.daemon.runtime import INDEX_IDENTITY_META_KEY
    from dreamcycle.store.database import Database
    from dreamcycle.store.embedder import Embedder
    from dreamcycle.store.index import HnswIndex, IndexUnusable, Unusable
    from dreamcycle.store.index_file import meta_path

    path = config.index_path
    if not path.exists() and not meta_path(path).exists():
        return Check("index", WARN, f"{path} does not exist", "the daemon builds it at its start")
    version = Embedder(config.embedding.model).index_version
    db = Database(config.database_path, read_only=True)
    try:
        try:
            # The seal (size, checksum, identity) first; freshness after, so damage is
            # found even in a file the database has moved past.
            index = HnswIndex.load(
                path,
                Embedder(config.embedding.model).dim,
                version,
                expected_identity=db.get_meta(INDEX_IDENTITY_META_KEY) or "",
            )
        except IndexUnusable as unusable:
            damaged = unusable.kind in (Unusable.CORRUPT, Unusable.SIZE, Unusable.CHECKSUM)
            return Check(
                "index",
                FAIL if damaged else WARN,
                f"{unusable.kind.value}: {unusable}",
                "stop the daemon and delete the index file and its .meta.json: the next start "
                "rebuilds it from the database"
                if damaged
                else "none needed: the daemon rebuilds it at its next start",
            )
        if index.stamp != db.change_stamp():
            return Check(
                "index",
                OK,
                f"{path}: sealed and sound, {index.live_count} live; the database changed "
                "since its last save (saved again at the end of each cycle)",
            )
        expected = {int(label) for label in db.indexed_labels(version)}
        live = index.labels() - index.deleted_labels()
        if live != expected:
            return Check(
                "index",
                WARN,
                f"{path}: {len(live ^ expected)} live labels differ from the database's",
                "none needed: the daemon rebuilds it at its next start",
            )
        return Check("index", OK, f"{path}: sealed, sound and current, {index.live_count} live")
    finally:
        db.close()


def check_model(config: Config) -> Check:
    from dreamcycle.store.embedder import Embedder, EmbedderError

    name = config.embedding.model
    try:
        Embedder(name, batch_size=1).embed_one("doctor")
    except EmbedderError as exc:
        return Check(
            "model",
            FAIL,
            str(exc),
            "put the model in the fastembed cache (FASTEMBED_CACHE_PATH) on a host with "
            "network, or set embedding.model back to the bundled default",
        )
    return Check("model", OK, f"{name} loads offline")


def check_keys(config: Config) -> Check:
    """This peer's private key (present, 0600) and a keyring the daemon can read."""
    from dreamcycle.daemon.signing_keys import KeyUnavailable, read_keyring, read_signer
    from dreamcycle.zeitgeist.signing import InvalidKeyring

    try:
        signer = read_signer(config)
        keyring = read_keyring(config.keyring_path)
    except KeyUnavailable as exc:
        return Check("keys", FAIL, str(exc), f"chmod 600 {config.key_path}")
    except InvalidKeyring as exc:
        return Check("keys", FAIL, str(exc), f"repair or replace {config.keyring_path}")
    except OSError as exc:
        return Check("keys", FAIL, f"key files unreadable: {exc}", "check the data directory")
    if signer is None:
        # Without a key, strict mode does not start; permissive mode publishes unsigned.
        status = FAIL if config.signing.strict else WARN
        return Check("keys", status, f"no private key at {config.key_path}", "dreamcycle keys init")
    trusted = sum(1 for key in keyring.keys.values() if not key.revoked)
    return Check(
        "keys",
        OK,
        f"key {signer.key_id}, {trusted} trusted key(s), mode {config.signing.mode}",
    )
