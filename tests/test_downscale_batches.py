"""Downscale commits in batches and decays exactly as one transaction did.

Two copies of one store (real chunks, spread salience and pin floors, two kinds) are
decayed after the same elapsed time, one in batches of a few chunks, one all at once:
every salience and every last-decay time must be equal, the step journaled once, and
a write from another connection must get in between two batches.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from daemon import cycle
from daemon.clock import ManualClock
from daemon.confidence import HalfLives
from daemon.config import Config, load_config
from daemon.cycle import CycleState, downscale_phase, run_cycle_blocking
from daemon.ingest import ingest
from daemon.runtime import Peer, Runtime
from store.database import EFFICACY_TYPE, Database, NewObservation
from store.timefmt import iso_from_ms
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
    patch.setattr(cycle, "DOWNSCALE_ROWS_PER_TRANSACTION", batch)
    clock = ManualClock(START_MS + 3 * DAY_MS)
    peer = Runtime.open(_config(target), clock=clock).open_peer()
    peer.salience.reload()
    downscale_phase(peer, CycleState(now_ms=clock.now_ms()))
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
    monkeypatch.setattr(cycle, "DOWNSCALE_ROWS_PER_TRANSACTION", SMALL_BATCH)
    clock = ManualClock(START_MS + DAY_MS)
    peer = Runtime.open(_config(tmp_path / "data-copy"), clock=clock).open_peer()
    begun: list[str] = []
    batch_sizes: list[int] = []
    original = cycle._downscale_batch

    def traced(cursor: object, sql: str, bindings: object) -> bool:
        if sql.startswith("BEGIN"):
            begun.append(sql)
        return True

    def batch(
        peer: Peer, st: CycleState, rows: list[tuple[int, str, str, float]], half_lives: HalfLives
    ) -> int:
        assert peer.db.conn.in_transaction
        batch_sizes.append(len(rows))
        return original(peer, st, rows, half_lives)

    monkeypatch.setattr(cycle, "_downscale_batch", batch)
    try:
        peer.salience.reload()
        peer.db.conn.exec_trace = traced
        result = downscale_phase(peer, CycleState(now_ms=clock.now_ms()))
        peer.db.conn.exec_trace = None
        assert result["live"] == CHUNKS == sum(batch_sizes)
        assert max(batch_sizes) == SMALL_BATCH
        assert len(begun) == len(batch_sizes) == -(-CHUNKS // SMALL_BATCH)
    finally:
        peer.close()
