"""kill -9 at random moments loses nothing and applies nothing twice.

A generator publishes a log of pulse segments into a local-directory zeitgeist.
Peer b follows it as a real daemon that is SIGKILLed and restarted over and
over; peer c, holding the same chunks, follows an identical copy of the log
without interruption. When b has caught up, it must have applied every pulse
exactly once and hold salience identical to c's, float for float. The log is far over
the generator's budget per window: b, batched differently by every kill, admits exactly
the pulses c admits, the longest prefix of each window that fits the budget.
"""

from __future__ import annotations

import random
import shutil
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.clock import SystemClock
from dreamcycle.pulses.budget import admit_within_budget
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import PulseEntry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.signing import Signer, generate_key
from tests.daemon_helpers import (
    STOP_TIMEOUT_S,
    Daemon,
    Peer,
    documentation_chunks,
    trust_key,
    wait_until,
    write_jsonl,
)

pytestmark = pytest.mark.slow

TOPICS = ("typesmapping", "typesseq")
CHUNK_COUNT = 100
GENERATOR = "gen"
SEGMENTS = 30
PULSES_PER_SEGMENT = (2, 5)
STRENGTH_RANGE = (0.05, 0.6)
SEED = 20260408
MIN_KILLS = 15
#: A life of b lasts this long (seconds) before SIGKILL: some die starting, some mid-cycle.
LIFETIME_S = (0.2, 1.4)
#: Kills stop here even if b has not caught up (a loaded machine starts processes slowly).
MAX_KILLS = 30
INTERVAL_S = "0.2"
#: The last life may apply most of the 30 segments, one a cycle: on a busy machine cycles
#: take seconds each.
CATCH_UP_TIMEOUT_S = 240.0
#: One segment per cycle, so catching up takes many cycles and kills land in the middle.
#: No downscale and no sweep: salience is a function of the applied pulses alone. Cycles
#: at normal CPU priority: under SCHED_IDLE beside processes that keep both cores busy,
#: each step waits seconds to be raised, and thirty cycles outlast the catch-up's timeout
#: (what is tested here is what a kill leaves, not the cycle's priority).
SETTINGS = {
    "DREAMCYCLE_CYCLE_MAX_SEGMENTS": "1",
    "DREAMCYCLE_CYCLE_CPU_PRIORITY": "normal",
    "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
    "DREAMCYCLE_SWEEP_ENABLED": "false",
    "DREAMCYCLE_ZEITGEIST_COMPACTION_INTERVAL_S": "1e9",
}
EXIT_OK = 0
#: SIGTERM must stop a daemon's work this fast (its interpreter's exit after that is
#: bounded by the generous STOP_TIMEOUT_S: on a loaded machine it alone took over 5 s).
STOP_WITHIN_S = 5.0


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """Chunks ingested and embedded, no cycle run: b and c start from copies of this."""
    root = tmp_path_factory.mktemp("crash")
    peer = Peer(root / "template", "b", root / "unused-zeitgeist", dict(SETTINGS))
    peer.dreamcycle(
        "ingest", str(write_jsonl(root / "chunks.jsonl", documentation_chunks(TOPICS, CHUNK_COUNT)))
    )
    return peer


def publish_pulse_log(
    directory: Path, peer: Peer, rng: random.Random, signer: Signer
) -> list[SalientPulse]:
    """SEGMENTS segments of Reward/Decay pulses seeded at the peer's chunks, signed by
    `signer`; the pulses, in the order published."""
    seeds = list(peer.embeddings().values())
    index_version = str(
        peer.scalar(
            "SELECT DISTINCT index_version FROM observations WHERE index_version IS NOT NULL"
        )
    )
    wall_ms = SystemClock().now_ms
    clock = HybridLogicalClock(wall_ms)
    log = Zeitgeist(DirectoryBackend(directory), GENERATOR, clock, wall_ms=wall_ms, signer=signer)
    published: list[SalientPulse] = []
    for seq in range(1, SEGMENTS + 1):
        entries = []
        for _ in range(rng.randint(*PULSES_PER_SEGMENT)):
            ts = clock.now()
            pulse = SalientPulse(
                seed_embedding=seeds[rng.randrange(len(seeds))],
                kind=rng.choice([PulseKind.REWARD, PulseKind.DECAY]),
                strength=round(rng.uniform(*STRENGTH_RANGE), 3),
                sigma=defaults.PULSE_SIGMA,
                max_hops=defaults.PULSE_MAX_HOPS,
                k=defaults.PULSE_K,
                decay_per_hop=defaults.PULSE_DECAY_PER_HOP,
                ts=ts,
                origin_peer=GENERATOR,
                reason="crash/replay",
                ttl_s=defaults.PULSE_TTL_S,
                index_version=index_version,
            ).with_id()
            entries.append(PulseEntry(hlc=ts, origin=GENERATOR, pulse=pulse))
            published.append(pulse)
        log.publish(log.prepare(entries, seq))
    return published


def within_budget(pulses: list[SalientPulse]) -> set[str]:
    """The pulse ids the budget admits: per window of the pulses' time, the longest prefix
    whose bounds fit (pulses/budget.py)."""
    window_ms = int(defaults.PULSE_BUDGET_WINDOW_S * 1000)
    windows: dict[int, list[SalientPulse]] = {}
    for pulse in pulses:
        windows.setdefault(HybridLogicalClock.physical_ms(pulse.ts) // window_ms, []).append(pulse)
    return {
        admitted.pulse_id
        for window in windows.values()
        for admitted in admit_within_budget(window, defaults.PULSE_ORIGIN_BUDGET).admitted
    }


def applied(peer: Peer) -> int:
    return (
        int(peer.scalar("SELECT count(*) FROM applied_pulses"))
        if peer.database_path.exists()
        else 0
    )


def test_kill_9_loses_nothing_and_applies_nothing_twice(template: Peer, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    generated = tmp_path / "generated-log"
    generator = Signer(GENERATOR, generate_key())
    published = publish_pulse_log(generated, template, rng, generator)
    pulse_ids = [pulse.pulse_id for pulse in published]
    admitted = within_budget(published)
    assert 0 < len(admitted) < len(published), "the log must go over the budget"
    for name in ("b", "c"):
        shutil.copytree(generated, tmp_path / f"zeitgeist-{name}")
    b = template.copy_to(tmp_path / "b", zeitgeist_dir=tmp_path / "zeitgeist-b")
    c = template.copy_to(tmp_path / "c", peer_id="c", zeitgeist_dir=tmp_path / "zeitgeist-c")
    for receiver in (b, c):
        trust_key(receiver.keyring_path, generator)
    total = len(pulse_ids)

    with c.start("--interval", INTERVAL_S, name="reference c") as reference:
        kills = 0
        while kills < MIN_KILLS or (applied(b) < total and kills < MAX_KILLS):
            with b.start("--interval", INTERVAL_S, name=f"b, life {kills + 1}") as victim:
                time.sleep(rng.uniform(*LIFETIME_S))
                assert victim.returncode() is None, victim.log_tail()
                victim.kill()
            kills += 1
        # However far the kills let it get, b now finishes undisturbed and stops cleanly.
        with b.start("--interval", INTERVAL_S, name="b, last life") as survivor:
            survivor.wait_ready()
            wait_until(
                lambda: applied(b) == total,
                what="b to catch up",
                context=survivor.log_tail,
                timeout_s=CATCH_UP_TIMEOUT_S,
            )
            assert survivor.terminate() == EXIT_OK
        wait_until(
            lambda: applied(c) == total, what="c to apply the whole log", context=reference.log_tail
        )
        assert reference.terminate() == EXIT_OK

    statuses = b.query("SELECT pulse_id, status FROM applied_pulses")
    expected = [(i, "applied" if i in admitted else "rejected") for i in pulse_ids]
    assert sorted(statuses) == sorted(expected)
    assert sorted(c.query("SELECT pulse_id, status FROM applied_pulses")) == sorted(expected)
    refusals = b.query("SELECT reason FROM applied_pulses WHERE status = 'rejected'")
    assert all(str(reason).startswith("over_budget") for (reason,) in refusals), refusals
    journal = b.query("SELECT ref, count(*) FROM journal WHERE kind = 'pulse' GROUP BY ref")
    assert sorted(journal) == sorted((pulse_id, 1) for pulse_id in admitted)
    assert b.scalar("SELECT count(*) FROM seen_entries WHERE kind = 'salience_pulse'") == total
    assert (
        b.scalar(
            "SELECT count(*) FROM applied_segments WHERE key LIKE ?", (f"seg/%-{GENERATOR}-%",)
        )
        == SEGMENTS
    )

    b_salience, c_salience = b.salience(), c.salience()
    assert len(b_salience) == CHUNK_COUNT
    assert sum(value != 1.0 for value in b_salience.values()) > CHUNK_COUNT // 4, (
        "pulses had no effect"
    )
    differing = {
        h: (b_salience[h].hex(), c_salience[h].hex())
        for h in b_salience
        if b_salience[h] != c_salience[h]
    }
    assert not differing, f"{len(differing)} chunks differ between b and c: {differing}"
    assert np.array_equal(
        np.array([b_salience[h] for h in sorted(b_salience)]),
        np.array([c_salience[h] for h in sorted(c_salience)]),
    )


def test_sigterm_stops_a_running_daemon_promptly(template: Peer, tmp_path: Path) -> None:
    peer = template.copy_to(tmp_path / "d", zeitgeist_dir=tmp_path / "zeitgeist")
    daemon: Daemon
    with peer.start("--interval", INTERVAL_S) as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 3, what="three cycles", context=daemon.log_tail)
        started = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        wait_until(
            lambda: "daemon stopped" in daemon.log(),
            what="the daemon to stop",
            timeout_s=STOP_WITHIN_S,
            context=daemon.log_tail,
        )
        elapsed = time.monotonic() - started
        code = daemon.wait_exit(STOP_TIMEOUT_S)  # a second SIGTERM would end its exit early
    assert code == EXIT_OK, daemon.log_tail()
    assert elapsed < STOP_WITHIN_S
    log = daemon.log()
    assert "stop requested" in log
    assert "daemon stopped" in log
    assert peer.scalar("SELECT count(*) FROM cycles WHERE status = 'running'") == 0
    # The index was saved on the way out: the next start loads it instead of rebuilding.
    with peer.start("--once") as again:
        assert again.wait_exit() == EXIT_OK, again.log_tail()
    assert "index rebuilt" not in again.log()
