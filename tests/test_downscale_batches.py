"""Downscale commits in batches and decays exactly as one transaction did.

Two copies of one store (real chunks, spread salience and pin floors, two kinds) are
decayed after the same elapsed time, one in batches of a few chunks, one all at once:
every salience and every last-decay time must be equal, the step journaled once, and
a write from another connection must get in between two batches.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import CycleState, downscale, run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.daemon.memory.rebuild import replay_steps
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.decay import due_for_decay
from dreamcycle.pulses.sweep import InvalidSweep
from dreamcycle.store.database import EFFICACY_TYPE, Database, DecayCandidate, NewObservation
from dreamcycle.store.timefmt import iso_from_ms, ms_from_iso
from tests.daemon_helpers import documentation_chunks

START_MS = 1_800_000_000_000
DAY_MS = 86_400_000
CHUNKS = 60
SMALL_BATCH = 7


def _config(root: Path) -> Config:
    return load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(root / "data"),
            "peer.id": "decay",
            "metrics.listen": "",
            "sweep.enabled": False,
            "zeitgeist.dir": str(root / "zeitgeist"),
            # Cycles days apart decay the whole gap (the bound: tests/test_clock_jumps.py).
            "clock.max_step_s": 3 * DAY_MS / 1000,
        },
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("downscale")
    rt = Runtime.open(_config(root), clock=ManualClock(START_MS))
    items = [
        NewObservation(
            content=c["content"][:200],
            kind="fact" if i % 2 else "note",
            pin_floor=0.2 if i % 5 == 0 else 0.0,
        )
        for i, c in enumerate(documentation_chunks(("compound",), limit=CHUNKS))
    ]
    ingest(rt, [items])
    peer = rt.open_peer()
    run_cycle_blocking(peer)
    rng = np.random.default_rng(3)
    rowids = [int(r[0]) for r in rt.db.fetch_all("SELECT id FROM observations ORDER BY id")]
    with rt.db.transaction():
        rt.db.write_salience({r: float(rng.uniform(0.0, 1.0)) for r in rowids})
    peer.close()
    rt.close()
    return root


def _decayed_copy(template: Path, target: Path, batch: int, patch: pytest.MonkeyPatch) -> Peer:
    shutil.copytree(template, target)
    patch.setattr(downscale, "DOWNSCALE_ROWS_PER_TRANSACTION", batch)
    clock = ManualClock(START_MS + 3 * DAY_MS)
    peer = Runtime.open(_config(target), clock=clock).open_peer()
    peer.salience.reload()
    downscale.run(peer, CycleState(now_ms=clock.now_ms()))
    return peer


def _state(db: Database) -> list[tuple[int, float, str]]:
    """Every memory chunk's salience and last decay (the daemon's own records never decay)."""
    return [
        (int(r[0]), float(r[1]), str(r[2]))
        for r in db.fetch_all(
            "SELECT id, salience, last_decay_ts FROM observations WHERE type != ? ORDER BY id",
            (EFFICACY_TYPE,),
        )
    ]


@pytest.fixture
def decayed(template: Path, tmp_path: Path) -> Iterator[tuple[Peer, Peer]]:
    with pytest.MonkeyPatch.context() as patch:
        batched = _decayed_copy(template, tmp_path / "batched", SMALL_BATCH, patch)
        whole = _decayed_copy(template, tmp_path / "whole", CHUNKS * 10, patch)
    try:
        yield batched, whole
    finally:
        batched.close()
        whole.close()


def test_batched_downscale_equals_one_transaction(
    template: Path, decayed: tuple[Peer, Peer]
) -> None:
    batched, whole = decayed
    state = _state(batched.db)
    assert len(state) == CHUNKS and state == _state(whole.db)
    # It did decay: every chunk is marked decayed now, and salience moved.
    assert {ts for _, _, ts in state} == {iso_from_ms(START_MS + 3 * DAY_MS)}
    original = Database(_config(template).database_path, prepare=False)
    try:
        before = _state(original)
    finally:
        original.close()
    assert sum(s < b for (_, s, _), (_, b, _) in zip(state, before, strict=True)) > CHUNKS // 2
    assert batched.db.journal_counts()["downscale"] == whole.db.journal_counts()["downscale"]


def test_each_transaction_decays_one_batch(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A writer waits for the lock at most one batch: each batch is a transaction."""
    shutil.copytree(template, tmp_path / "data-copy")
    monkeypatch.setattr(downscale, "DOWNSCALE_ROWS_PER_TRANSACTION", SMALL_BATCH)
    clock = ManualClock(START_MS + DAY_MS)
    peer = Runtime.open(_config(tmp_path / "data-copy"), clock=clock).open_peer()
    begun: list[str] = []
    batch_sizes: list[int] = []
    original = downscale.decay_batch

    def traced(cursor: object, sql: str, bindings: object) -> bool:
        if sql.startswith("BEGIN"):
            begun.append(sql)
        return True

    def batch(
        peer: Peer, now_ms: int, rows: Sequence[DecayCandidate], half_lives: HalfLives
    ) -> int:
        assert peer.db.conn.in_transaction
        batch_sizes.append(len(rows))
        return original(peer, now_ms, rows, half_lives)

    monkeypatch.setattr(downscale, "decay_batch", batch)
    try:
        peer.salience.reload()
        peer.db.conn.exec_trace = traced
        result = downscale.run(peer, CycleState(now_ms=clock.now_ms()))
        peer.db.conn.exec_trace = None
        assert result["decayed"] == CHUNKS == sum(batch_sizes)
        assert max(batch_sizes) == SMALL_BATCH
        assert len(begun) == len(batch_sizes) == -(-CHUNKS // SMALL_BATCH)
    finally:
        peer.close()


# ---- the cadence: due chunks only, the longest waiting first, a bounded number -----------


def test_due_for_decay_orders_by_wait_and_cuts_at_the_limit() -> None:
    decayed_at = {5: 1_000, 3: 1_000, 9: 500, 7: 4_000, 1: 3_500}
    assert due_for_decay(decayed_at, 4_000, 500, None) == [9, 3, 5, 1]
    assert due_for_decay(decayed_at, 4_000, 500, 2) == [9, 3]
    assert due_for_decay(decayed_at, 4_000, 0, None) == [9, 3, 5, 1, 7]
    assert due_for_decay(decayed_at, 4_000, 10_000, None) == []
    with pytest.raises(InvalidSweep, match="min_step_ms must be >= 0"):
        due_for_decay(decayed_at, 4_000, -1, None)
    with pytest.raises(InvalidSweep, match="limit must be >= 1"):
        due_for_decay(decayed_at, 4_000, 0, 0)


def _decay_from(db: Database) -> dict[int, int]:
    return {
        int(r[0]): ms_from_iso(str(r[1]))
        for r in db.fetch_all(
            "SELECT id, coalesce(last_decay_ts, created_at) FROM observations WHERE type != ?",
            (EFFICACY_TYPE,),
        )
    }


def test_a_capped_step_decays_the_due_chunks_the_rule_names_and_replay_agrees(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(template, tmp_path / "copy")
    config = _config(tmp_path / "copy")
    config.downscale.min_step_s = 3_600.0
    config.downscale.max_chunks_per_cycle = 25
    monkeypatch.setattr(downscale, "DOWNSCALE_ROWS_PER_TRANSACTION", SMALL_BATCH)
    clock = ManualClock(START_MS + DAY_MS)
    peer = Runtime.open(config, clock=clock).open_peer()
    try:
        peer.salience.reload()
        counts = []
        minute = 60_000
        for offset in (0, minute, 2 * minute, 3 * minute, 60 * minute + minute // 2):
            now = START_MS + DAY_MS + offset
            before = _decay_from(peer.db)
            expected = due_for_decay(before, now, 3_600_000, 25)
            result = downscale.run(peer, CycleState(now_ms=now))
            after = _decay_from(peer.db)
            decayed = sorted(r for r in after if after[r] != before[r])
            assert result["decayed"] == len(expected)
            assert decayed == sorted(expected)
            assert all(after[r] == now for r in decayed)
            counts.append(len(decayed))
        # All 60 waited a day: the cap takes 25, 25 and the last 10 a minute apart; then
        # none is due; an hour and a half minute later, only the first 25 are again.
        assert counts == [25, 25, CHUNKS - 50, 0, 25]
        replayed = replay_steps(peer.runtime)
        assert replayed.decayed_at == _decay_from(peer.db)
    finally:
        peer.close()


def test_a_step_stopped_between_batches_leaves_the_rest_due_and_replay_agrees(
    template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM reaches downscale as a stop request: it returns after the batch under way,
    the step records how many chunks it decayed, the next step decays the rest, and replay
    picks the same chunks at each step."""
    shutil.copytree(template, tmp_path / "copy")
    monkeypatch.setattr(downscale, "DOWNSCALE_ROWS_PER_TRANSACTION", SMALL_BATCH)
    clock = ManualClock(START_MS + DAY_MS)
    peer = Runtime.open(_config(tmp_path / "copy"), clock=clock).open_peer()
    try:
        peer.salience.reload()
        asked: list[int] = []

        def after_two_batches() -> bool:
            asked.append(1)
            return len(asked) >= 2

        before = _decay_from(peer.db)
        expected = due_for_decay(before, clock.now_ms(), 3_600_000, None)
        stopped = downscale.run(
            peer, CycleState(now_ms=clock.now_ms(), stop_requested=after_two_batches)
        )
        assert stopped["decayed"] == 2 * SMALL_BATCH < CHUNKS
        after = _decay_from(peer.db)
        assert sorted(r for r in after if after[r] != before[r]) == sorted(
            expected[: 2 * SMALL_BATCH]
        )
        step = peer.db.fetch_one(
            "SELECT body FROM journal WHERE kind = 'downscale' ORDER BY seq DESC LIMIT 1"
        )
        assert json.loads(step[0])["decayed"] == 2 * SMALL_BATCH
        assert replay_steps(peer.runtime).decayed_at == after

        clock.advance(60_000)
        resumed = downscale.run(peer, CycleState(now_ms=clock.now_ms()))
        assert resumed["decayed"] == CHUNKS - 2 * SMALL_BATCH
        assert replay_steps(peer.runtime).decayed_at == _decay_from(peer.db)
    finally:
        peer.close()
