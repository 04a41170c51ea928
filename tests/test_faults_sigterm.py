"""SIGTERM while the daemon admits a large batch (embedding): the process ends within
10 s, every chunk admitted is admitted whole, and the next start goes on from there."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from pydoc_data.topics import topics

import pytest

from tests.daemon_helpers import DREAMCYCLE, Peer, documentation_chunks, wait_until, write_jsonl
from tests.fault_helpers import STOP_LIMIT_S, admission_consistent

pytestmark = pytest.mark.slow

CHUNKS = 240
#: Chunks admitted by the cycle after the restart (one embedding batch).
NEXT_BATCH = 32
#: Time for the admission to be well under way when the signal comes.
INTO_THE_PHASE_S = 1.5


def test_sigterm_during_admission_stops_within_seconds_and_loses_nothing(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "a", "a", tmp_path / "zeitgeist")
    rows = documentation_chunks(sorted(topics), CHUNKS)
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "c.jsonl", rows)), "--no-embed")
    with peer.start("--interval", "0.5", "--log-level", "debug") as daemon:
        wait_until(
            lambda: "phase started phase=classify" in daemon.log(),
            what="admission to start",
            context=daemon.log_tail,
        )
        time.sleep(INTO_THE_PHASE_S)
        stopped_at = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.wait_exit(STOP_LIMIT_S + 5) == 0, daemon.log_tail()
        took_s = time.monotonic() - stopped_at
    assert took_s < STOP_LIMIT_S, f"took {took_s:.1f} s to stop\n{daemon.log_tail()}"
    admitted = admission_consistent(peer)
    assert admitted < CHUNKS, "admission finished before the signal: nothing was tested"

    peer.run_cli(
        DREAMCYCLE, "run", "--once", settings={"DREAMCYCLE_CYCLE_MAX_EMBED": str(NEXT_BATCH)}
    )
    assert admission_consistent(peer) == admitted + NEXT_BATCH
