"""SIGTERM while the daemon admits a large batch (embedding) or propagates many wide
pulses: the process ends within 10 s, what was applied was applied whole and once, and
the next start goes on from there."""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from pydoc_data.topics import topics

import pytest

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Runtime
from tests.daemon_helpers import DREAMCYCLE, Peer, documentation_chunks, wait_until, write_jsonl
from tests.fault_helpers import STOP_LIMIT_S, admission_consistent, queue_seeded_pulses

pytestmark = pytest.mark.slow

CHUNKS = 240
#: Chunks admitted by the cycle after the restart (one embedding batch).
NEXT_BATCH = 32
#: Time for the admission to be well under way when the signal comes.
INTO_THE_PHASE_S = 1.5


def _stop_during(peer: Peer, phase: str) -> None:
    """Start the daemon, send SIGTERM INTO_THE_PHASE_S after `phase` starts, and check it
    exits 0 within STOP_LIMIT_S."""
    with peer.start("--interval", "0.5", "--log-level", "debug") as daemon:
        wait_until(
            lambda: f"phase started phase={phase}" in daemon.log(),
            what=f"{phase} to start",
            context=daemon.log_tail,
        )
        time.sleep(INTO_THE_PHASE_S)
        stopped_at = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.wait_exit(STOP_LIMIT_S + 5) == 0, daemon.log_tail()
        took_s = time.monotonic() - stopped_at
    assert took_s < STOP_LIMIT_S, f"took {took_s:.1f} s to stop\n{daemon.log_tail()}"


#: Texts per embedding batch during admission: a stop waits for the batch in hand, which on
#: a loaded machine took longer than the daemon's stop deadline at the default size.
ADMISSION_BATCH = "8"


def test_sigterm_during_admission_stops_within_seconds_and_loses_nothing(tmp_path: Path) -> None:
    peer = Peer(
        tmp_path / "a",
        "a",
        tmp_path / "zeitgeist",
        {"DREAMCYCLE_EMBEDDING_BATCH_SIZE": ADMISSION_BATCH},
    )
    rows = documentation_chunks(sorted(topics), CHUNKS)
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "c.jsonl", rows)), "--no-embed")
    _stop_during(peer, "classify")
    admitted = admission_consistent(peer)
    assert admitted < CHUNKS, "admission finished before the signal: nothing was tested"

    peer.run_cli(
        DREAMCYCLE, "run", "--once", settings={"DREAMCYCLE_CYCLE_MAX_EMBED": str(NEXT_BATCH)}
    )
    assert admission_consistent(peer) == admitted + NEXT_BATCH


#: Pulses queued for the propagation phase: wide ones (every chunk within a few hops), so
#: applying them all takes seconds. Once a batch's first hops were asked at once, 600 were
#: all applied before the signal came on a fast machine.
PULSES = 3000
PROPAGATION_CHUNKS = 80
#: No decay and no sweep: salience is a function of the pulses applied and their order.
QUIET = {"DREAMCYCLE_DOWNSCALE_ENABLED": "false", "DREAMCYCLE_SWEEP_ENABLED": "false"}


def _queue_wide_pulses(peer: Peer, count: int) -> None:
    """Wide Reward pulses queued in the peer's data directory, as pulse-emit would."""
    config = load_config(
        None,
        environ=peer.environment(),
        overrides={
            "peer.data_dir": str(peer.data_dir),
            "peer.id": peer.peer_id,
            "zeitgeist.dir": str(peer.zeitgeist_dir),
        },
    )
    rt = Runtime.open(config)
    try:
        # Wide: every chunk within a few hops, so applying them all takes seconds.
        queue_seeded_pulses(rt, count, strength=0.5, k=16, max_hops=6, decay_per_hop=0.06)
    finally:
        rt.close()


def _pulses_applied(peer: Peer) -> int:
    applied = int(peer.scalar("SELECT count(*) FROM applied_pulses WHERE status = 'applied'"))
    journaled = int(peer.scalar("SELECT count(*) FROM journal WHERE kind = 'pulse'"))
    assert applied == journaled, f"{applied} pulses applied, {journaled} journaled"
    return applied


# A minute and more of propagation, twice: left to `make test-long`. The suite checks the
# same promise in process (tests/test_phase_salience_pulse_propagate.py: a stop between
# pulse batches, then the rest applied once, to the salience of an uninterrupted cycle).
@pytest.mark.long
def test_sigterm_during_propagation_stops_within_seconds_and_applies_each_pulse_once(
    tmp_path: Path,
) -> None:
    peer = Peer(tmp_path / "a", "a", tmp_path / "zeitgeist", dict(QUIET))
    rows = documentation_chunks(sorted(topics), PROPAGATION_CHUNKS)
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "c.jsonl", rows)))
    peer.dreamcycle("run", "--once")
    _queue_wide_pulses(peer, PULSES)
    # The same state, with a log of its own: two processes publishing as one peer id in
    # one log are fenced, rightly.
    shutil.copytree(peer.zeitgeist_dir, tmp_path / "reference-zeitgeist")
    reference = peer.copy_to(tmp_path / "reference", zeitgeist_dir=tmp_path / "reference-zeitgeist")
    _stop_during(peer, "salience_pulse_propagate")
    applied = _pulses_applied(peer)
    assert 0 < applied < PULSES, f"{applied} of {PULSES} applied: the signal missed the phase"

    # The next start applies the rest, each once, to the same salience as one uninterrupted
    # cycle over the same queue.
    peer.dreamcycle("run", "--once")
    reference.dreamcycle("run", "--once")
    assert _pulses_applied(peer) == PULSES == _pulses_applied(reference)
    assert peer.salience() == reference.salience()
