"""Phase 7, percentile_sweep (daemon/cycle/percentile_sweep.py): the bottom percentile to the
cold tier, when due.

Checks that the sweep reads the last sweep's time against the cycle's accounted time (the
first cycle only starts the interval, an early one skips) and every chunk's value, moving
exactly the bottom percentile of a kind cold with a journal step each and the sweep's
time, and leaving salience, the other kind and other tables alone; that cold chunks
ingested again come back and those past retention become tombstones, even with the sweep
itself off; and that a crash after the sweep's time is recorded skips that sweep instead
of sweeping twice, the next due sweep moving each chunk once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import (
    LAST_SWEEP_META_KEY,
    CycleState,
    percentile_sweep,
    run_cycle_blocking,
)
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory import forgetting
from dreamcycle.daemon.memory.forgetting import RETENTION_REASON, SWEEP_REASON, move_to_cold
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.sweep import SweepPlan
from dreamcycle.store import tiers
from dreamcycle.store.database import NewObservation
from tests.phase_helpers import (
    DAY_MS,
    HOUR_MS,
    NOTES,
    ROWIDS,
    START_MS,
    Killed,
    changed_tables,
    content_hashes,
    fresh_peer,
    opened_peer,
    saliences,
    scalar,
    tables,
)

#: Swept daily, by salience alone, the bottom half of a kind, however young.
SWEEP: Final = {
    "sweep.enabled": True,
    "sweep.interval_s": DAY_MS / 1000,
    "sweep.grace_s": 0.0,
    "sweep.min_population": 10,
    "sweep.percentile": 50.0,
    "sweep.salience_share": 1.0,
    "sweep.information_share": 0.0,
    "sweep.importance_share": 0.0,
    "sweep.prune_gate": False,
}
NOTE_IDS: Final = ROWIDS[: len(NOTES)]
#: The twelve notes get 0.05 .. 0.60 in row order: the six lowest are the bottom half.
BOTTOM_HALF: Final = set(NOTE_IDS[:6])


def _cold(peer: Peer) -> set[int]:
    return {
        int(r[0])
        for r in peer.db.fetch_all("SELECT id FROM observations WHERE cold_at IS NOT NULL")
    }


def _spread_salience(peer: Peer) -> None:
    """Notes spread 0.05 apart; the four facts (too few to sweep as a kind) lowest of all."""
    values = {rowid: 0.05 * rowid for rowid in NOTE_IDS}
    values.update(dict.fromkeys(ROWIDS[len(NOTES) :], 0.01))
    with peer.db.transaction():
        peer.db.write_salience(values)
    peer.salience.reload()


def _journaled(peer: Peer, kind: str) -> list[str]:
    return [
        str(r[0])
        for r in peer.db.fetch_all("SELECT ref FROM journal WHERE kind = ? ORDER BY seq", (kind,))
    ]


def _sweep(peer: Peer) -> dict[str, object]:
    return percentile_sweep.run(peer, CycleState(now_ms=peer.now_ms()))


@pytest.mark.parametrize("batch", [forgetting.MOVE_BATCH, 4], ids=["one batch", "batches of 4"])
def test_a_due_sweep_moves_exactly_the_bottom_percentile_cold_and_records_its_time(
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    batch: int,
) -> None:
    monkeypatch.setattr(forgetting, "MOVE_BATCH", batch)
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock, **SWEEP) as peer:
        first = run_cycle_blocking(peer).stats["percentile_sweep"]
        assert (first["skipped"], _cold(peer)) == ("first interval", set())
        assert peer.db.get_meta(LAST_SWEEP_META_KEY) == str(START_MS + HOUR_MS)
        _spread_salience(peer)
        clock.advance(2 * HOUR_MS)
        assert _sweep(peer) == {"revived": 0, "skipped": "interval"}
        assert _cold(peer) == set()
        assert peer.db.get_meta(LAST_SWEEP_META_KEY) == str(START_MS + HOUR_MS)

        clock.advance(DAY_MS)
        salience = saliences(peer.db)
        before = tables(peer.db)
        stats = _sweep(peer)

        assert (stats["population"], stats["doomed"], stats["cold"]) == (len(ROWIDS), 6, 6)
        assert _cold(peer) == BOTTOM_HALF
        hashes = content_hashes(peer.db)
        # One step per chunk moved, in rowid order, however many statements moved them.
        assert _journaled(peer, "sweep") == [hashes[r] for r in sorted(BOTTOM_HALF)]
        reasons = {
            str(r[0])
            for r in peer.db.fetch_all(
                "SELECT cold_reason FROM observations WHERE cold_at IS NOT NULL"
            )
        }
        assert all(reason.startswith(f"{SWEEP_REASON}: value ") for reason in reasons)
        assert not any(peer.index.is_live(r) for r in BOTTOM_HALF)
        assert all(peer.index.is_live(r) for r in set(ROWIDS) - BOTTOM_HALF)
        assert peer.db.get_meta(LAST_SWEEP_META_KEY) == str(clock.now_ms())
        # Nothing forgotten for good, no salience moved.
        assert saliences(peer.db) == salience
        # The words of every chunk are kept for the next sweep (store/sweep_words.py).
        assert changed_tables(before, tables(peer.db)) == {
            "journal",
            "meta",
            "observations",
            "chunk_words",
            "sweep_words",
        }


def test_cold_chunks_ingested_again_come_back_and_those_past_retention_are_tombstoned(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    retention = {"sweep.cold_retention_s": DAY_MS / 1000}  # the sweep itself stays off
    with fresh_peer(tmp_path_factory, tmp_path, clock, **retention) as peer:
        run_cycle_blocking(peer)
        plan = SweepPlan(threshold=None, population=0, doomed=(1, 2), skipped_reason=None)
        assert move_to_cold(peer, plan, clock.now_ms()) == [1, 2]
        clock.advance(2 * HOUR_MS)
        ingest(peer.runtime, [[NewObservation(content=NOTES[0], kind="note")]], embed=False)

        assert _sweep(peer) == {"revived": 1, "skipped": "disabled"}
        assert _cold(peer) == {2}
        assert peer.index.is_live(1) and not peer.index.is_live(2)
        hashes = content_hashes(peer.db)
        assert _journaled(peer, "revive") == [hashes[1]]

        clock.advance(DAY_MS)
        assert _sweep(peer) == {"revived": 0, "expired": 1, "skipped": "disabled"}
        reason = scalar(peer.db, "SELECT reason FROM tombstones WHERE hash = ?", (hashes[2],))
        assert reason == RETENTION_REASON
        assert scalar(peer.db, "SELECT deleted_at FROM observations WHERE id = 2") is not None
        assert scalar(peer.db, "SELECT count(*) FROM tombstones") == 1
        assert peer.index.is_live(1) and not peer.index.is_live(2)


def test_a_crash_after_the_sweep_time_is_recorded_skips_that_sweep_rather_than_sweeping_twice(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock, **SWEEP) as peer:
        run_cycle_blocking(peer)
        _spread_salience(peer)
        clock.advance(DAY_MS)

        def die(*args: object, **kwargs: object) -> list[int]:
            raise Killed  # as the chunks are moved

        with monkeypatch.context() as patch:
            patch.setattr(tiers, "move_each_to_cold", die)
            with pytest.raises(Killed):
                _sweep(peer)
        assert peer.db.get_meta(LAST_SWEEP_META_KEY) == str(clock.now_ms())
        assert _cold(peer) == set() and _journaled(peer, "sweep") == []

    with opened_peer(tmp_path, clock, **SWEEP) as peer:  # the restart, at once
        assert _sweep(peer) == {"revived": 0, "skipped": "interval"}
        assert _cold(peer) == set()
        clock.advance(DAY_MS)
        assert _sweep(peer)["cold"] == 6
        assert _cold(peer) == BOTTOM_HALF
        assert len(_journaled(peer, "sweep")) == 6
