"""Phase 6, downscale (daemon/cycle/downscale.py): time decay since each chunk's last decay,
half-life by kind.

Checks that downscale reads which chunks are due (decayed `min_step_s` or more ago), their
kind's half-life, pin floor and the cycle's accounted time, and does nothing when disabled;
that it writes one journal step with the rule's numbers, then each due chunk's salience and
decay time and nothing else; and that a crash after the first batch loses no decay: the
next step decays the rest from their own last decay, every chunk ends where uninterrupted
decay puts it, and replaying the journal agrees with the store.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import CycleState, downscale, run_cycle_blocking
from dreamcycle.daemon.memory.rebuild import replay_steps
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.timefmt import iso_from_ms
from tests.phase_helpers import (
    DAY_MS,
    MINUTE_MS,
    NOTES,
    ROWIDS,
    START_MS,
    Killed,
    changed_tables,
    fresh_peer,
    opened_peer,
    saliences,
    tables,
)

#: A day for notes, four for facts: a day halves a note and takes a fact to 2**-1/4.
HALF_LIVES: Final = {
    "downscale.note_half_life_s": DAY_MS / 1000,
    "downscale.fact_half_life_s": 4 * DAY_MS / 1000,
}
NOTE_IDS: Final = ROWIDS[: len(NOTES)]
FACT_IDS: Final = ROWIDS[len(NOTES) :]
START_SALIENCE: Final = 0.8
PINNED, PIN_FLOOR = 2, 0.6
#: Decayed ten minutes before the step: not due (min_step_s is an hour).
RECENT = 9


def _decayed_at(peer: Peer) -> dict[int, str]:
    return {
        int(r[0]): str(r[1])
        for r in peer.db.fetch_all(
            "SELECT id, coalesce(last_decay_ts, created_at) FROM observations"
        )
    }


def _untouched_columns(peer: Peer) -> list[tuple[Any, ...]]:
    """Every column of every chunk but those downscale may write."""
    columns = [
        str(r[1])
        for r in peer.db.fetch_all("PRAGMA table_info(observations)")
        if r[1] not in ("salience", "last_decay_ts")
    ]
    return peer.db.fetch_all(f"SELECT {', '.join(columns)} FROM observations ORDER BY id")


def _set_start(peer: Peer, *, pin: bool) -> None:
    with peer.db.transaction():
        peer.db.write_salience(dict.fromkeys(ROWIDS, START_SALIENCE))
        if pin:
            peer.db.set_pin_floor(PINNED, PIN_FLOOR, now_ms=peer.now_ms())
    peer.salience.reload()


def _steps(peer: Peer) -> list[dict[str, Any]]:
    return [
        json.loads(r[0])
        for r in peer.db.fetch_all("SELECT body FROM journal WHERE kind = 'downscale' ORDER BY seq")
    ]


def test_downscale_decays_the_chunks_due_by_kind_down_to_their_floor_and_writes_nothing_else(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS)
    with fresh_peer(
        tmp_path_factory, tmp_path, clock, **HALF_LIVES, **{"downscale.enabled": False}
    ) as peer:
        run_cycle_blocking(peer)  # admits; nothing is due at the time of ingest anyway
        _set_start(peer, pin=True)
        clock.advance(DAY_MS)
        before = tables(peer.db)
        assert downscale.run(peer, CycleState(now_ms=clock.now_ms())) == {"skipped": "disabled"}
        assert changed_tables(before, tables(peer.db)) == set()

    with opened_peer(tmp_path, clock, **HALF_LIVES) as peer:
        now = clock.now_ms()
        with peer.db.transaction():
            peer.db.mark_decayed(now - 10 * MINUTE_MS, [RECENT])
        decayed_before = _decayed_at(peer)
        untouched = _untouched_columns(peer)
        steps = len(_steps(peer))
        before = tables(peer.db)

        stats = downscale.run(peer, CycleState(now_ms=now))

        assert stats == {
            "decayed": len(ROWIDS) - 1,
            "changed": len(ROWIDS) - 1,
            "accounted_lag_ms": 0,
        }
        salience = saliences(peer.db)
        for rowid in NOTE_IDS:
            expected = {PINNED: PIN_FLOOR, RECENT: START_SALIENCE}.get(rowid, START_SALIENCE / 2)
            assert salience[rowid] == pytest.approx(expected, abs=1e-9), rowid
        for rowid in FACT_IDS:
            assert salience[rowid] == pytest.approx(START_SALIENCE * 0.5**0.25, abs=1e-9), rowid
        decayed = _decayed_at(peer)
        assert decayed[RECENT] == decayed_before[RECENT]
        assert {decayed[r] for r in ROWIDS if r != RECENT} == {iso_from_ms(now)}
        # One step journaled, with the numbers a replay needs.
        (step,) = _steps(peer)[steps:]
        assert (step["now_ms"], step["observed_ms"], step["min_step_ms"]) == (now, now, 3_600_000)
        assert step["half_life_s"]["note"] == DAY_MS / 1000
        assert "decayed" not in step  # not stopped: every due chunk decayed
        assert changed_tables(before, tables(peer.db)) == {"journal", "meta", "observations"}
        assert _untouched_columns(peer) == untouched
        # Right after a step nothing is due again.
        clock.advance(MINUTE_MS)
        assert downscale.run(peer, CycleState(now_ms=clock.now_ms()))["decayed"] == 0


def test_a_crash_after_the_first_batch_loses_no_decay_and_replay_agrees(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(downscale, "DOWNSCALE_ROWS_PER_TRANSACTION", 5)
    clock = ManualClock(START_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock, **HALF_LIVES) as peer:
        _set_start(peer, pin=False)  # before admission: journaled with the chunks, for replay
        run_cycle_blocking(peer)
        clock.advance(DAY_MS)
        first_step = clock.now_ms()
        steps = len(_steps(peer))
        batch = downscale.decay_batch
        batches: list[int] = []

        def die_at_the_second(peer_: Peer, now_ms: int, rows: Any, half_lives: Any) -> int:
            if batches:
                raise Killed
            batches.append(len(rows))
            return batch(peer_, now_ms, rows, half_lives)

        with monkeypatch.context() as patch:
            patch.setattr(downscale, "decay_batch", die_at_the_second)
            with pytest.raises(Killed):
                downscale.run(peer, CycleState(now_ms=first_step))
        # The step and its first batch (the five longest waiting, ties by row) committed.
        assert batches == [5]
        assert len(_steps(peer)) == steps + 1
        salience = saliences(peer.db)
        assert {r for r in ROWIDS if salience[r] != START_SALIENCE} == {1, 2, 3, 4, 5}
        assert {r for r, at in _decayed_at(peer).items() if at == iso_from_ms(first_step)} == {
            1, 2, 3, 4, 5,
        }  # fmt: skip

    clock.advance(DAY_MS)
    with opened_peer(tmp_path, clock, **HALF_LIVES) as peer:  # the restart, a day later
        stats = downscale.run(peer, CycleState(now_ms=clock.now_ms()))
        assert stats["decayed"] == len(ROWIDS)
        # Two days of decay for every chunk, whichever way it got there.
        salience = saliences(peer.db)
        for rowid in NOTE_IDS:
            assert salience[rowid] == pytest.approx(START_SALIENCE * 0.25, abs=1e-9), rowid
        for rowid in FACT_IDS:
            assert salience[rowid] == pytest.approx(START_SALIENCE * 0.5**0.5, abs=1e-9), rowid
        assert set(_decayed_at(peer).values()) == {iso_from_ms(clock.now_ms())}
        replayed = replay_steps(peer.runtime)
        for rowid in ROWIDS:
            assert replayed.state.salience(rowid) == pytest.approx(salience[rowid], abs=1e-9)
        assert set(replayed.decayed_at.values()) == {clock.now_ms()}


def test_each_decayed_chunk_s_row_is_written_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Salience and decay mark in one update: each write of a row rewrites it, and a
    change of salience its entries in the indexes that hold salience too."""
    clock = ManualClock(START_MS)
    with fresh_peer(
        tmp_path_factory, tmp_path, clock, **HALF_LIVES, **{"downscale.enabled": False}
    ) as peer:
        run_cycle_blocking(peer)
        _set_start(peer, pin=True)
        clock.advance(DAY_MS)

    with opened_peer(tmp_path, clock, **HALF_LIVES) as peer:
        now = clock.now_ms()
        with peer.db.transaction():
            # At its floor already: decayed, its salience unchanged.
            peer.db.write_salience({PINNED: PIN_FLOOR})
            peer.db.set_pin_floor(PINNED, PIN_FLOOR, now_ms=now)
        peer.salience.reload()
        written: list[int] = []

        def trace(_cursor: Any, sql: str, bindings: Any) -> bool:
            if sql.lstrip().upper().startswith("UPDATE OBSERVATIONS"):
                written.append(int(bindings[-1]))
            return True

        peer.db.before_each_statement(trace)
        try:
            stats = downscale.run(peer, CycleState(now_ms=now))
        finally:
            peer.db.before_each_statement(None)

        assert stats["decayed"] == len(ROWIDS)
        assert stats["changed"] == len(ROWIDS) - 1
        assert sorted(written) == sorted(ROWIDS)
        assert set(_decayed_at(peer).values()) == {iso_from_ms(now)}
        assert saliences(peer.db)[PINNED] == PIN_FLOOR
