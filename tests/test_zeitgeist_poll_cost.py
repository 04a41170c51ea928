"""An idle poll costs one request, however many peers share the log."""

from __future__ import annotations

import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.keys import segment_key
from dreamcycle.zeitgeist.log import Heartbeat, Zeitgeist
from tests.conftest import make_backend

PEERS = 20


@pytest.mark.parametrize("kind", ["s3", "redis"])
def test_idle_poll_is_one_request_with_twenty_peers(
    request: pytest.FixtureRequest, kind: str, tmp_path
) -> None:
    backend = make_backend(request, kind, tmp_path)
    wall_ms = SystemClock().now_ms
    clock = HybridLogicalClock(wall_ms)
    for index in range(PEERS):
        peer_id = f"peer{index}"
        Zeitgeist(backend, peer_id, HybridLogicalClock(wall_ms), wall_ms=wall_ms).heartbeat(
            Heartbeat(
                peer_id=peer_id,
                cursor_hlc=clock.now(),
                last_seen_ms=wall_ms(),
                index_version="v1",
                public_key=None,
                seq=index,
            )
        )
        backend.create(segment_key(clock.now(), peer_id, 1), b"segment")
    reader = Zeitgeist(backend, "reader", HybridLogicalClock(wall_ms), wall_ms=wall_ms)
    counter = backend.requests  # type: ignore[attr-defined]
    counter.reset()
    assert reader.poll(clock.now(), is_applied=lambda key: True) == []
    assert counter.total() == 1, counter.snapshot()
