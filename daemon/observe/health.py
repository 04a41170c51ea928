"""Liveness, readiness and progress of a running daemon.

`/healthz` says the process answers; `/readyz` whether it is doing its job: the database
opens and reads, the index is loaded, the zeitgeist backend answered its last call
(backend_health.py), the last cycle could write the data directory (not locked, full or
read-only: storage_health.py), and a cycle finished recently. Both are served on the
metrics listener and on the API.

Progress feeds the systemd watchdog: the service marks every step of a cycle, and the
watchdog is fed only while the step under way is younger than the watchdog's timeout,
so a cycle stuck in one place stops the feeding and systemd restarts the daemon.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import apsw

from dreamcycle.daemon import defaults
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.observe.backend_health import BackendHealth
from dreamcycle.daemon.observe.storage_health import StorageHealth
from dreamcycle.daemon.statuses import CycleStatus
from dreamcycle.store.database import Database

HTTP_OK: Final = 200
HTTP_UNAVAILABLE: Final = 503


def outbox_depth(db: Database) -> int:
    """Entries of this peer not yet in the zeitgeist: queued, or in a segment still prepared."""
    row = db.fetch_one(
        "SELECT count(*) FROM outbox AS o LEFT JOIN segments_out AS s ON s.seq = o.segment_seq "
        "WHERE o.segment_seq IS NULL OR s.status = 'prepared'"
    )
    return int(row[0]) if row else 0


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
