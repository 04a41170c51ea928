"""A peer's start on a saved index: what it reads, and what overlaps what."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon import runtime
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.store import index_file
from dreamcycle.store.database import Database
from dreamcycle.store.salience import SalienceCache
from tests.phase_helpers import START_MS, fresh_peer, opened_peer

#: Long enough for any salience read of a test store; only a failing test waits it out.
WAIT_FOR_SALIENCE_S: Final = 5.0


def test_salience_is_read_while_the_index_file_is_hashed(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        peer.save_index()
        admitted = {label: peer.salience.salience(label) for label in peer.salience.live()}
    assert admitted

    salience_read = threading.Event()
    waited: list[bool] = []

    class SalienceCacheSaying(SalienceCache):
        def __init__(self, db: Database) -> None:
            super().__init__(db)
            salience_read.set()

    real_checksum = index_file._checksum

    def checksum_after_the_salience(descriptor: int) -> Any:
        waited.append(salience_read.wait(WAIT_FOR_SALIENCE_S))
        return real_checksum(descriptor)

    monkeypatch.setattr(runtime, "SalienceCache", SalienceCacheSaying)
    monkeypatch.setattr(index_file, "_checksum", checksum_after_the_salience)
    with opened_peer(tmp_path, clock) as reopened:
        assert reopened.index_rebuild_reason is None  # loaded as saved
        assert waited == [True]
        assert {label: reopened.salience.salience(label) for label in admitted} == admitted
        assert reopened.salience.live() == list(admitted)
