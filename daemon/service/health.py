"""Liveness, readiness and progress of a running daemon.

`/healthz` says the process answers; `/readyz` whether it is doing its job: the database
opens and reads, the index is loaded, the zeitgeist backend answered its last call, the
last cycle could write the data directory (not locked, full or read-only), and a cycle
finished recently. Both are served on the metrics listener and on the API.

Progress feeds the systemd watchdog: the service marks every step of a cycle, and the
watchdog is fed only while the step under way is younger than the watchdog's timeout,
so a cycle stuck in one place stops the feeding and systemd restarts the daemon.

One module of a little over 400 lines: the probes and the progress they report share
one lock and one notion of "recent".
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import apsw

from dreamcycle.daemon import defaults
from dreamcycle.daemon.service import metrics
from dreamcycle.daemon.statuses import CycleStatus
from dreamcycle.store.database import Database
from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    BackendError,
    KeyExists,
    LogBackend,
    ObjectTooLarge,
    PreconditionFailed,
    UnreadableObject,
    Versioned,
)
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX

log = logging.getLogger("dreamcycle.health")

HTTP_OK: Final = 200
HTTP_UNAVAILABLE: Final = 503


def outbox_depth(db: Database) -> int:
    """Entries of this peer not yet in the zeitgeist: queued, or in a segment still prepared."""
    row = db.fetch_one(
        "SELECT count(*) FROM outbox AS o LEFT JOIN segments_out AS s ON s.seq = o.segment_seq "
        "WHERE o.segment_seq IS NULL OR s.status = 'prepared'"
    )
    return int(row[0]) if row else 0


@dataclass
class BackendHealth:
    """What the last calls to the zeitgeist backend said (written by one thread at a time)."""

    name: str
    reachable: bool | None = None
    last_error: str | None = None
    last_poll_ms: int | None = None
    last_publish_ms: int | None = None

    def succeeded(self) -> None:
        self.reachable, self.last_error = True, None
        metrics.BACKEND_UP.labels(self.name).set(1)

    def failed(self, error: BackendError) -> None:
        if self.reachable is not False:
            log.warning("zeitgeist backend unreachable", extra={"error": str(error)})
        self.reachable, self.last_error = False, str(error)
        metrics.BACKEND_UP.labels(self.name).set(0)

    def polled(self, now_ms: int) -> None:
        self.last_poll_ms = now_ms
        metrics.LAST_POLL.set(now_ms / 1000)

    def published(self, now_ms: int) -> None:
        self.last_publish_ms = now_ms
        metrics.LAST_PUBLISH.set(now_ms / 1000)


class ObservedBackend:
    """A backend whose every call is recorded in a `BackendHealth`: reachable or not, and
    when segments were last listed (a poll) and written (a publish)."""

    def __init__(self, inner: LogBackend, health: BackendHealth, now_ms: Callable[[], int]):
        self.inner = inner
        self.health = health
        self.name = inner.name
        self._now_ms = now_ms

    def _call(self, operation: Callable[[], Any]) -> Any:
        try:
            result = operation()
        # The store answered: a lost race, an existing key or a refused object is not an
        # outage.
        except (KeyExists, PreconditionFailed, ObjectTooLarge, UnreadableObject):
            self.health.succeeded()
            raise
        except BackendError as exc:
            self.health.failed(exc)
            raise
        self.health.succeeded()
        return result

    def probe(self) -> None:
        self._call(self.inner.probe)

    def create(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.create(key, data))
        if key.startswith(SEGMENT_PREFIX):
            self.health.published(self._now_ms())

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        data: bytes = self._call(lambda: self.inner.read(key, max_bytes=max_bytes))
        return data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        keys: list[str] = self._call(lambda: self.inner.list_after(prefix, start_after))
        if prefix == SEGMENT_PREFIX:
            self.health.polled(self._now_ms())
        return keys

    def delete(self, keys: list[str]) -> None:
        self._call(lambda: self.inner.delete(keys))

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        found: Versioned | None = self._call(
            lambda: self.inner.read_versioned(key, max_bytes=max_bytes)
        )
        return found

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        etag: str = self._call(lambda: self.inner.write_versioned(key, data, expect))
        return etag

    def write_overwrite(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.write_overwrite(key, data))

    def close(self) -> None:
        self.inner.close()


class StorageFault(enum.StrEnum):
    """Why the data directory refused a write; each is waited out, none stops the daemon."""

    #: Another process held the write lock past the busy timeout.
    BUSY = "busy"
    DISK_FULL = "disk_full"
    #: Permissions taken away, or a file system mounted (or remounted) read-only.
    READ_ONLY = "read_only"
    #: The file system failed the write (SQLite's I/O error): often remounted read-only
    #: after an error.
    IO_ERROR = "io_error"


_SQLITE_FAULTS: Final[tuple[tuple[type[apsw.Error], StorageFault], ...]] = (
    (apsw.BusyError, StorageFault.BUSY),
    (apsw.LockedError, StorageFault.BUSY),
    (apsw.FullError, StorageFault.DISK_FULL),
    (apsw.ReadOnlyError, StorageFault.READ_ONLY),
    (apsw.PermissionsError, StorageFault.READ_ONLY),
    # A file SQLite creates next to the database (the WAL, its index) in a directory it
    # may no longer write.
    (apsw.CantOpenError, StorageFault.READ_ONLY),
    (apsw.IOError, StorageFault.IO_ERROR),
)
_OS_FAULTS: Final = {
    errno.ENOSPC: StorageFault.DISK_FULL,
    errno.EDQUOT: StorageFault.DISK_FULL,
    errno.EROFS: StorageFault.READ_ONLY,
    errno.EACCES: StorageFault.READ_ONLY,
    errno.EPERM: StorageFault.READ_ONLY,
}
#: How far down an exception's causes a storage fault is looked for.
_CAUSE_DEPTH: Final = 8


def storage_fault(exc: BaseException) -> StorageFault | None:
    """The storage fault behind `exc` (or one of its causes), None when it is something else."""
    current: BaseException | None = exc
    for _ in range(_CAUSE_DEPTH):
        if current is None:
            return None
        for kind, fault in _SQLITE_FAULTS:
            if isinstance(current, kind):
                return fault
        if isinstance(current, OSError) and current.errno in _OS_FAULTS:
            return _OS_FAULTS[current.errno]
        current = current.__cause__ or current.__context__
    return None


@dataclass
class StorageHealth:
    """Whether the last write of a cycle reached the data directory, and when to try again.

    A fault is logged when it starts, then at most once per `log_interval_s` (with the count
    since), and once more when a cycle writes again. Written by the service's task only.
    """

    log_interval_s: float = defaults.STORAGE_FAULT_LOG_INTERVAL_S
    retry_initial_s: float = defaults.STORAGE_RETRY_INITIAL_S
    retry_max_s: float = defaults.STORAGE_RETRY_MAX_S
    fault: StorageFault | None = None
    last_error: str | None = None
    #: Failed attempts in a row.
    failures: int = 0
    #: monotonic() when the fault began, and when it was last logged.
    _since: float | None = None
    _logged: float | None = None
    _unlogged: int = 0

    def failed(self, fault: StorageFault, exc: BaseException) -> None:
        now = time.monotonic()
        error = f"{type(exc).__name__}: {exc}"
        metrics.STORAGE_FAULTS.labels(fault.value).inc()
        if self.fault is not None and self.fault is not fault:
            metrics.STORAGE_FAULT.labels(self.fault.value).set(0)
        metrics.STORAGE_FAULT.labels(fault.value).set(1)
        changed = fault is not self.fault
        if self.fault is None:
            self._since = now
        self.fault, self.last_error = fault, error
        self.failures += 1
        if changed or self._logged is None or now - self._logged >= self.log_interval_s:
            log.warning(
                "data directory not writable; retrying with backoff, reads still served",
                extra={
                    "fault": fault.value,
                    "error": error,
                    "failures": self.failures,
                    "failures_since_last_log": self._unlogged + 1,
                    "retry_in_s": self.retry_delay_s(),
                },
            )
            self._logged, self._unlogged = now, 0
        else:
            self._unlogged += 1

    def recovered(self) -> None:
        if self.fault is None:
            return
        log.info(
            "data directory writable again",
            extra={
                "fault": self.fault.value,
                "failures": self.failures,
                "seconds": round(time.monotonic() - (self._since or time.monotonic()), 1),
            },
        )
        metrics.STORAGE_FAULT.labels(self.fault.value).set(0)
        self.fault, self.last_error, self.failures = None, None, 0
        self._since = self._logged = None
        self._unlogged = 0

    def retry_delay_s(self) -> float:
        """How long to wait before the next attempt: doubling with each failure in a row."""
        exponent = min(max(self.failures - 1, 0), 32)
        return float(min(self.retry_max_s, self.retry_initial_s * 2.0**exponent))

    def check(self) -> dict[str, Any]:
        """What /readyz says about writing."""
        if self.fault is None:
            return {"ok": True}
        return {
            "ok": False,
            "fault": self.fault.value,
            "error": self.last_error,
            "failures": self.failures,
            "since_s": round(time.monotonic() - (self._since or time.monotonic()), 1),
        }


def unwritable_data_dir(data_dir: Path, database_path: Path) -> str | None:
    """Why nothing can be written to the data directory (None when it can), checked by
    creating a file in it and opening the database for writing. A full disk is not such a
    reason: it passes here, and the daemon waits it out."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / f".write-check-{os.getpid()}"
        descriptor = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        os.close(descriptor)
        probe.unlink()
        if database_path.exists():
            os.close(os.open(database_path, os.O_WRONLY))
    except OSError as exc:
        if storage_fault(exc) is not StorageFault.READ_ONLY:
            return None
        where = exc.filename or data_dir
        return f"the data directory cannot be written: {where}: {exc.strerror}"
    return None


def database_problem(path: Path) -> str | None:
    """Why the database cannot be read now (None when it can), without writing to it."""
    if not path.exists():
        return f"{path} does not exist"
    try:
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        try:
            conn.set_busy_timeout(defaults.HEALTH_DATABASE_TIMEOUT_MS)
            conn.execute("SELECT count(*) FROM meta").fetchone()
        finally:
            conn.close()
    except apsw.Error as exc:
        return f"{path}: {type(exc).__name__}: {exc}"
    return None


@dataclass
class Health:
    """One daemon's state as the probes and the watchdog see it."""

    database_path: Path
    #: Seconds between cycle starts: how old the last good cycle may be follows from it.
    cycle_interval_s: float
    now_ms: Callable[[], int]
    started_ms: int = 0
    index_loaded: bool = False
    backend: BackendHealth | None = None
    storage: StorageHealth = field(default_factory=StorageHealth)
    last_cycle_ms: int | None = None
    last_cycle_status: str | None = None
    #: monotonic() when the step under way began; None between cycles.
    _step_started: float | None = None
    _step: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.started_ms = self.now_ms()

    # ---- progress (the watchdog) -------------------------------------------------------

    def step(self, name: str) -> None:
        """A cycle moved on to `name` (a phase, or recording the cycle)."""
        with self._lock:
            self._step, self._step_started = name, time.monotonic()

    def idle(self) -> None:
        """Between cycles: waiting is not being stuck."""
        with self._lock:
            self._step, self._step_started = None, None

    def stalled(self) -> tuple[str, float] | None:
        """The step under way and for how many seconds (None when idle)."""
        with self._lock:
            if self._step is None or self._step_started is None:
                return None
            return self._step, time.monotonic() - self._step_started

    def cycle_finished(self, status: str) -> None:
        self.last_cycle_status = status
        if status == CycleStatus.DONE:
            self.last_cycle_ms = self.now_ms()

    # ---- probes --------------------------------------------------------------------------

    def max_cycle_age_s(self) -> float:
        return max(
            defaults.HEALTH_CYCLE_AGE_INTERVALS * self.cycle_interval_s,
            defaults.HEALTH_MIN_CYCLE_AGE_S,
        )

    def liveness(self) -> tuple[int, dict[str, Any]]:
        return HTTP_OK, {"status": "alive"}

    def readiness(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, document): 200 when every check passes, 503 naming those that fail."""
        now_ms = self.now_ms()
        checks: dict[str, dict[str, Any]] = {}
        problem = database_problem(self.database_path)
        checks["database"] = {"ok": problem is None, **({"error": problem} if problem else {})}
        checks["index"] = (
            {"ok": True} if self.index_loaded else {"ok": False, "error": "loading the index"}
        )
        backend = self.backend
        if backend is None:
            checks["backend"] = {"ok": False, "error": "not opened yet"}
        else:
            checks["backend"] = {
                "ok": backend.reachable is not False,
                "name": backend.name,
                "last_poll_age_s": _age_s(now_ms, backend.last_poll_ms),
                "last_publish_age_s": _age_s(now_ms, backend.last_publish_ms),
                **({"error": backend.last_error} if backend.last_error else {}),
            }
        checks["storage"] = self.storage.check()
        since = self.last_cycle_ms if self.last_cycle_ms is not None else self.started_ms
        age_s = (now_ms - since) / 1000
        limit_s = self.max_cycle_age_s()
        checks["cycle"] = {
            "ok": age_s <= limit_s,
            "last_done_age_s": _age_s(now_ms, self.last_cycle_ms),
            "last_status": self.last_cycle_status,
            "max_age_s": limit_s,
        }
        stalled = self.stalled()
        if stalled is not None:
            checks["cycle"]["step"] = stalled[0]
            checks["cycle"]["step_s"] = round(stalled[1], 1)
        if age_s > limit_s:
            checks["cycle"]["error"] = f"no cycle finished in {age_s:.0f} s"
        ready = all(check["ok"] for check in checks.values())
        metrics.READY.set(int(ready))
        document = {"status": "ready" if ready else "not ready", "checks": checks}
        return (HTTP_OK if ready else HTTP_UNAVAILABLE), document


def _age_s(now_ms: int, then_ms: int | None) -> float | None:
    return None if then_ms is None else round((now_ms - then_ms) / 1000, 3)
