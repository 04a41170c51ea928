"""Values recall caches inside a write transaction are dropped when it rolls back: the
stamp they carry can come back with other rows after a later commit."""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import NewObservation


class Refused(Exception):
    pass


def _runtime(tmp_path: Path) -> Runtime:
    config = load_config(
        None,
        environ={},
        overrides={"peer.data_dir": str(tmp_path / "data"), "peer.id": "p1", "metrics.listen": ""},
    )
    return Runtime.open(config, clock=ManualClock(1_700_000_000_000))


def test_a_rollback_empties_the_recall_cache_and_a_commit_keeps_it(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    try:
        with rt.db.transaction():
            recall_state(rt).cache.put("tiers", rt.db.change_stamp(), "committed")
        assert recall_state(rt).cache.entries, "a commit must not drop what is cached"
        with pytest.raises(Refused), rt.db.transaction():
            rt.db.add_observations([NewObservation(content="undone")], now_ms=rt.clock.now_ms())
            inside = rt.db.change_stamp()
            recall_state(rt).cache.put("tiers", inside, "seen only inside")
            raise Refused
        assert recall_state(rt).cache.entries == {}
        # The same stamp, reached again by a commit of another chunk, finds nothing cached.
        with rt.db.transaction():
            rt.db.add_observations([NewObservation(content="kept")], now_ms=rt.clock.now_ms())
        assert rt.db.change_stamp() == inside
        assert recall_state(rt).cache.get("tiers", inside) is None
    finally:
        rt.close()


def test_reads_do_not_empty_the_recall_cache(tmp_path: Path) -> None:
    rt = _runtime(tmp_path)
    try:
        stamp = rt.db.change_stamp()
        recall_state(rt).cache.put("tiers", stamp, "kept")
        with rt.db.snapshot():
            rt.db.change_stamp()
        assert recall_state(rt).cache.get("tiers", stamp) == "kept"
    finally:
        rt.close()


def test_a_runtime_made_from_another_keeps_both_caches_emptied(tmp_path: Path) -> None:
    """A runtime made with dataclasses.replace shares the connection: a rollback empties
    its cache and the original's."""
    import dataclasses

    rt = _runtime(tmp_path)
    try:
        other = dataclasses.replace(rt)
        recall_state(rt).cache.put("tiers", "s", "original")
        recall_state(other).cache.put("tiers", "s", "other")
        with pytest.raises(Refused), rt.db.transaction():
            raise Refused
        assert recall_state(rt).cache.entries == {}
        assert recall_state(other).cache.entries == {}
    finally:
        rt.close()
