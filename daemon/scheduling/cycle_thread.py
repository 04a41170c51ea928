"""The thread the dream cycle's blocking work runs in, behind the API's requests for CPU.

A cycle's SQLite statements, hnswlib batches and fsyncs share the machine's cores with
the requests beside it, and a request woken meanwhile waits for the scheduler to hand it
a core. Linux keeps the scheduling policy per thread, and the threads hnswlib starts for
a batch inherit it, so the cycle's work runs in one thread of its own under SCHED_IDLE:
the kernel preempts it as soon as a normal thread (the event loop, a request's worker)
wakes, and it runs on what CPU is left over. With cycles back to back beside them, that
gave recall by text, context bundles and saves over HTTP shorter tails than at normal
priority, left recall by vector and filtered recall within their spread, and ran fewer
cycles (scripts/bench_recall.py `--cpu-priority` compares the two). Ten nice steps had
not helped: under EEVDF a woken thread preempts one of lower weight only when its own
deadline comes first, while any normal thread that wakes preempts a SCHED_IDLE one at
once.

Threads a call starts and keeps (onnxruntime's, with the embedding model) would stay
under SCHED_IDLE for good, so whatever starts them runs `at_normal_priority`: the service
has the cycle's embedding model load that way, whenever a cycle first needs it.

A thread under SCHED_IDLE runs hardly at all while other processes keep every core
busy. It then must not hold up what waits for it: a stop, a request waiting for the
database's write lock the cycle holds, or the systemd watchdog. The service raises the thread back
to normal priority for the rest of such a step (`raise_if_holding_up`). Leaving SCHED_IDLE
takes root, CAP_SYS_NICE or an RLIMIT_NICE of at least 20 (`LimitNICE=+0` in the unit):
where that is not granted, the cycle runs at normal priority from the start and the
daemon says why, rather than run at a priority it could not undo.
"""

from __future__ import annotations

import contextvars
import ctypes
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Final, TypeVar

import trio

from dreamcycle.daemon import defaults

log = logging.getLogger(__name__)

T = TypeVar("T")

_PR_SET_NAME: Final = 15
#: Linux thread names are 16 bytes with the terminating NUL.
_MAX_NATIVE_NAME_BYTES: Final = 15

IDLE: Final = defaults.CPU_PRIORITY_IDLE
NORMAL: Final = defaults.CPU_PRIORITY_NORMAL
CPU_PRIORITIES: Final = defaults.CPU_PRIORITIES


def _set_policy(native_id: int, policy: int) -> None:
    os.sched_setscheduler(native_id, policy, os.sched_param(0))


def _name_native_thread(name: str) -> None:
    """Give the calling thread `name` where `ps -L` and `top -H` show it (Linux; Python
    names only its own view of the thread)."""
    if sys.platform != "linux":
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_NAME, name.encode()[:_MAX_NATIVE_NAME_BYTES], 0, 0, 0)
    except (OSError, AttributeError):
        pass  # a name is a convenience


def idle_is_reversible() -> str | None:
    """None if a thread of this process can enter SCHED_IDLE and leave it again; else why
    not. Tried in a thread of its own, which ends either way."""
    if not hasattr(os, "SCHED_IDLE"):
        return "this system has no SCHED_IDLE"
    outcome: list[str | None] = []

    def attempt() -> None:
        native_id = threading.get_native_id()
        try:
            _set_policy(native_id, os.SCHED_IDLE)
            _set_policy(native_id, os.SCHED_OTHER)
            outcome.append(None)
        except OSError as error:
            outcome.append(f"a thread cannot leave SCHED_IDLE again ({error.strerror})")

    trial = threading.Thread(target=attempt, name="cpu-priority-trial")
    trial.start()
    trial.join()
    return outcome[0] if outcome else "the trial thread failed"


class CycleThread:
    """One thread, created on first use, that runs the blocking calls given to it one at a
    time, in the order given; under SCHED_IDLE at the start of each call when `priority`
    is IDLE and the policy can be left again."""

    def __init__(self, name: str, priority: str) -> None:
        self.idle = False
        if priority == IDLE:
            refused = idle_is_reversible()
            if refused is None:
                self.idle = True
            else:
                log.warning(
                    "the cycle runs at normal CPU priority: %s; grant LimitNICE=+0 in the "
                    'unit, or set cycle.cpu_priority = "normal" to silence this',
                    refused,
                )
        self._native_id: int | None = None
        self._lowered = False
        #: Once a stop was asked for, no call goes behind the requests again: a call still
        #: queued then would otherwise wait under SCHED_IDLE for a core the stop needs.
        self._stopping = False
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=name, initializer=self._started, initargs=(name,)
        )

    async def run(self, fn: Callable[[], T], *, behind_requests: bool = True) -> T:
        """`fn()` in the thread, with the caller's context variables, under SCHED_IDLE if
        `behind_requests`; like `trio.to_thread.run_sync` without cancellation, the
        caller waits for it to end."""
        token = trio.lowlevel.current_trio_token()
        done = trio.Event()
        future: Future[T] = self.submit(
            contextvars.copy_context().run, fn, behind_requests=behind_requests
        )
        future.add_done_callback(lambda _: token.run_sync_soon(done.set))
        with trio.CancelScope(shield=True):
            await done.wait()
        return future.result()

    def submit(
        self, fn: Callable[..., T], *args: object, behind_requests: bool = True
    ) -> Future[T]:
        """`fn(*args)` in the thread, from any thread, without waiting."""
        return self._pool.submit(self._call, behind_requests, fn, *args)

    def _started(self, name: str) -> None:
        """In the thread, once: its name for `ps -L`, and its id for the scheduler."""
        _name_native_thread(name)
        with self._lock:
            self._native_id = threading.get_native_id()

    def _call(self, behind_requests: bool, fn: Callable[..., T], *args: object) -> T:
        if self.idle:
            native_id = threading.get_native_id()
            with self._lock:
                if behind_requests and not self._lowered and not self._stopping:
                    _set_policy(native_id, os.SCHED_IDLE)
                    self._lowered = True
                elif not behind_requests and self._lowered:
                    _set_policy(native_id, os.SCHED_OTHER)
                    self._lowered = False
        return fn(*args)

    @contextmanager
    def at_normal_priority(self) -> Iterator[None]:
        """What runs within, in this thread, at normal priority: threads started there
        keep the priority they start with. Called from any other thread, or while the call
        under way already runs at normal priority, it changes nothing. Afterwards the call
        goes back under SCHED_IDLE; a raise that came meanwhile found nothing to raise,
        and the service's next check raises it again if what it held up still waits."""
        native_id = threading.get_native_id()
        with self._lock:
            raised = self._lowered and native_id == self._native_id and self._set_normal(native_id)
        try:
            yield
        finally:
            if raised:
                with self._lock:
                    _set_policy(native_id, os.SCHED_IDLE)
                    self._lowered = True

    def raise_if_holding_up(
        self,
        *,
        step_seconds: float,
        waiting_to_write: bool,
        stopping: bool,
        step_limit_s: float = defaults.CYCLE_IDLE_STEP_LIMIT_S,
    ) -> str | None:
        """Raise the call under way, `step_seconds` into a step of the cycle, to normal
        priority if it holds something up: a stop (and every call after it), a request
        waiting for the write lock, or the watchdog once the step has run `step_limit_s`.
        Why, if it was raised now."""
        if stopping:
            with self._lock:
                self._stopping = True
            reason = "the daemon is stopping"
        elif waiting_to_write:
            reason = "a request waits for the write lock"
        elif step_seconds >= step_limit_s:
            reason = f"the step has run {step_limit_s:g} s"
        else:
            return None
        return reason if self._raise_to_normal() else None

    def _raise_to_normal(self) -> bool:
        """Run the call under way at normal priority until it ends (the next call starts
        under SCHED_IDLE again); whether the priority changed."""
        with self._lock:
            if not self._lowered or self._native_id is None:
                return False
            return self._set_normal(self._native_id)

    def _set_normal(self, native_id: int) -> bool:
        """The call under way at normal priority; whether it could be. Holds self._lock."""
        try:
            _set_policy(native_id, os.SCHED_OTHER)
        except OSError as error:
            log.warning("cannot raise the cycle to normal priority: %s", error)
            return False
        self._lowered = False
        return True

    def close(self) -> None:
        self._pool.shutdown(wait=True)
