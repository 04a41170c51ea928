"""The one source of wall time, so the daemon can run on simulated time.

Everything in daemon/, zeitgeist/, store/ and pulses/ that needs "now" asks the
`Clock` its `Runtime` was opened with; `SystemClock` is the only reader of the
system time. Tests drive a `ManualClock` in-process; a `FileClock` lets several
processes (a daemon and the CLIs run against it) share one simulated time that a
test or benchmark moves by rewriting a file.

Durations and the pause between cycles keep `time.monotonic()`: they measure
real elapsed time, not the time the memory lives in.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Protocol

from dreamcycle.daemon.config import Config


class ClockFileError(ValueError):
    """A clock file that is missing or does not hold a time; the message names the file.

    A ValueError, so the CLIs report it as a setup mistake (exit 2), like bad config.
    """


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class SystemClock:
    """Real time: what a daemon in production runs on."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


def _checked_ms(ms: int, what: str) -> int:
    """HLCs cannot hold a time before the epoch: refuse it here, where the mistake is made."""
    if isinstance(ms, bool) or not isinstance(ms, int):
        raise ValueError(f"{what} must be an integer number of milliseconds, got {ms!r}")
    if ms < 0:
        raise ValueError(f"{what} must be >= 0 (milliseconds since the Unix epoch), got {ms}")
    return ms


class ManualClock:
    """Time that moves only when a test says so.

    Thread-safe: the daemon reads it from worker threads while a test moves it.
    """

    def __init__(self, start_ms: int) -> None:
        self._ms = _checked_ms(start_ms, "start_ms")
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._ms

    def advance(self, ms: int) -> None:
        """Move forward; a negative step is refused because it is almost always a sign slip
        (jump back on purpose with set())."""
        _checked_ms(ms, "advance step")
        with self._lock:
            self._ms += ms

    def set(self, ms: int) -> None:
        """Jump to `ms`, backwards included: a stepped system clock is something tests need."""
        _checked_ms(ms, "clock time")
        with self._lock:
            self._ms = ms


class FileClock:
    """Time read from a text file holding integer milliseconds since the epoch.

    Read on every call, so a process sees the time another process wrote; set()
    replaces the file atomically, so a reader never sees half a number.
    """

    def __init__(self, path: Path) -> None:
        self.path = path

    def now_ms(self) -> int:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ClockFileError(
                f"clock file {self.path} does not exist (clock.source = 'file' reads the "
                "time from it: write milliseconds since the Unix epoch there)"
            ) from None
        except OSError as exc:
            raise ClockFileError(f"clock file {self.path} cannot be read: {exc}") from None
        try:
            return _checked_ms(int(text.strip()), "time")
        except ValueError:
            raise ClockFileError(
                f"clock file {self.path} holds {text.strip()[:40]!r}, not a non-negative "
                "integer number of milliseconds since the Unix epoch"
            ) from None

    def set(self, ms: int) -> None:
        """Write the shared time for every process reading this file."""
        _checked_ms(ms, "clock time")
        scratch = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        scratch.write_text(f"{ms}\n", encoding="utf-8")
        os.replace(scratch, self.path)


def clock_from_config(config: Config) -> Clock:
    """The clock `[clock]` asks for. A file clock is read once here, so a wrong path stops
    the command at start-up rather than in the middle of a cycle."""
    if config.clock.source == "file":
        clock = FileClock(Path(os.path.expanduser(config.clock.file)))
        clock.now_ms()
        return clock
    return SystemClock()
