"""`dreamcycle doctor`: check that this host can run the daemon, and say how to fix what fails.

Read-only: it creates no data directory and writes nothing to the database or the index.
The backend check is the daemon's own start-up probe (one object written and deleted).

One module of a little under 500 lines: the checks run in order, a failed one skips those
that depend on it, and each says how to fix what it found, in the words of the others.
"""

from __future__ import annotations

import argparse
import email.utils
import json
import os
import stat
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Final

from dreamcycle.daemon.cli.common import EXIT_FAILURE, EXIT_OK, config_options, run_guarded

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config
    from dreamcycle.zeitgeist.backend import LogBackend

OK: Final = "ok"
WARN: Final = "warn"
FAIL: Final = "fail"
SKIP: Final = "skip"
#: The owner of the data directory must be able to list, write and enter it.
OWNER_RWX: Final = stat.S_IRWXU


@dataclass
class Check:
    name: str
    status: str
    detail: str
    fix: str = ""


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "doctor",
        parents=[config_options()],
        help="check config, data directory, database, index, model, backend and clock",
        description="Check what the daemon needs on this host: the configuration, the data "
        "directory's permissions, the database's integrity (PRAGMA quick_check), the index "
        "against its seal and the database, the embedding model offline, the zeitgeist "
        "backend (reachable, honours conditional writes), this clock against the backend's, "
        "and key files when configured. Prints what to do about each failure. Read-only; "
        "safe while the daemon runs.",
        epilog="Exit codes: 0 every check passed (warnings allowed), 1 a check failed.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _doctor(args)))


def _doctor(args: argparse.Namespace) -> int:
    checks = diagnose(args)
    failed = any(check.status == FAIL for check in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for check in checks:
            print(f"{check.status.upper():4} {check.name:9} {check.detail}")
            if check.fix and check.status in (FAIL, WARN):
                print(f"{'':14} fix: {check.fix}")
    return EXIT_FAILURE if failed else EXIT_OK


def diagnose(args: argparse.Namespace) -> list[Check]:
    from dreamcycle.daemon.config import ConfigError, load_config

    try:
        config = load_config(
            args.config,
            overrides={
                "peer.data_dir": args.data_dir,
                "peer.id": args.peer_id,
                "zeitgeist.dir": args.zeitgeist_dir,
                "log.level": args.log_level,
                "log.format": args.log_format,
            },
        )
    except ConfigError as exc:
        return [
            Check(
                "config",
                FAIL,
                str(exc),
                "correct the key named above in the config file or the DREAMCYCLE_* variable",
            )
        ]
    checks = [Check("config", OK, f"loaded ({_config_source(args)})")]
    checks.append(_data_dir(config))
    database = _database(config)
    checks.append(database)
    checks.append(_index(config) if database.status == OK else _skipped("index", "database"))
    checks.append(_model(config))
    backend, backend_check = _backend(config)
    checks.append(backend_check)
    checks.append(_clock(config, backend) if backend else _skipped("clock", "backend"))
    checks.append(_keys(config))
    if backend is not None:
        backend.close()
    return checks


def _config_source(args: argparse.Namespace) -> str:
    from dreamcycle.daemon import defaults

    if args.config is not None:
        return str(args.config)
    return os.environ.get(defaults.CONFIG_ENV) or "built-in defaults"


def _skipped(name: str, because: str) -> Check:
    return Check(name, SKIP, f"not checked: the {because} check failed")


def _data_dir(config: Config) -> Check:
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


def _database(config: Config) -> Check:
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


def _index(config: Config) -> Check:
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
    from dreamcycle.store.index import HnswIndex, IndexUnusable, Unusable, meta_path

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


def _model(config: Config) -> Check:
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


def _backend(config: Config) -> tuple[LogBackend | None, Check]:
    from dreamcycle.daemon import defaults
    from dreamcycle.daemon.runtime import open_backend
    from dreamcycle.zeitgeist.backend import BackendError, UnsupportedStore
    from dreamcycle.zeitgeist.retry import RetryPolicy

    name = config.zeitgeist.backend
    if name == "dir" and not config.zeitgeist_dir.is_dir():
        # Probing would create it: a diagnosis writes nowhere new.
        return None, Check(
            "backend",
            FAIL,
            f"dir: {config.zeitgeist_dir} does not exist",
            "check zeitgeist.dir / --zeitgeist-dir; the daemon creates it at its first start",
        )
    try:
        backend = open_backend(config, RetryPolicy(deadline_s=defaults.DOCTOR_BACKEND_DEADLINE_S))
        backend.probe()
    except UnsupportedStore as exc:
        return None, Check(
            "backend",
            FAIL,
            str(exc),
            "use a store that honours If-None-Match (AWS S3, MinIO since 2024, SeaweedFS) "
            "or Redis >= 7 (docs/s3.md)",
        )
    except (BackendError, ValueError) as exc:
        return None, Check(
            "backend",
            FAIL,
            str(exc),
            "check zeitgeist.* in the config, the network path to the store and its "
            "credentials; the daemon waits out an outage by itself",
        )
    return backend, Check("backend", OK, f"{name}: reachable, conditional writes honoured")


def _clock(config: Config, backend: LogBackend) -> Check:
    from dreamcycle.daemon import defaults
    from dreamcycle.daemon.clock import clock_from_config

    server_ms = _server_time_ms(backend)
    if server_ms is None:
        return Check("clock", SKIP, f"the {backend.name} backend gives no server time")
    skew_s = (clock_from_config(config).now_ms() - server_ms) / 1000
    limit_s = config.zeitgeist.window_s / 2
    detail = f"{skew_s:+.1f} s against the {backend.name} server"
    fix = "run a time service (chrony, systemd-timesyncd) on this host"
    if abs(skew_s) > limit_s:
        return Check("clock", FAIL, f"{detail}: more than half of zeitgeist.window_s", fix)
    if abs(skew_s) > defaults.DOCTOR_MAX_CLOCK_SKEW_S:
        return Check("clock", WARN, detail, fix)
    return Check("clock", OK, detail)


def _server_time_ms(backend: LogBackend) -> int | None:
    """The store's own clock: S3's Date header (1 s resolution), Redis' TIME."""
    reader: Callable[[], int] | None = None
    if backend.name == "s3":
        from dreamcycle.zeitgeist.s3 import S3Backend

        assert isinstance(backend, S3Backend)
        s3 = backend

        def reader() -> int:
            reply = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=s3.prefix, MaxKeys=1)
            date = reply["ResponseMetadata"]["HTTPHeaders"]["date"]
            return int(email.utils.parsedate_to_datetime(date).timestamp() * 1000)

    elif backend.name == "redis":
        from dreamcycle.zeitgeist.redis_streams import RedisStreamsBackend

        assert isinstance(backend, RedisStreamsBackend)
        redis_backend = backend

        def reader() -> int:
            seconds, micros = redis_backend.client.time()
            return int(seconds) * 1000 + int(micros) // 1000

    if reader is None:
        return None
    try:
        return reader()
    except Exception:
        return None


def _keys(config: Config) -> Check:
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
        status = FAIL if config.keys.strict else WARN
        return Check("keys", status, f"no private key at {config.key_path}", "dreamcycle keys init")
    trusted = sum(1 for key in keyring.keys.values() if not key.revoked)
    return Check(
        "keys",
        OK,
        f"key {signer.key_id}, {trusted} trusted key(s), mode {config.keys.mode}",
    )
