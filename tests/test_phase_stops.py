"""A stop request (SIGTERM, as daemon/service/loop.py passes it to the running phase) ends
publication between segments: what was published stays published, the rest stays queued
and goes out, once, at the next promote. (Downscale's stop: tests/test_downscale_batches.py;
admission and propagation under a real SIGTERM: tests/test_faults_sigterm.py.)"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import promote, run_cycle_blocking
from dreamcycle.daemon.runtime import Runtime
from tests.fault_helpers import queue_seeded_pulses
from tests.test_downscale_batches import DAY_MS, START_MS, _config, template

__all__ = ["template"]  # the fixture, shared with the downscale tests

ENTRIES = 35
PER_SEGMENT = 10


def test_publication_stopped_between_segments_publishes_the_rest_once_next_time(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(template, tmp_path / "copy")
    monkeypatch.setattr(promote, "MAX_ENTRIES_PER_SEGMENT", PER_SEGMENT)
    clock = ManualClock(START_MS + DAY_MS)
    rt = Runtime.open(_config(tmp_path / "copy"), clock=clock)
    try:
        queue_seeded_pulses(rt, ENTRIES, strength=0.1, k=3, max_hops=1, decay_per_hop=0.3)
        peer = rt.open_peer()

        def unpublished() -> int:
            return int(rt.db.fetch_one("SELECT count(*) FROM outbox WHERE segment_seq IS NULL")[0])

        assert unpublished() == ENTRIES
        # The stop request comes once the first segment is out (as SIGTERM could).
        published_one: list[bool] = []
        publish = promote.publish

        def publish_then_stop(*args: Any) -> None:
            publish(*args)
            published_one.append(True)

        monkeypatch.setattr(promote, "publish", publish_then_stop)
        st = run_cycle_blocking(peer, stop_requested=lambda: bool(published_one))
        assert st.stats["salience_pulse_propagate"]["applied"] == ENTRIES
        assert st.stats["promote"]["published_entries"] == PER_SEGMENT, st.stats["promote"]
        assert unpublished() == ENTRIES - PER_SEGMENT
        monkeypatch.setattr(promote, "publish", publish)
        resumed = run_cycle_blocking(peer).stats["promote"]
        assert resumed["published_entries"] == ENTRIES - PER_SEGMENT
        assert unpublished() == 0
        # Each entry in exactly one published segment.
        placed = rt.db.fetch_all(
            "SELECT o.entry_id, s.status FROM outbox o JOIN segments_out s ON s.seq = o.segment_seq"
        )
        assert len(placed) == len({e for e, _ in placed}) >= ENTRIES
        assert {status for _, status in placed} == {"published"}
        peer.close()
    finally:
        rt.close()
