"""The request policy shared by the networked backends: retries and request accounting.

Client libraries retry on their own by default (botocore, redis-py); the backends turn
that off so that exactly one policy decides, with one deadline, how long a transient
outage is waited out. After the deadline the caller gets a `BackendError` and tries
again on its next cycle: an outage never crashes the daemon.

Backoff is exponential with full jitter (delay drawn uniformly from
``[0, min(max_delay, base * 2**attempt)]``), which spreads the retries of many peers
hitting one store after the same outage.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, TypeVar

from dreamcycle.zeitgeist.backend import BackendError

T = TypeVar("T")

#: First backoff ceiling; the n-th retry waits at most base * 2**n.
DEFAULT_BASE_DELAY_S: Final = 0.05
#: No single wait between attempts is longer than this.
DEFAULT_MAX_DELAY_S: Final = 2.0
#: Total time an operation keeps retrying before giving up; well under a dream cycle.
DEFAULT_DEADLINE_S: Final = 20.0


class RetryDeadlineExceeded(BackendError):
    """Transient failures outlasted the deadline; the last failure is the __cause__."""

    def __init__(self, attempts: int, elapsed_s: float, last_error: BaseException) -> None:
        super().__init__(
            f"still failing after {attempts} attempt(s) over {elapsed_s:.1f} s: "
            f"{type(last_error).__name__}: {last_error}"
        )
        self.attempts = attempts
        self.elapsed_s = elapsed_s
        self.last_error = last_error


class InvalidRetryPolicy(ValueError):
    """A retry policy was configured with impossible numbers."""


@dataclass(frozen=True)
class RetryPolicy:
    """Retry transient failures with exponential backoff and full jitter, up to a deadline.

    `sleep`, `clock` and `rng` are injectable so tests can run the schedule without waiting.
    """

    base_delay_s: float = DEFAULT_BASE_DELAY_S
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    deadline_s: float = DEFAULT_DEADLINE_S
    sleep: Callable[[float], None] = field(default=time.sleep, repr=False, compare=False)
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.base_delay_s > 0:
            raise InvalidRetryPolicy(f"base_delay_s must be > 0, got {self.base_delay_s!r}")
        if not self.max_delay_s >= self.base_delay_s:
            raise InvalidRetryPolicy(
                f"max_delay_s ({self.max_delay_s!r}) must be >= base_delay_s "
                f"({self.base_delay_s!r})"
            )
        if not self.deadline_s >= 0:
            raise InvalidRetryPolicy(f"deadline_s must be >= 0, got {self.deadline_s!r}")

    def backoff_ceiling(self, retry_number: int) -> float:
        """The largest wait before retry number `retry_number` (0 for the first retry)."""
        # Capping the exponent keeps 2**n finite for pathological retry counts.
        return min(self.max_delay_s, self.base_delay_s * 2.0 ** min(retry_number, 62))

    def call(self, fn: Callable[[], T], is_transient: Callable[[BaseException], bool]) -> T:
        """Run `fn` until it succeeds, raises a non-transient error, or the deadline passes.

        Non-transient errors propagate unchanged on first sight. When the next wait would
        cross the deadline, raise RetryDeadlineExceeded chained to the last failure.
        """
        started = self.clock()
        attempts = 0
        while True:
            attempts += 1
            try:
                return fn()
            except Exception as error:
                if not is_transient(error):
                    raise
                elapsed = self.clock() - started
                delay = self.rng.uniform(0.0, self.backoff_ceiling(attempts - 1))
                if elapsed + delay > self.deadline_s:
                    raise RetryDeadlineExceeded(attempts, elapsed, error) from error
                self.sleep(delay)


class RequestCounter:
    """Thread-safe count of requests sent to a store, per operation name.

    Every attempt counts, retries included: this is what the store bills and what
    bounds an idle poll.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def record(self, operation: str) -> None:
        with self._lock:
            self._counts[operation] += 1

    def snapshot(self) -> dict[str, int]:
        """Counts so far, per operation."""
        with self._lock:
            return dict(self._counts)

    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())

    def reset(self) -> None:
        with self._lock:
            self._counts.clear()
