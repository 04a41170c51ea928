"""The daemon as a service: systemd notifications, watchdog pings, Prometheus metrics, JSON logs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from os import SCHED_IDLE, SCHED_OTHER
from pathlib import Path

import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.client import MemoryClient
from tests.api_helpers import running_api
from tests.daemon_helpers import (
    DREAMCYCLE,
    Peer,
    documentation_chunks,
    needs_reversible_idle,
    wait_until,
    write_jsonl,
)

pytestmark = pytest.mark.slow

#: Half of this is the ping interval the daemon derives from WATCHDOG_USEC.
WATCHDOG_USEC = "1000000"
#: What the daemon logs when it raises a cycle's step, and how long a cycle may take to
#: need it on a machine kept busy (a step is raised at the latest after 5 s).
CYCLE_RAISED = "cycle raised to normal CPU priority for the rest of its step"
BUSY_MACHINE_WAIT_S = 60.0
#: How long the cycle may take to reach a state while other processes keep every core busy.
LOAD_WAIT_S = 120.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def peer(tmp_path: Path) -> Peer:
    peer = Peer(tmp_path / "data", "svc", tmp_path / "zeitgeist")
    chunks = write_jsonl(tmp_path / "chunks.jsonl", documentation_chunks(["exceptions", "try"], 12))
    peer.dreamcycle("ingest", str(chunks))
    return peer


def test_readiness_watchdog_and_stopping_reach_systemd(peer: Peer, tmp_path: Path) -> None:
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(0.2)
    messages: list[str] = []

    def drain() -> None:
        try:
            while True:
                messages.append(listener.recv(4096).decode())
        except TimeoutError:
            pass

    try:
        with peer.start(
            "--interval", "0.3", settings={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": WATCHDOG_USEC}
        ) as daemon:
            daemon.wait_ready()

            def pinged_twice() -> bool:
                drain()
                return sum("WATCHDOG=1" in m for m in messages) >= 2

            wait_until(pinged_twice, what="two watchdog pings", timeout_s=20)
            assert daemon.terminate() == 0
        drain()
    finally:
        listener.close()
    ready = next(i for i, m in enumerate(messages) if "READY=1" in m)
    assert any("STATUS=loading index" in m for m in messages[:ready])
    assert "STOPPING=1" in messages[-1]


def test_metrics_endpoint_reports_phases_and_chunks(peer: Peer) -> None:
    port = free_port()
    settings = {"DREAMCYCLE_METRICS_LISTEN": f"127.0.0.1:{port}"}
    with peer.start("--interval", "0.3", settings=settings) as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 2, what="two cycles", timeout_s=30)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
            text = reply.read().decode()
        assert daemon.terminate() == 0
    samples = dict(
        line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")
    )
    for phase in ("scan", "classify", "salience_pulse_propagate", "promote"):
        assert float(samples[f'dreamcycle_phase_duration_seconds_count{{phase="{phase}"}}']) >= 1
    assert float(samples['dreamcycle_cycles_total{result="done"}']) >= 1
    assert float(samples["dreamcycle_live_chunks"]) == peer.scalar(
        "SELECT count(*) FROM observations WHERE deleted_at IS NULL"
    )
    assert float(samples["dreamcycle_last_cycle_timestamp_seconds"]) > time.time() - 60


def test_a_taken_metrics_port_is_refused_with_exit_3(peer: Peer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = peer.dreamcycle(
            "run", "--once", expect=3, settings={"DREAMCYCLE_METRICS_LISTEN": f"127.0.0.1:{port}"}
        )
    assert f"127.0.0.1:{port}" in result.stderr
    assert "metrics.listen" in result.stderr


def test_logs_are_json_lines_with_fields(peer: Peer) -> None:
    # The helper's options ask for text logs; the default format is JSON.
    options = [o for o in peer.options() if o not in ("--log-format", "text")]
    peer.provision_key()
    result = subprocess.run(
        [DREAMCYCLE, "run", "--once", *options],
        capture_output=True, text=True, env=peer.environment(), timeout=120, check=True,
    )  # fmt: skip
    records = [json.loads(line) for line in result.stderr.splitlines()]
    cycle = next(r for r in records if r["msg"] == "cycle done")
    assert cycle["level"] == "info"
    assert cycle["phases"]["classify"]["admitted"] == 12
    assert set(cycle["phases"]) == {
        "scan", "classify", "interleave", "reconsolidate", "salience_pulse_propagate",
        "downscale", "percentile_sweep", "promote",
    }  # fmt: skip


def threads_of(pid: int) -> dict[int, tuple[str, int]]:
    """Each thread's native id, name and scheduling policy, from /proc (policy is stat's
    41st field); a thread that ends while they are read is left out. A thread takes the
    name of the thread that started it."""
    threads: dict[int, tuple[str, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            stat = (task / "stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        threads[int(task.name)] = (name, int(stat[stat.rindex(")") + 2 :].split()[41 - 3]))
    return threads


@needs_reversible_idle
@pytest.mark.parametrize("priority", ["idle", "normal"])
def test_the_cycle_runs_at_its_configured_cpu_priority_and_the_rest_at_normal(
    peer: Peer, tmp_path: Path, priority: str
) -> None:
    """Threads are looked at again and again while cycles run, not once: on a busy machine
    a step may be raised to normal priority for its rest, and a batch's short-lived threads
    (which take the cycle's name and priority) may be caught or not. The threads kept from
    one look to a look after the cycle then under way has ended are the ones that last."""
    # Left for the cycle to embed: its embedding model loads in the cycle's thread.
    unembedded = write_jsonl(tmp_path / "more.jsonl", documentation_chunks(["with"], 4))
    peer.dreamcycle("ingest", "--no-embed", str(unembedded))
    unembedded_count = "SELECT count(*) FROM observations WHERE embedding IS NULL AND type = ?"
    assert peer.scalar(unembedded_count, ("manual",)) == 4
    looks: list[dict[int, tuple[str, int]]] = []

    def kept() -> set[int]:
        return set(looks[0]) & set(looks[-1])

    def idle_at_some_look(tids: set[int]) -> set[int]:
        return {tid for look in looks for tid, (_, p) in look.items() if p == SCHED_IDLE} & tids

    # Two embedding threads, so that onnxruntime starts one besides the caller's.
    threads = {"DREAMCYCLE_CYCLE_CPU_PRIORITY": priority, "DREAMCYCLE_EMBEDDING_THREADS": "2"}
    with peer.start("--interval", "0.3", settings=threads) as daemon:
        daemon.wait_ready(timeout_s=LOAD_WAIT_S)
        # The first cycle embeds the chunks left, so its model's threads run from then on.
        wait_until(lambda: peer.cycles_done() >= 1, what="a cycle", timeout_s=LOAD_WAIT_S)
        looks.append(threads_of(daemon.process.pid))
        # The cycle under way at the first look has ended once one more cycle is done.
        done = peer.cycles_done()

        def settled() -> bool:
            ended = peer.cycles_done() > done  # read before the look: ended before it
            looks.append(threads_of(daemon.process.pid))
            return ended and (priority != "idle" or bool(idle_at_some_look(kept())))

        wait_until(settled, what="another cycle, the cycle's thread idle", timeout_s=LOAD_WAIT_S)
        assert daemon.terminate(timeout_s=LOAD_WAIT_S) == 0
    assert peer.scalar(unembedded_count, ("manual",)) == 0
    assert {p for look in looks for _, p in look.values()} <= {SCHED_IDLE, SCHED_OTHER}
    names = {tid: name for look in looks for tid, (name, _) in look.items()}
    # Only the cycle's work runs under SCHED_IDLE: its thread, and a batch's threads it
    # starts. The threads the cycle starts and keeps, the embedding model's among them,
    # take its name but must run at normal priority, as the event loop and the request
    # workers do: of the threads that last, the cycle's own alone is ever seen idle, and
    # only if asked.
    behind_requests = {"cycle"} if priority == "idle" else set()
    assert {names[tid] for tid in idle_at_some_look(set(names))} <= behind_requests
    lasting_idle = [names[tid] for tid in idle_at_some_look(kept())]
    assert lasting_idle == (["cycle"] if priority == "idle" else [])
    assert len([tid for tid in kept() if names[tid] == "cycle"]) > 1


def raise_reasons(log: str) -> list[str]:
    """Why the daemon raised a cycle's step, each time its `log` says it did."""
    return [
        line.split("reason=", 1)[1].strip()
        for line in log.splitlines()
        if CYCLE_RAISED in line and "reason=" in line
    ]


@needs_reversible_idle
def test_on_a_machine_other_processes_keep_busy_the_idle_cycle_is_raised_and_requests_answered(
    peer: Peer,
) -> None:
    """Under SCHED_IDLE a cycle hardly runs while every core is busy: a step holding the
    write lock a save waits for, or one running 5 s, must be raised to normal priority,
    and every save is answered meanwhile."""
    hogs: list[subprocess.Popen[bytes]] = []
    saved: list[str] = []
    raises: list[str] = []
    with running_api(peer) as served, MemoryClient(served.socket_path) as memory:
        try:
            for _ in os.sched_getaffinity(0):
                hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
            deadline = time.monotonic() + BUSY_MACHINE_WAIT_S
            while not raises and time.monotonic() < deadline:
                saved.append(memory.save(f"busy machine note {len(saved)}").content_hash)
                raises = raise_reasons(served.daemon.log())
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
        assert raises, served.daemon.log_tail()
        assert set(raises) <= {
            "a request waits for the write lock",
            f"the step has run {defaults.CYCLE_IDLE_STEP_LIMIT_S:g} s",
        }
        found = memory.recall(f"busy machine note {len(saved) - 1}", record=False).hits
        assert saved[-1] in [hit.content_hash for hit in found]
