"""An idle poll costs one request, however many peers share the log."""

from __future__ import annotations

import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.log import Heartbeat, Zeitgeist
from dreamcycle.zeitgeist.object_keys import segment_key
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


def test_keys_known_applied_are_not_asked_about_again(tmp_path) -> None:
    """A poll asks whether a listed key was applied once per key; an unapplied key is
    asked about at every poll until it is applied, and a key that left the window is
    forgotten."""
    from dreamcycle.zeitgeist.directory import DirectoryBackend

    backend = DirectoryBackend(tmp_path / "log")
    now = [1_700_000_000_000]
    clock = HybridLogicalClock(lambda: now[0])
    keys = [segment_key(clock.now(), f"peer{i}", 1) for i in range(5)]
    for key in keys:
        backend.create(key, b"segment")
    reader = Zeitgeist(
        backend, "reader", HybridLogicalClock(lambda: now[0]), wall_ms=lambda: now[0]
    )
    applied = set(keys[:3])
    asked: list[str] = []

    def is_applied(key: str) -> bool:
        asked.append(key)
        return key in applied

    cursor = clock.now()
    assert reader.poll(cursor, is_applied) == keys[3:]
    assert sorted(asked) == sorted(keys)
    asked.clear()
    assert reader.poll(cursor, is_applied) == keys[3:]
    assert sorted(asked) == sorted(keys[3:])  # the three applied ones are known
    applied.add(keys[3])
    asked.clear()
    assert reader.poll(cursor, is_applied) == keys[4:]
    assert sorted(asked) == sorted(keys[3:])
    asked.clear()
    assert reader.poll(cursor, is_applied) == keys[4:]
    assert asked == [keys[4]]
    # Past the window, the keys are no longer listed, and no longer remembered.
    now[0] += 10 * reader.window_ms
    later = HybridLogicalClock(lambda: now[0]).now()
    assert reader.poll(later, is_applied) == []
    assert reader._known_applied == set()
