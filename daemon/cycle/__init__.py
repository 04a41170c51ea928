"""The dream cycle: eight phases, in this order, each in a module of its own.

scan -> classify -> interleave -> reconsolidate -> salience_pulse_propagate ->
downscale -> percentile_sweep -> promote

Transaction boundaries: each phase is a blocking function of (peer, state) that runs in a
worker thread, one phase at a time, and commits its own transactions; the state it hands to
the next phase is memory only. Every applied entry is recorded in the same transaction as
its effect, and a segment is marked applied only once all its entries are, so a crash
between any two statements loses nothing and applies nothing twice: the next cycle re-reads
what was not recorded. Each phase module says what it reads, what it writes, and what a
crash inside it leaves behind.

`run_phases` is the one loop over `PHASES`: the service drives it with each phase in a
worker thread between Trio checkpoints, `run_cycle_blocking` in the caller's thread.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final, TypeVar

from dreamcycle.daemon.cycle import (
    classify,
    downscale,
    interleave,
    percentile_sweep,
    promote,
    reconsolidate,
    salience_pulse_propagate,
    scan,
)
from dreamcycle.daemon.cycle._tombstone import tombstone_hashes
from dreamcycle.daemon.cycle.reconsolidate import SUPERSEDED_REASON
from dreamcycle.daemon.cycle.state import (
    CURSOR_META_KEY,
    LAST_SWEEP_META_KEY,
    CycleState,
    CycleStatus,
    EntryStatus,
    FatalCycleError,
    PhaseFn,
)
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer, Runtime

__all__ = [
    "CURSOR_META_KEY",
    "LAST_SWEEP_META_KEY",
    "PHASES",
    "SUPERSEDED_REASON",
    "CycleState",
    "CycleStatus",
    "EntryStatus",
    "FatalCycleError",
    "failure_status",
    "record_cycle_end",
    "record_cycle_start",
    "run_cycle_blocking",
    "run_phases",
    "tombstone_hashes",
]

T = TypeVar("T")

PHASES: Final[tuple[tuple[str, PhaseFn], ...]] = (
    ("scan", scan.run),
    ("classify", classify.run),
    ("interleave", interleave.run),
    ("reconsolidate", reconsolidate.run),
    ("salience_pulse_propagate", salience_pulse_propagate.run),
    ("downscale", downscale.run),
    ("percentile_sweep", percentile_sweep.run),
    ("promote", promote.run),
)

#: Runs one phase (a blocking call) and returns its stats: in a worker thread for the
#: service, in place for run_cycle_blocking.
PhaseRunner = Callable[[str, Callable[[], dict[str, Any]]], Awaitable[dict[str, Any]]]


async def run_phases(
    peer: Peer, st: CycleState, run_phase: PhaseRunner, stop: Callable[[], bool]
) -> bool:
    """Every phase in order, each one's stats (and its seconds) kept in `st.stats` and the
    metrics. Returns False when `stop` said so between two phases. `peer.cycling` is
    True meanwhile."""
    peer.cycling = True
    try:
        for name, phase in PHASES:
            if stop():
                return False
            started = time.monotonic()
            stats = await run_phase(name, functools.partial(phase, peer, st))
            elapsed = time.monotonic() - started
            st.stats[name] = {**st.stats.get(name, {}), **stats, "seconds": round(elapsed, 4)}
            metrics.record_phase(name, elapsed, stats)
        return True
    finally:
        peer.cycling = False


def run_cycle_blocking(
    peer: Peer, *, stop_requested: Callable[[], bool] | None = None
) -> CycleState:
    """All eight phases in order, in this thread (for CLIs, tests and benchmarks), recorded
    in `cycles` like the service's cycles.

    A phase that raises is recorded and re-raised; the caller decides whether to reload.
    A BaseException (an interrupt, a simulated kill) records nothing, as a real crash would.
    """
    st = CycleState(now_ms=peer.now_ms())
    if stop_requested is not None:
        st.stop_requested = stop_requested
    cycle_id = record_cycle_start(peer.runtime, st.now_ms)
    try:
        finished = _run_inline(run_phases(peer, st, _in_this_thread, st.stop_requested))
    except Exception as exc:
        record_cycle_end(peer.runtime, cycle_id, failure_status(exc), st)
        raise
    status = CycleStatus.DONE if finished else CycleStatus.INTERRUPTED
    record_cycle_end(peer.runtime, cycle_id, status, st)
    return st


async def _in_this_thread(name: str, phase: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    return phase()


def _run_inline(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (its phases run in place) to its end, with no
    event loop: the first step finishes it."""
    try:
        coroutine.send(None)
    except StopIteration as finished:
        result: T = finished.value
        return result
    coroutine.close()
    raise RuntimeError("the phase loop suspended outside an event loop")


def record_cycle_start(rt: Runtime, now_ms: int) -> int:
    """A 'running' row in `cycles`: one a crash leaves behind is marked interrupted at start-up."""
    with rt.db.transaction():
        return rt.db.start_cycle(now_ms)


def record_cycle_end(rt: Runtime, cycle_id: int, status: CycleStatus, st: CycleState) -> None:
    """Close the cycle's row with its phases' stats and refresh the gauges `status` mirrors."""
    finished_ms = rt.clock.now_ms()
    with rt.db.transaction():
        rt.db.finish_cycle(cycle_id, status=status, phases=st.stats, now_ms=finished_ms)
    metrics.CYCLES.labels(status).inc()
    live, tombstones = rt.db.live_and_tombstoned()
    metrics.LIVE_CHUNKS.set(live)
    metrics.TOMBSTONES.set(tombstones)
    metrics.LAST_CYCLE.set(finished_ms / 1000)


def failure_status(exc: Exception) -> CycleStatus:
    """FATAL when the daemon must stop, FAILED when the next cycle retries."""
    return CycleStatus.FATAL if isinstance(exc, FatalCycleError) else CycleStatus.FAILED
