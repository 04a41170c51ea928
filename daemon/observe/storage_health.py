"""The data directory's health: the storage faults a cycle's writes meet (a lock held too
long, a full disk, a read-only file system, a failing disk), waited out with backoff while
reads are served, and the check at start that the directory can be written at all.
/readyz reads it (health.py).
"""

from __future__ import annotations

import enum
import errno
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw

from dreamcycle.daemon import defaults
from dreamcycle.daemon.observe import metrics

#: The logger of the daemon's health, whichever part of it speaks.
log = logging.getLogger("dreamcycle.health")


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
