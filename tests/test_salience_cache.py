"""The salience cache: loaded from the store in batches, topped up with chunks saved since,
and restored whole when a step inside `atomic` raises."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamcycle.store import salience as salience_module
from dreamcycle.store import tiers
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.salience import SalienceCache

NOW_MS = 1_700_000_000_000
POLICIES = ("auto_prune", "manual_only", "never")


class StepFailed(Exception):
    pass


def _store(tmp_path: Path, count: int) -> tuple[Database, list[int]]:
    db = Database(tmp_path / "store.db")
    with db.transaction():
        added = db.add_observations(
            [
                NewObservation(content=f"chunk {i}", deletion_policy=POLICIES[i % 3])
                for i in range(count)
            ],
            now_ms=NOW_MS,
        )
        rowids = [a.rowid for a in added]
        db.write_salience({rowid: 0.1 + i / 100 for i, rowid in enumerate(rowids)})
        tiers.move_to_cold(db, rowids[1::4], reason="test", now_ms=NOW_MS)
        db.tombstone(
            added[2].content_hash,
            reason="test",
            origin_peer="p1",
            now_ms=NOW_MS,
            collectable_after_ms=None,
            journal_seq=None,
        )
    return db, rowids


def _seen(cache: SalienceCache, labels: list[int]) -> dict[str, Any]:
    """Everything the cache answers about `labels` (and one label past them)."""
    salience, pinned, protected, tombstoned = cache.sweep_view(labels)
    known = [label for label in labels if not cache.is_tombstoned(label)]
    return {
        "salience": {label: cache.salience(label) for label in known},
        "floor": {label: cache.pin_floor(label) for label in known},
        "policy": {label: cache.deletion_policy(label) for label in known},
        "tombstoned": [cache.is_tombstoned(label) for label in [*labels, max(labels) + 1]],
        "cold": [cache.is_cold(label) for label in labels],
        "any_cold": cache.any_cold(),
        "live": cache.live(),
        "view": [a.tolist() for a in (salience, pinned, protected, tombstoned)],
    }


def test_the_cache_reads_what_the_store_holds_in_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, rowids = _store(tmp_path, 9)
    try:
        whole = _seen(SalienceCache(db), rowids)
        monkeypatch.setattr(salience_module, "LOAD_BATCH", 2)
        assert _seen(SalienceCache(db), rowids) == whole
        assert whole["salience"][rowids[0]] == pytest.approx(0.1)
        assert whole["policy"][rowids[1]] == "manual_only"
        assert whole["tombstoned"] == [i == 2 for i in range(9)] + [True]
        assert whole["cold"] == [i % 4 == 1 for i in range(9)]
        assert whole["live"] == [r for i, r in enumerate(rowids) if i != 2 and i % 4 != 1]
        salience, pinned, protected, tombstoned = whole["view"]
        assert protected == [i % 3 != 0 for i in range(9)]
        assert tombstoned == whole["tombstoned"][:-1]
        assert salience[2] == pytest.approx(0.12) and not any(pinned)
    finally:
        db.close()


def test_a_chunk_saved_after_the_load_is_found_when_first_met(tmp_path: Path) -> None:
    db, rowids = _store(tmp_path, 3)
    try:
        cache = SalienceCache(db)
        with db.transaction():
            (added,) = db.add_observations([NewObservation(content="later")], now_ms=NOW_MS)
        assert added.rowid > max(rowids)
        assert not cache.is_tombstoned(added.rowid)
        assert (
            cache.salience(added.rowid)
            == db.fetch_all("SELECT salience FROM observations WHERE id = ?", (added.rowid,))[0][0]
        )
        assert added.rowid in cache.live()
        with pytest.raises(KeyError):
            cache.salience(added.rowid + 1)
    finally:
        db.close()


def test_a_failed_step_leaves_the_cache_as_it_was(tmp_path: Path) -> None:
    db, rowids = _store(tmp_path, 12)
    rng = random.Random(5)
    try:
        cache = SalienceCache(db)
        for step in range(40):
            before = _seen(cache, rowids)
            dirty_before = dict(cache._dirty)
            fails = step % 2 == 0
            expected = pytest.raises(StepFailed) if fails else contextlib.nullcontext()
            with expected, db.transaction(), cache.atomic():
                for _ in range(6):
                    label = rng.choice(rowids)
                    change = rng.randrange(4)
                    if change == 0:
                        cache.set_salience(label, rng.random())
                    elif change == 1:
                        cache.set_pin_floor(label, rng.choice([0.0, 0.5]))
                    elif change == 2:
                        cache.set_cold(label, rng.random() < 0.5)
                    else:
                        cache.mark_tombstoned(label)
                if fails:
                    raise StepFailed
            if fails:
                assert _seen(cache, rowids) == before
                assert cache._dirty == dirty_before
        with db.transaction():
            assert cache.flush() > 0
            assert cache.flush() == 0
        written = dict(db.fetch_all("SELECT id, salience FROM observations"))
        assert all(
            written[label] == pytest.approx(cache.salience(label))
            for label in rowids
            if not cache.is_tombstoned(label)
        )
        assert np.isfinite(list(written.values())).all()
    finally:
        db.close()


def test_a_chunk_beyond_the_loaded_columns_grows_them_as_it_is_read(tmp_path: Path) -> None:
    db = Database(tmp_path / "empty.db")
    try:
        # Nothing loaded: columns of no rows, each grown by the first read that meets the chunk.
        caches = [SalienceCache(db) for _ in range(3)]
        with db.transaction():
            (added,) = db.add_observations(
                [NewObservation(content="first", deletion_policy="never")], now_ms=NOW_MS
            )
            db.write_salience({added.rowid: 0.5})
        assert caches[0].salience(added.rowid) == 0.5
        assert caches[1].pin_floor(added.rowid) == 0.0
        assert caches[2].deletion_policy(added.rowid) == "never"
    finally:
        db.close()
