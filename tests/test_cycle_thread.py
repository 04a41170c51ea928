"""The cycle's thread: its calls run under SCHED_IDLE behind the requests, are raised to
normal priority when they hold something up, and run at normal priority where SCHED_IDLE
could not be left again."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest
import trio

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.edit_models import SaveRequest, SaveResponse
from dreamcycle.daemon.config import ConfigError, load_config
from dreamcycle.daemon.cycle import PhaseRunner
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.scheduling import cycle_thread
from dreamcycle.daemon.scheduling.cycle_thread import IDLE, NORMAL, CycleThread
from dreamcycle.daemon.service import loop as service_module
from dreamcycle.daemon.service.loop import Service
from dreamcycle.store.embedder import Embedder
from tests.daemon_helpers import needs_reversible_idle, run_service_while, thread_policies

#: Long beside a call that only waits for an event.
WAIT_S = 10.0
#: Long beside a call that runs under SCHED_IDLE while other processes keep every core busy.
LOAD_WAIT_S = 120.0


def own_policy() -> int:
    return os.sched_getscheduler(0)  # 0: the calling thread, on Linux


def under_way(thread: CycleThread) -> tuple[threading.Event, Callable[[], int]]:
    """A call started in `thread` that waits for the event returned, then reports its
    policy (the callable waits for that report)."""
    started, release = threading.Event(), threading.Event()

    def call() -> int:
        started.set()
        release.wait(WAIT_S)
        return own_policy()

    future = thread.submit(call)
    assert started.wait(WAIT_S)
    return release, lambda: future.result(WAIT_S)


#: How long a model may take to load in a thread at SCHED_IDLE (make test-under-load).
IDLE_LOAD_TIMEOUT_S: Final = 600


@needs_reversible_idle
def test_calls_run_under_sched_idle_and_start_and_stop_at_normal_priority() -> None:
    thread = CycleThread("test-cycle", IDLE)
    try:
        assert thread.idle
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_IDLE
        assert thread.submit(own_policy, behind_requests=False).result(WAIT_S) == os.SCHED_OTHER
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_IDLE

        async def from_trio() -> tuple[int, int]:
            return await thread.run(own_policy), await thread.run(own_policy, behind_requests=False)

        assert trio.run(from_trio) == (os.SCHED_IDLE, os.SCHED_OTHER)
    finally:
        thread.close()


@needs_reversible_idle
def test_a_held_up_step_is_raised_for_its_rest_only_and_a_stop_for_good() -> None:
    thread = CycleThread("test-cycle", IDLE)
    try:
        release, policy = under_way(thread)
        assert (
            thread.raise_if_holding_up(step_seconds=0.1, waiting_to_write=False, stopping=False)
            is None
        )
        assert (
            thread.raise_if_holding_up(step_seconds=0.1, waiting_to_write=True, stopping=False)
            is not None
        )
        # Raised once: nothing further to do, whatever holds up.
        assert (
            thread.raise_if_holding_up(step_seconds=60.0, waiting_to_write=True, stopping=False)
            is None
        )
        release.set()
        assert policy() == os.SCHED_OTHER
        # The next call is behind the requests again, and a long one is raised.
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_IDLE
        release, policy = under_way(thread)
        limit = defaults.CYCLE_IDLE_STEP_LIMIT_S
        assert (
            thread.raise_if_holding_up(
                step_seconds=limit / 2, waiting_to_write=False, stopping=False
            )
            is None
        )
        # Past another limit, for a thread whose steps may run longer.
        assert (
            thread.raise_if_holding_up(
                step_seconds=limit, waiting_to_write=False, stopping=False, step_limit_s=2 * limit
            )
            is None
        )
        assert (
            thread.raise_if_holding_up(step_seconds=limit, waiting_to_write=False, stopping=False)
            is not None
        )
        release.set()
        assert policy() == os.SCHED_OTHER
        release, policy = under_way(thread)
        queued = thread.submit(own_policy)
        assert thread.raise_if_holding_up(step_seconds=0.1, waiting_to_write=False, stopping=True)
        release.set()
        assert policy() == os.SCHED_OTHER
        # After a stop, what was queued and what comes later runs at normal priority.
        assert queued.result(WAIT_S) == os.SCHED_OTHER
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_OTHER
    finally:
        thread.close()


@needs_reversible_idle
def test_what_runs_at_normal_priority_inside_a_call_and_the_threads_it_starts_stay_there() -> None:
    thread = CycleThread("test-cycle", IDLE)
    started_policy: list[int] = []

    def starting_a_thread() -> tuple[int, int]:
        with thread.at_normal_priority():
            inside = own_policy()
            helper = threading.Thread(target=lambda: started_policy.append(own_policy()))
            helper.start()
            helper.join()
        return inside, own_policy()

    try:
        assert thread.submit(starting_a_thread).result(WAIT_S) == (os.SCHED_OTHER, os.SCHED_IDLE)
        assert started_policy == [os.SCHED_OTHER]
        # Outside the cycle's thread it changes nothing.
        with thread.at_normal_priority():
            assert own_policy() == os.SCHED_OTHER
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_IDLE
    finally:
        thread.close()


@needs_reversible_idle
def test_a_raise_during_a_stretch_at_normal_priority_can_come_again_after_it() -> None:
    thread = CycleThread("test-cycle", IDLE)
    inside, stretch_over = threading.Event(), threading.Event()
    leave_stretch, finish = threading.Event(), threading.Event()

    def call() -> tuple[int, int]:
        with thread.at_normal_priority():
            inside.set()
            leave_stretch.wait(WAIT_S)
        after_stretch = own_policy()
        stretch_over.set()
        finish.wait(WAIT_S)
        return after_stretch, own_policy()

    def raised_for_a_stop() -> bool:
        reason = thread.raise_if_holding_up(step_seconds=0.1, waiting_to_write=False, stopping=True)
        return reason is not None

    try:
        future = thread.submit(call)
        assert inside.wait(WAIT_S)
        assert not raised_for_a_stop()  # already at normal priority
        leave_stretch.set()
        assert stretch_over.wait(WAIT_S)
        assert raised_for_a_stop()
        finish.set()
        assert future.result(WAIT_S) == (os.SCHED_IDLE, os.SCHED_OTHER)
    finally:
        thread.close()


@needs_reversible_idle
@pytest.mark.parametrize("guarded", [True, False])
def test_the_embedding_models_threads_loaded_from_an_idle_call_start_at_normal_priority(
    guarded: bool,
) -> None:
    """onnxruntime's threads take the name of the thread that loads the model; unguarded,
    they keep the SCHED_IDLE of the call that loaded it (the check can fail)."""
    name = f"model-{guarded:d}"
    thread = CycleThread(name, IDLE)
    embedder = Embedder(threads=2)  # so that onnxruntime starts a thread besides the caller
    if guarded:
        embedder.load_within(thread.at_normal_priority)
    try:
        # Unguarded, the model loads at SCHED_IDLE: on a machine kept busy it gets CPU only
        # when the busy work leaves some.
        timeout_s = 60 if guarded else IDLE_LOAD_TIMEOUT_S
        vector = thread.submit(embedder.embed_one, "an exception escapes a try block").result(
            timeout_s
        )
        assert vector.shape == (embedder.dim,)
        policies = sorted(policy for task, policy in thread_policies(os.getpid()) if task == name)
    finally:
        thread.close()
    assert len(policies) >= 2  # the cycle's thread and the model's
    models_threads = policies[:-1] if guarded else policies
    assert policies.count(os.SCHED_IDLE) == (1 if guarded else len(policies))
    assert set(models_threads) == {os.SCHED_OTHER if guarded else os.SCHED_IDLE}


def test_at_normal_priority_nothing_is_lowered_or_raised() -> None:
    thread = CycleThread("test-cycle", NORMAL)
    try:
        assert not thread.idle
        release, policy = under_way(thread)
        assert (
            thread.raise_if_holding_up(step_seconds=60.0, waiting_to_write=True, stopping=False)
            is None
        )
        release.set()
        assert policy() == os.SCHED_OTHER
    finally:
        thread.close()


def test_where_sched_idle_cannot_be_left_the_cycle_runs_at_normal_priority_and_says_why(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    entered: list[int] = []

    def unprivileged(native_id: int, policy: int) -> None:
        if policy != os.SCHED_IDLE:
            raise PermissionError(1, "Operation not permitted")
        entered.append(native_id)

    monkeypatch.setattr(cycle_thread, "_set_policy", unprivileged)
    with caplog.at_level(logging.WARNING, logger=cycle_thread.__name__):
        thread = CycleThread("test-cycle", IDLE)
    try:
        assert not thread.idle
        assert "cannot leave SCHED_IDLE again" in caplog.text
        assert "LimitNICE=+0" in caplog.text
        entered.clear()  # the trial thread's
        assert thread.submit(own_policy).result(WAIT_S) == os.SCHED_OTHER
        assert entered == []
    finally:
        thread.close()


def test_an_unknown_cpu_priority_is_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cycle\.cpu_priority must be one of idle, normal"):
        load_config(
            None,
            environ={"DREAMCYCLE_CYCLE_CPU_PRIORITY": "realtime"},
            overrides={"peer.data_dir": str(tmp_path), "peer.id": "p"},
        )


@needs_reversible_idle
def test_the_running_service_raises_a_step_that_holds_the_write_lock_a_save_waits_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The write lock is the reason, not the step's time limit (far off here): a step that
    waits for normal priority lets the save through only if the service gave it. What the
    steps before and after it do on a busy machine (raised or not, for a stop or for their
    time) is the scheduler's business, so only this step's raises are checked."""
    config = load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(tmp_path / "data"),
            "peer.id": "p1",
            "metrics.listen": "",
            "cycle.cpu_priority": IDLE,
            "cycle.interval_s": 3600.0,
            "api.enabled": True,
            "api.port": 0,
        },
    )
    # The service passes no limit: the method's default, bound when it was defined, applies.
    kwdefaults = CycleThread.raise_if_holding_up.__kwdefaults__
    assert kwdefaults is not None
    monkeypatch.setitem(kwdefaults, "step_limit_s", 3600.0)
    holding = threading.Event()
    started_at: list[int] = []
    ended_at: list[int] = []
    step = "holding the write lock"

    async def one_phase_holding_the_write_lock(
        peer: Peer, st: object, run_phase: PhaseRunner, stop: object
    ) -> bool:
        def phase() -> dict[str, object]:
            with peer.db.transaction():
                started_at.append(own_policy())
                holding.set()
                deadline = time.monotonic() + LOAD_WAIT_S
                while own_policy() != os.SCHED_OTHER and time.monotonic() < deadline:
                    time.sleep(0.01)
                ended_at.append(own_policy())
            return {}

        await run_phase(step, phase)
        return True

    monkeypatch.setattr(service_module, "run_phases", one_phase_holding_the_write_lock)
    rt = Runtime.open(config)
    service = Service(rt)
    saved: list[SaveResponse] = []

    def save_beside_the_step() -> None:
        assert holding.wait(LOAD_WAIT_S), "the cycle never reached the step"
        api = service.api
        assert api is not None
        saved.append(api.save(SaveRequest(content="saved while a cycle holds the write lock")))

    try:
        with caplog.at_level(logging.INFO, logger="dreamcycle.service"):
            run_service_while(service, save_beside_the_step)
    finally:
        rt.close()
    assert started_at == [os.SCHED_IDLE]  # behind the requests until the save came
    assert ended_at == [os.SCHED_OTHER]  # and raised before its deadline
    assert len(saved) == 1
    reasons = {
        getattr(r, "reason", None)
        for r in caplog.records
        if r.getMessage().startswith("cycle raised") and getattr(r, "step", None) == step
    }
    assert reasons == {"a request waits for the write lock"}
