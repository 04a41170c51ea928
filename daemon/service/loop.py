"""The Trio service: runs dream cycles on an interval until SIGTERM / SIGINT.

Phases are blocking (apsw, hnswlib, fastembed, boto3) and run one at a time in
a worker thread behind a limiter, so the Trio loop stays free to answer
signals and check progress. Each step of a cycle is marked in `Health`; the
systemd watchdog is fed only while the step under way is younger than the
watchdog's timeout, so a stuck cycle gets the daemon restarted.

A stop request (SIGTERM, SIGINT) reaches the running phase, which returns at its next
batch boundary; the rest of the cycle is skipped (the next start redoes it), the index
is saved and the service returns 0. A phase that does not return within
STOP_DEADLINE_S (a backend waiting out its retries) is left behind: the process exits 1
at once, and what was not committed is redone at the next start, as after a crash.

Storage faults (another process's write lock past the busy timeout, a full disk, a
data directory made read-only) never stop the daemon: the cycle's open transaction is
rolled back, the fault is logged once and then at a bounded rate, shown in /readyz and
`dreamcycle_storage_fault`, and the cycle is retried with backoff while the API keeps
serving reads; the first cycle that writes again clears it.

With `[api] enabled`, the same nursery serves the local API (daemon/api/http.py):
it listens from the start (/healthz), answers operations once the index is
loaded, and runs them in worker threads of its own limiter, beside the phases.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final, TypeVar

import trio

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import http
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.cycle import (
    CycleState,
    CycleStatus,
    FatalCycleError,
    record_cycle_end,
    record_cycle_start,
    run_phases,
)
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.observe.health import Health, outbox_depth
from dreamcycle.daemon.observe.storage_health import StorageFault, storage_fault
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.scheduling.cycle_thread import CycleThread
from dreamcycle.daemon.service import systemd
from dreamcycle.daemon.service.allocator import hand_back_freed_memory
from dreamcycle.store.index_file import start_checksum_threads

log = logging.getLogger("dreamcycle.service")
T = TypeVar("T")

EXIT_OK: Final = 0
#: A phase did not stop within STOP_DEADLINE_S of a stop request.
EXIT_STOP_ABANDONED: Final = 1
#: A bounded run (`run --once`, `--cycles N`) in which a cycle failed or was deferred by a
#: storage fault: a caller running cycles on demand must know that one did not do its work.
EXIT_CYCLE_FAILED: Final = 1
EXIT_FATAL: Final = 3
#: How a cycle may end that leaves its work undone (the next cycle retries it).
_UNDONE: Final = (CycleStatus.FAILED, CycleStatus.DEFERRED)


class Service:
    def __init__(
        self, rt: Runtime, *, max_cycles: int | None = None, health: Health | None = None
    ) -> None:
        self.rt = rt
        self.max_cycles = max_cycles
        self.health = health if health is not None else service_health(rt)
        self.stop = trio.Event()
        #: The same request, for the phase running in a worker thread.
        self.stop_requested = threading.Event()
        #: A phase failed on a storage fault: memory may be ahead of what was rolled back.
        self._reload_due = False
        self.cycles_done = 0
        #: Set once the daemon has told systemd it is stopping.
        self._stopping = False
        #: Phases run on it one at a time: they share a database connection and the
        #: salience cache.
        self._cycle_thread = CycleThread("cycle", rt.config.cycle.cpu_priority)
        # The model's threads keep the priority they start with, and serve every later
        # cycle: they must not start under SCHED_IDLE.
        rt.embedder.load_within(self._cycle_thread.at_normal_priority)
        # So do those the index's checksum is hashed on, which the cycle's save would start.
        start_checksum_threads()
        self.api: Operations | None = Operations(rt) if rt.config.api.enabled else None

    async def run(self) -> int:
        failure: Exception | None = None
        code = EXIT_OK
        async with trio.open_nursery() as nursery:
            # Signals are watched from the start: a stop during a long index load is honoured.
            nursery.start_soon(self._watch_signals, nursery)
            try:
                code = await self._start_and_loop(nursery)
            except Exception as exc:
                failure = exc  # re-raised bare, not wrapped in the nursery's ExceptionGroup
            finally:
                nursery.cancel_scope.cancel()
        if self.api is not None:
            self.api.close()
        self._cycle_thread.close()
        if failure is not None:
            raise failure
        log.info("daemon stopped", extra={"cycles": self.cycles_done})
        return code

    async def _start_and_loop(self, nursery: trio.Nursery) -> int:
        # Opening can take minutes (an index rebuild): tell systemd what we are doing.
        systemd.notify("STATUS=loading index")
        if self.api is not None:
            # Listening before the index loads: /healthz answers, operations say "not ready".
            await nursery.start(
                functools.partial(
                    http.serve, self.api, self.rt.config, shutdown=self.stop, health=self.health
                )
            )
        # Starting and stopping are waited for (requests are refused meanwhile): no reason
        # to run them behind anything.
        peer = await self._cycle_thread.run(self.rt.open_peer, behind_requests=False)
        self.health.backend = peer.backend_health
        await self._cycle_thread.run(self._abandon_interrupted_cycles, behind_requests=False)
        if self.api is not None:
            await trio.to_thread.run_sync(self.api.attach, peer)
        self.health.index_loaded = True
        if self._cycle_thread.idle:
            nursery.start_soon(self._keep_cycle_from_holding_up)
        interval = systemd.watchdog_interval_s()
        if interval is not None:
            nursery.start_soon(self._feed_watchdog, interval)
        systemd.notify("READY=1\nSTATUS=running dream cycles")
        log.info(
            "daemon ready",
            extra={
                "peer": self.rt.peer_id,
                "backend": self.rt.config.zeitgeist.backend,
                "index_rebuilt": peer.index_rebuild_reason,
            },
        )
        try:
            return await self._loop(peer)
        finally:
            # No watchdog ping follows: stopping is the last thing systemd hears.
            self._stopping = True
            systemd.notify("STOPPING=1")
            self.health.index_loaded = False
            if self.api is not None:
                self.api.detach()
            await self._cycle_thread.run(
                functools.partial(_save_and_close, peer), behind_requests=False
            )

    def _abandon_interrupted_cycles(self) -> None:
        try:
            with self.rt.db.transaction():
                count = self.rt.db.abandon_running_cycles()
        except Exception as exc:
            fault = storage_fault(exc)
            if fault is None:
                raise
            # Only bookkeeping: the rows stay 'running' until a start that can write.
            self.health.storage.failed(fault, exc)
            return
        if count:
            log.info("cycles interrupted by a crash marked", extra={"cycles": count})

    async def _loop(self, peer: Peer) -> int:
        """EXIT_OK once stopped; a bounded run ends EXIT_CYCLE_FAILED when any of its cycles
        left its work undone (an unbounded daemon retries them and carries on)."""
        interval = self.rt.config.cycle.interval_s
        undone = 0
        while not self.stop.is_set():
            started = time.monotonic()
            try:
                await self.run_cycle(peer)
            except FatalCycleError as exc:
                log.error("stopping: %s", exc)
                return EXIT_FATAL
            self.cycles_done += 1
            # A storage fault before the cycle could start leaves no status of its own.
            if self.health.storage.fault is not None or self.health.last_cycle_status in _UNDONE:
                undone += 1
            if self.max_cycles is not None and self.cycles_done >= self.max_cycles:
                break
            if self.health.storage.fault is not None:
                wait_s = self.health.storage.retry_delay_s()
            else:
                wait_s = interval - (time.monotonic() - started)
            with trio.move_on_after(max(0.0, wait_s)):
                await self.stop.wait()
        if self.max_cycles is not None and undone:
            log.error(
                "bounded run done with cycles that failed",
                extra={"cycles": self.cycles_done, "failed": undone},
            )
            return EXIT_CYCLE_FAILED
        return EXIT_OK

    async def run_cycle(self, peer: Peer) -> CycleState:
        st = CycleState(now_ms=self.rt.clock.now_ms(), stop_requested=self.stop_requested.is_set)
        if self._reload_due:
            self.health.step("reloading state after a storage fault")
            if isinstance(await self._storage_guarded(peer.reload), StorageFault):
                self.health.idle()
                return st
            self._reload_due = False
        self.health.step("starting the cycle")
        cycle_id = await self._storage_guarded(lambda: record_cycle_start(self.rt, st.now_ms))
        if isinstance(cycle_id, StorageFault):
            self.health.idle()
            return st
        started_id: int = cycle_id
        status = CycleStatus.DONE
        try:
            if not await run_phases(peer, st, self._run_phase, self.stop.is_set):
                status = CycleStatus.INTERRUPTED
        except FatalCycleError:
            status = CycleStatus.FATAL
            raise
        except Exception as exc:
            metrics.CYCLE_ERRORS.labels(type(exc).__name__).inc()
            fault = storage_fault(exc)
            if fault is not None:
                # Rolled back; memory is reloaded before the next attempt, which redoes it.
                status = CycleStatus.DEFERRED
                self.health.storage.failed(fault, exc)
                self._reload_due = True
            else:
                status = CycleStatus.FAILED
                log.exception("cycle failed; state reloaded, retrying next cycle")
                self.health.step("reloading state after a failed phase")
                try:
                    reloaded = await self._storage_guarded(peer.reload)
                except Exception as reload_error:
                    raise FatalCycleError(
                        f"cannot reload state after a failed cycle: {reload_error}"
                    ) from reload_error
                self._reload_due = isinstance(reloaded, StorageFault)
        finally:
            self.health.step("recording the cycle")
            recorded = await self._storage_guarded(
                lambda: record_cycle_end(self.rt, started_id, status, st)
            )
            if not isinstance(recorded, StorageFault) and status != CycleStatus.DEFERRED:
                self.health.storage.recovered()
            depth = await self._blocking(lambda: outbox_depth(self.rt.db))
            metrics.OUTBOX_ENTRIES.set(depth)
            self.health.cycle_finished(status)
            self.health.idle()
        log.info("cycle %s", status, extra={"phases": st.stats})
        return st

    async def _run_phase(self, name: str, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        self.health.step(name)
        log.debug("phase started", extra={"phase": name})
        return await self._blocking(phase)

    async def _storage_guarded(self, fn: Callable[[], T]) -> T | StorageFault:
        """`fn` in the phases' thread; the fault (recorded) when a storage fault stopped it,
        which the next attempt retries."""
        try:
            return await self._blocking(fn)
        except Exception as exc:
            fault = storage_fault(exc)
            if fault is None:
                raise
            self.health.storage.failed(fault, exc)
            return fault

    async def _blocking(self, fn: Callable[[], T]) -> T:
        return await self._cycle_thread.run(fn)

    async def _keep_cycle_from_holding_up(self) -> None:
        """Raise the cycle's step under SCHED_IDLE to normal priority once it holds up a
        stop, a request or the watchdog (`CycleThread.raise_if_holding_up`)."""
        requests = None if self.api is None else self.api.requests_first
        while True:
            await trio.sleep(defaults.CYCLE_PRIORITY_CHECK_S)
            stalled = self.health.stalled()
            if stalled is None:
                continue
            step, seconds = stalled
            reason = self._cycle_thread.raise_if_holding_up(
                step_seconds=seconds,
                waiting_to_write=requests is not None and requests.waiting_to_write,
                stopping=self.stop_requested.is_set(),
            )
            if reason is not None:
                log.info(
                    "cycle raised to normal CPU priority for the rest of its step",
                    extra={"step": step, "seconds": round(seconds, 1), "reason": reason},
                )

    async def _watch_signals(self, nursery: trio.Nursery) -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("stop requested", extra={"signal": signal.Signals(signum).name})
                if not self.stop.is_set():
                    nursery.start_soon(self._enforce_stop_deadline)
                self.stop_requested.set()
                self.stop.set()

    async def _enforce_stop_deadline(self) -> None:
        """Cancelled when the service stops in time; otherwise leave the phase behind."""
        await trio.sleep(defaults.STOP_DEADLINE_S)
        log.error(
            "a phase did not stop in time; exiting without it, the next start redoes it",
            extra={"step": (self.health.stalled() or ("none", 0.0))[0]},
        )
        logging.shutdown()
        # Committed work is durable; the open transaction is rolled back by SQLite at the
        # next open, exactly as after a crash.
        os._exit(EXIT_STOP_ABANDONED)

    async def _feed_watchdog(self, interval_s: float) -> None:
        """Every `interval_s` (half the watchdog's timeout): feed it unless a step of the
        cycle has been under way for longer than the whole timeout."""
        timeout_s = 2 * interval_s
        starved = False
        while not self._stopping:
            stalled = self.health.stalled()
            if stalled is None or stalled[1] <= timeout_s:
                systemd.notify("WATCHDOG=1")
                if starved:
                    log.info("cycle moving again; watchdog fed")
                starved = False
            elif not starved:
                starved = True
                step, seconds = stalled
                log.error(
                    "cycle stuck; watchdog no longer fed",
                    extra={"step": step, "seconds": round(seconds, 1), "timeout_s": timeout_s},
                )
            await trio.sleep(interval_s)


def _save_and_close(peer: Peer) -> None:
    try:
        peer.save_index()
    except Exception:
        log.exception("saving the index failed; it will be rebuilt at the next start")
    peer.close()


def service_health(rt: Runtime) -> Health:
    return Health(rt.config.database_path, rt.config.cycle.interval_s, rt.clock.now_ms)


def serve(rt: Runtime, *, max_cycles: int | None = None, health: Health | None = None) -> int:
    set_up_the_daemon_process()
    return trio.run(Service(rt, max_cycles=max_cycles, health=health).run)


def set_up_the_daemon_process() -> None:
    """Set up the daemon's process (process-wide settings, the daemon's alone): API
    requests take the GIL from a running cycle within THREAD_SWITCH_INTERVAL_S, and memory
    freed goes back to the system (daemon/service/allocator.py)."""
    sys.setswitchinterval(defaults.THREAD_SWITCH_INTERVAL_S)
    hand_back_freed_memory(defaults.MALLOC_ARENAS, defaults.MALLOC_MMAP_THRESHOLD_BYTES)
