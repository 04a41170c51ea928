"""The cycle's statements give way to the API's requests in flight, within bounds: a
request waiting for the write lock steps aside, no wait outlasts `max_wait_s`, and a
steady stream of requests slows a cycle without stopping it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import trio

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import edit_models
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.scheduling.requests_first import RequestsFirst
from dreamcycle.pulses.vectors import Vector

START_MS = 1_700_000_000_000
#: Long enough that a wait that ran its course is told apart from one that did not.
LONG_WAIT_S = 0.5


def timed(call: Callable[[], object]) -> float:
    started = time.monotonic()
    call()
    return time.monotonic() - started


def in_thread(call: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread


def test_without_a_request_in_flight_the_cycle_never_waits() -> None:
    gate = RequestsFirst(LONG_WAIT_S)
    gate.give_way()
    assert gate.waits == 0
    assert gate.in_flight == 0


def test_the_cycle_waits_for_the_request_in_flight_and_goes_on_when_it_ends() -> None:
    gate = RequestsFirst(5.0)
    request_ended = threading.Event()
    cycle_went_on = threading.Event()
    ended_first: list[bool] = []

    def cycle() -> None:
        gate.give_way()
        ended_first.append(request_ended.is_set())
        cycle_went_on.set()

    with gate.serving():
        assert gate.in_flight == 1
        thread = in_thread(cycle)
        assert not cycle_went_on.wait(0.2)
        request_ended.set()
    assert cycle_went_on.wait(2.0)
    thread.join()
    assert ended_first == [True]
    assert gate.in_flight == 0


def test_a_request_counts_once_however_nested_and_steps_aside_only_inside_one() -> None:
    gate = RequestsFirst(LONG_WAIT_S)
    with gate.stepping_aside():  # outside a request: nothing to step out of
        assert gate.in_flight == 0
    with gate.serving():
        with gate.serving():
            assert gate.in_flight == 1
            with gate.stepping_aside():
                assert gate.in_flight == 0
                gate.give_way()
                assert gate.waits == 0
            assert gate.in_flight == 1
        assert gate.in_flight == 1
    assert gate.in_flight == 0


def test_the_mark_follows_a_request_into_its_worker_thread() -> None:
    gate = RequestsFirst(LONG_WAIT_S)

    def in_worker() -> int:
        with gate.serving():  # the operation's own mark: the same request
            return gate.in_flight

    async def request() -> int:
        with gate.serving():
            return await trio.to_thread.run_sync(in_worker)

    assert trio.run(request) == 1
    assert gate.in_flight == 0


def test_no_wait_outlasts_the_bound_and_a_steady_stream_only_slows_the_cycle() -> None:
    max_wait_s = 0.05
    gate = RequestsFirst(max_wait_s)
    credit = defaults.CYCLE_WAIT_CREDIT_WAITS
    with gate.serving():  # a request that never ends
        # Every wait ends: one the bound did not end would outlast the request, forever.
        waited = [timed(gate.give_way) for _ in range(credit)]
        assert gate.waits == credit
        assert max(waited) < max_wait_s + 2.0
        # Owed its credit, the cycle runs on without waiting (time the machine takes from
        # the test between calls counts as running, and may pay for a few waits more)...
        for _ in range(credit):
            before = gate.waits
            gate.give_way()
            if gate.waits == before:
                break
        else:
            pytest.fail(f"the cycle waited {gate.waits} times and was never let run on")
        # ...until running has paid for more waiting.
        time.sleep(sum(waited) / defaults.CYCLE_WAIT_PER_RUN)
        before = gate.waits
        gate.give_way()
        assert gate.waits == before + 1


def test_zero_turns_the_waiting_off() -> None:
    gate = RequestsFirst(0.0)
    with gate.serving():
        gate.give_way()
    assert gate.waits == 0


@pytest.fixture
def attached(tmp_path: Path) -> Iterator[tuple[Peer, Operations]]:
    config = load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(tmp_path / "data"),
            "peer.id": "first",
            "metrics.listen": "",
            "zeitgeist.dir": str(tmp_path / "zeitgeist"),
            "cycle.give_way_s": defaults.CYCLE_MAX_GIVE_WAY_S,
        },
    )
    rt = Runtime.open(config, clock=ManualClock(START_MS))
    peer = rt.open_peer()
    ops = Operations(rt, embedder=rt.embedder)
    ops.attach(peer)
    try:
        yield peer, ops
    finally:
        ops.close()
        peer.close()
        rt.close()


def test_the_attached_peers_statements_wait_for_requests_and_not_once_detached(
    attached: tuple[Peer, Operations],
) -> None:
    peer, ops = attached
    ran = threading.Event()

    def cycle_statement() -> None:
        peer.db.fetch_all("SELECT 1")
        ran.set()

    gate = ops.requests_first
    with gate.serving():
        thread = in_thread(cycle_statement)
        # On a busy machine the thread may take a while to reach its statement: until it
        # waits, the request must last (else the statement would run with none in flight).
        deadline = time.monotonic() + 60.0
        while gate.waits == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert gate.waits >= 1
        # Waiting, it has not run, unless its wait reached the bound meanwhile.
        assert not ran.is_set() or gate.waits_to_the_bound >= 1
    assert ran.wait(60.0)
    thread.join()

    waits = gate.waits
    ops.detach()
    with ops.requests_first.serving():
        peer.db.fetch_all("SELECT 1")
    assert ops.requests_first.waits == waits


def test_a_request_needing_the_write_lock_a_waiting_cycle_holds_is_not_held_up(
    attached: tuple[Peer, Operations],
) -> None:
    """The cycle holds the write lock and waits for a request before its next statement;
    the request saves, which needs that lock: it steps aside, the cycle commits, and the
    save goes through long before the cycle's wait would have ended by itself."""
    peer, ops = attached
    holding = threading.Event()
    request_started = threading.Event()
    committed: list[bool] = []

    def cycle() -> None:
        with peer.db.transaction():
            peer.db.fetch_all("SELECT count(*) FROM observations")
            holding.set()
            request_started.wait(5.0)
            peer.db.fetch_all("SELECT count(*) FROM observations")  # gives way here
        committed.append(True)

    gate = ops.requests_first
    thread = in_thread(cycle)
    assert holding.wait(5.0)
    with gate.serving():  # the transport's mark, as over HTTP
        request_started.set()
        saved = ops.save(edit_models.SaveRequest(content="Deploys go to the canary pool first."))
    thread.join(5.0)
    assert saved.indexed and committed
    # The cycle waited for the request, and the request's stepping aside ended the wait.
    assert gate.waits >= 1
    assert gate.waits_to_the_bound == 0


def test_a_pulse_embeds_its_text_before_it_takes_the_write_lock(
    attached: tuple[Peer, Operations],
) -> None:
    """While a request waits for or holds the write lock the cycle gives way to no request,
    and other writers wait: the model's milliseconds must come before it."""
    _, ops = attached
    held_while_embedding: list[bool] = []
    embed_one = ops._embedder.embed_one

    def watched(text: str) -> Vector:
        held_while_embedding.append(ops._write_lock.locked())
        return embed_one(text)

    ops._embedder.embed_one = watched  # type: ignore[method-assign]
    try:
        queued = ops.pulse(edit_models.PulseRequest(text="how to roll back a deploy", nonce="lock"))
    finally:
        del ops._embedder.embed_one
    assert queued.new
    assert held_while_embedding == [False]
