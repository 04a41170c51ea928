"""The dream cycle gives way to the API's requests, one database statement at a time.

Requests and the cycle share one interpreter. A cycle alternates between Python and
SQLite over and over, and each return to Python takes the GIL back from a request that
holds it: with cycles back to back beside them, requests' 99th percentiles grew well past
their idle ones, in process and more so over HTTP. Nothing a cycle does is urgent, so
before each statement on its connection (apsw's exec tracer calls `before_statement`),
it waits while a request is in flight. In process, that brought every figure's tail back
near its idle one; over HTTP the gain was within the noise (scripts/bench_recall.py
measures both, idle and with cycles running, and `--give-way` compares the wait with 0).

Two bounds keep that from stalling anything:

* While a request waits for the database's write lock and holds it (`stepping_aside`),
  the cycle waits for no request: it may hold that lock between two of its statements,
  and must be free to finish its transaction.
* The cycle waits at most `max_wait_s` at a time, and over any stretch at most
  CYCLE_WAIT_PER_RUN times as long as it ran, plus CYCLE_WAIT_CREDIT_WAITS waits' worth:
  requests that never stop arriving slow a cycle down, by a bounded factor, and never
  stop it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

from dreamcycle.daemon import defaults

#: Whether the code running is serving a request: a context variable, which Trio copies
#: into the worker thread a request's operation runs in.
_in_request: Final[ContextVar[bool]] = ContextVar("in_request", default=False)


class RequestsFirst:
    """Requests in flight, and the wait the cycle's statements make for them; safe to share
    between threads. `max_wait_s` 0 turns the waiting off."""

    def __init__(self, max_wait_s: float = defaults.CYCLE_GIVE_WAY_S) -> None:
        self.max_wait_s = max_wait_s
        self._changed = threading.Condition(threading.Lock())
        self._in_flight = 0
        #: Requests waiting for or holding the database's write lock.
        self._writing = 0
        # The cycle's side, read and written by its thread alone: how long it waited
        # beyond what its running earned, and when it last stopped waiting.
        self._owed_s = 0.0
        self._last_wait_end = time.monotonic()
        #: How many times the cycle has waited for a request, and how many of those waits
        #: the bound ended (the others ended with the requests, or when one stepped aside).
        self.waits = 0
        self.waits_to_the_bound = 0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def waiting_to_write(self) -> bool:
        """Whether a request waits for the database's write lock, or holds it."""
        return self._writing > 0

    @contextmanager
    def serving(self) -> Iterator[None]:
        """A request is in flight meanwhile. Counted once however deeply nested: the
        transports mark the whole request, the operation itself again for callers in
        this process, and the mark follows the request into its worker thread."""
        if _in_request.get():
            yield
            return
        marked = _in_request.set(True)
        self._add(1)
        try:
            yield
        finally:
            self._add(-1)
            _in_request.reset(marked)

    @contextmanager
    def stepping_aside(self) -> Iterator[None]:
        """Inside a request that waits for and then holds the write lock: the cycle, which
        may hold it, waits for no request meanwhile (outside a request, nothing changes)."""
        if not _in_request.get():
            yield
            return
        self._add(-1, writing=1)
        try:
            yield
        finally:
            self._add(1, writing=-1)

    def _add(self, in_flight: int, *, writing: int = 0) -> None:
        with self._changed:
            self._in_flight += in_flight
            self._writing += writing
            if not self._holding_up():
                self._changed.notify_all()

    def _holding_up(self) -> bool:
        """Whether the cycle should wait now."""
        return self._in_flight > 0 and self._writing <= 0

    def give_way(self) -> None:
        """The cycle's side: return once no request is in flight (or one waits for the
        write lock), after `max_wait_s`, or at once when the cycle has waited its share."""
        if self.max_wait_s <= 0 or not self._holding_up():
            return  # read without the lock: a request that arrives now waits one statement
        now = time.monotonic()
        # Running pays for waiting: CYCLE_WAIT_PER_RUN seconds of it per second run.
        self._owed_s = max(
            0.0, self._owed_s - defaults.CYCLE_WAIT_PER_RUN * (now - self._last_wait_end)
        )
        self._last_wait_end = now
        if self._owed_s >= defaults.CYCLE_WAIT_CREDIT_WAITS * self.max_wait_s:
            return
        self.waits += 1
        with self._changed:
            if not self._changed.wait_for(lambda: not self._holding_up(), self.max_wait_s):
                self.waits_to_the_bound += 1
        self._last_wait_end = time.monotonic()
        self._owed_s += self._last_wait_end - now

    def before_statement(self, _cursor: Any, _sql: str, _bindings: Any) -> bool:
        """apsw's exec tracer: give way, then let the statement run."""
        self.give_way()
        return True
