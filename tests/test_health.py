"""Health of a running daemon: /healthz and /readyz on the metrics listener and the API,
the metrics that say how publishing and polling go, and a watchdog fed only while cycles
make progress."""

from __future__ import annotations

import itertools
import json
import re
import socket
import sqlite3
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import httpx
import pytest

from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.observe.backend_health import BackendHealth
from dreamcycle.daemon.observe.health import Health
from tests.daemon_helpers import Peer, documentation_chunks, wait_until, write_jsonl

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts" / "monitoring"
#: Half a second between watchdog checks; a step older than a second starves it.
WATCHDOG_USEC = "1000000"
METRIC_NAME = re.compile(r"\bdreamcycle_[a-z0-9_]+")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fetch(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def samples(exposition: str) -> dict[str, float]:
    return {
        key: float(value)
        for key, value in (
            line.rsplit(" ", 1)
            for line in exposition.splitlines()
            if line and not line.startswith("#")
        )
    }


@pytest.fixture
def peer(tmp_path: Path) -> Peer:
    peer = Peer(tmp_path / "data", "healthy", tmp_path / "zeitgeist")
    chunks = write_jsonl(tmp_path / "chunks.jsonl", documentation_chunks(["exceptions"], 6))
    peer.dreamcycle("ingest", str(chunks))
    return peer


def test_probes_answer_json_and_readiness_follows_the_backend(peer: Peer) -> None:
    port = free_port()
    settings = {
        "DREAMCYCLE_METRICS_LISTEN": f"127.0.0.1:{port}",
        "DREAMCYCLE_API_ENABLED": "true",
        "DREAMCYCLE_API_PORT": "0",
    }
    base = f"http://127.0.0.1:{port}"
    with peer.start("--interval", "0.3", settings=settings) as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 2, what="two cycles", timeout_s=30)
        assert fetch(f"{base}/healthz") == (200, json.dumps({"status": "alive"}))
        status, body = fetch(f"{base}/readyz")
        ready = json.loads(body)
        assert status == 200, body
        assert ready["status"] == "ready"
        assert {name for name, check in ready["checks"].items() if check["ok"]} == {
            "database", "index", "backend", "storage", "cycle",
        }  # fmt: skip
        assert ready["checks"]["backend"]["last_poll_age_s"] < 30
        assert ready["checks"]["backend"]["last_publish_age_s"] < 30  # the ingested chunks

        exposed = samples(fetch(f"{base}/metrics")[1])
        assert exposed['dreamcycle_backend_up{backend="dir"}'] == 1
        assert exposed["dreamcycle_outbox_entries"] == 0
        assert exposed["dreamcycle_last_poll_success_timestamp_seconds"] > time.time() - 60
        assert exposed["dreamcycle_last_publish_success_timestamp_seconds"] > time.time() - 60
        assert exposed['dreamcycle_phase_duration_seconds_count{phase="scan"}'] >= 2
        # A level (live chunks) is a gauge of its own, not summed into the event counter.
        assert not any('event="live"' in name for name in exposed)

        uds = httpx.HTTPTransport(uds=str(peer.data_dir / "api.sock"))
        with httpx.Client(transport=uds, base_url="http://dreamcycle") as api:
            assert api.get("/healthz").json() == {"status": "alive"}
            assert api.get("/readyz").json()["checks"].keys() == ready["checks"].keys()

            # The shared directory becomes a file: heartbeats and publishing fail.
            peer.zeitgeist_dir.rename(peer.zeitgeist_dir.with_name("zeitgeist.away"))
            peer.zeitgeist_dir.write_text("not a directory")

            def backend_down() -> dict[str, Any] | None:
                answer = api.get("/readyz")
                document: dict[str, Any] = answer.json()
                return document if answer.status_code == 503 else None

            down = wait_until(backend_down, what="/readyz to report the backend", timeout_s=30)
            assert down["status"] == "not ready"
            assert not down["checks"]["backend"]["ok"]
            assert "zeitgeist" in down["checks"]["backend"]["error"]
            assert down["checks"]["database"]["ok"] and down["checks"]["index"]["ok"]
            assert fetch(f"{base}/readyz")[0] == 503
            assert samples(fetch(f"{base}/metrics")[1])["dreamcycle_ready"] == 0

            peer.zeitgeist_dir.unlink()
            peer.zeitgeist_dir.with_name("zeitgeist.away").rename(peer.zeitgeist_dir)
            wait_until(
                lambda: api.get("/readyz").status_code == 200,
                what="/readyz to recover with the backend",
                timeout_s=30,
            )
        assert daemon.terminate() == 0


def test_the_watchdog_starves_while_a_cycle_is_stuck_and_is_fed_again(
    peer: Peer, tmp_path: Path
) -> None:
    address = str(tmp_path / "notify.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    listener.bind(address)
    listener.settimeout(0.1)
    messages: list[str] = []

    def drain() -> list[str]:
        fresh: list[str] = []
        try:
            while True:
                fresh.append(listener.recv(4096).decode())
        except TimeoutError:
            pass
        messages.extend(fresh)
        return fresh

    def pings_within(seconds: float) -> int:
        return len(ping_times_within(seconds))

    def ping_times_within(seconds: float) -> list[float]:
        drain()
        deadline = time.monotonic() + seconds
        times: list[float] = []
        while time.monotonic() < deadline:
            times.extend(time.monotonic() for m in drain() if "WATCHDOG=1" in m)
        return times

    settings = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": WATCHDOG_USEC}
    try:
        with peer.start("--interval", "0.2", settings=settings) as daemon:
            daemon.wait_ready()
            # A first cycle slowed by a busy machine may hold the feeding back for a moment.
            wait_until(lambda: pings_within(1.5) >= 2, what="the watchdog fed", timeout_s=30)
            # Another process holds the write lock: the cycle's next write waits on it
            # (for up to the 10 s busy timeout), in one step, longer than the watchdog's 1 s.
            # A step slowed by a busy machine may starve the watchdog briefly on its own
            # first, so the test looks for the long silence only the lock can explain.
            holder = sqlite3.connect(peer.database_path, isolation_level=None, timeout=30)
            try:
                holder.execute("BEGIN IMMEDIATE")
                held_from = time.monotonic()
                held_for = 7.0
                pings = ping_times_within(held_for)
                held_until = time.monotonic()
                assert "cycle stuck; watchdog no longer fed" in daemon.log()
                edges = [held_from, *pings, held_until]
                longest_silence = max(b - a for a, b in itertools.pairwise(edges))
                assert longest_silence >= 3.0, (pings, held_from)
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            wait_until(lambda: pings_within(0.6) > 0, what="the watchdog fed again", timeout_s=15)
            assert "cycle moving again; watchdog fed" in daemon.log()
            assert daemon.terminate() == 0
    finally:
        listener.close()


def test_readiness_ages_out_without_a_finished_cycle(tmp_path: Path, peer: Peer) -> None:
    now = {"ms": 1_000_000}
    health = Health(peer.database_path, cycle_interval_s=30.0, now_ms=lambda: now["ms"])
    health.index_loaded = True
    health.backend = BackendHealth("dir")
    assert health.readiness()[0] == 200
    now["ms"] += int(health.max_cycle_age_s() * 1000) + 1
    status, document = health.readiness()
    assert status == 503
    assert document["checks"]["cycle"]["error"].startswith("no cycle finished in")
    health.cycle_finished("failed")  # a failed cycle is no progress
    assert health.readiness()[0] == 503
    health.cycle_finished("done")
    assert health.readiness()[0] == 200
    missing = Health(tmp_path / "absent.db", cycle_interval_s=30.0, now_ms=lambda: now["ms"])
    missing.index_loaded = True
    assert "does not exist" in missing.readiness()[1]["checks"]["database"]["error"]
    assert not (tmp_path / "absent.db").exists()


def exposed_names() -> set[str]:
    names: set[str] = set()
    for family in metrics.REGISTRY.collect():
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_count", "_sum"),
        }.get(family.type, ("",))
        names.update(family.name + suffix for suffix in suffixes)
    return names


@pytest.mark.parametrize("file_name", ["dreamcycle-alerts.yml", "dreamcycle-dashboard.json"])
def test_alerts_and_dashboard_name_only_exposed_metrics(file_name: str) -> None:
    named = set(METRIC_NAME.findall((SCRIPTS / file_name).read_text(encoding="utf-8")))
    assert len(named) >= 6
    assert named <= exposed_names(), named - exposed_names()
    if file_name.endswith(".json"):
        json.loads((SCRIPTS / file_name).read_text(encoding="utf-8"))


def test_counters_end_in_total_and_durations_name_their_unit() -> None:
    for family in metrics.REGISTRY.collect():
        if family.type == "counter":
            assert not family.name.endswith("_total")  # the client adds it once
        if family.type == "histogram":
            assert family.name.endswith("_seconds"), family.name
