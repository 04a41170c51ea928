"""Phase 5, salience_pulse_propagate (daemon/cycle/salience_pulse_propagate.py): outcomes
become pulses, and every pulse propagates.

Checks that the phase reads this peer's queued pulses and another peer's logged ones and
moves salience around their seeds only, recording each pulse (applied_pulses, journal,
seen_entries, the outbox, the other peer's budget) and then the segments read, the cursor
and the HLC; that a waiting outcome of a decision recalled here turns into pulses queued
for publishing that credit the chunks it cited; and that a crash between pulse batches
keeps the batches committed, leaves segment and cursor unrecorded, and the next cycle
reads the segment again and applies each remaining pulse once, ending where a run without
the crash ends.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import CURSOR_META_KEY, run_cycle_blocking, salience_pulse_propagate
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import HLC_META_KEY, Peer
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.zeitgeist.entries import PulseEntry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.object_keys import parse_segment_key
from tests.daemon_helpers import trust_key
from tests.phase_helpers import (
    HOUR_MS,
    MINUTE_MS,
    OTHER_ID,
    PEER_ID,
    START_MS,
    Killed,
    OtherPeer,
    changed_tables,
    content_hashes,
    entry_statuses,
    fresh_peer,
    opened_peer,
    other_peer,
    queue_pulse,
    queued,
    run_phase,
    run_until,
    saliences,
    scalar,
    seeded_pulse,
    tables,
)

#: Chunks of a topic lie near each other (tests/phase_helpers.py: NOTES).
CATS, WEATHER, COOKING = {1, 2, 3}, {4, 5, 6}, {7, 8, 9}


def _foreign_pulse(peer: Peer, rowid: int, at_hlc: int, **shape: Any) -> PulseEntry:
    pulse = seeded_pulse(peer, rowid, origin=OTHER_ID, hlc=at_hlc, **shape)
    return PulseEntry(hlc=at_hlc, origin=OTHER_ID, pulse=pulse)


def _pulses_applied(peer: Peer) -> dict[str, tuple[str, str, int]]:
    """Pulse id -> (status, origin, chunks changed)."""
    return {
        str(r[0]): (str(r[1]), str(r[2]), int(r[3]))
        for r in peer.db.fetch_all(
            "SELECT pulse_id, status, origin_peer, changed FROM applied_pulses"
        )
    }


def test_pulses_move_salience_near_their_seeds_and_the_log_position_is_recorded_last(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        local = queue_pulse(peer, 1, kind=PulseKind.REWARD)
        foreign = _foreign_pulse(peer, 7, hlc_from_ms(clock.now_ms()), kind=PulseKind.DECAY)
        key = other_peer(peer).publish([foreign], clock.now_ms())
        st = run_until(peer, "salience_pulse_propagate")
        cursor = int(peer.db.get_meta(CURSOR_META_KEY) or "0")
        before_salience = saliences(peer.db)
        before = tables(peer.db)

        stats = run_phase(peer, "salience_pulse_propagate", st)

        assert (stats["applied"], stats["rejected"], stats["duplicate"]) == (2, 0, 0)
        salience = saliences(peer.db)
        moved = {r for r in salience if salience[r] != before_salience[r]}
        assert salience[1] > before_salience[1] + 0.05
        assert salience[7] < before_salience[7] - 0.05
        assert {1, 7} <= moved <= CATS | COOKING
        assert len(moved) == stats["changed"]
        recorded = _pulses_applied(peer)
        assert {pulse_id: row[:2] for pulse_id, row in recorded.items()} == {
            local.pulse.pulse_id: ("applied", PEER_ID),
            foreign.pulse.pulse_id: ("applied", OTHER_ID),
        }
        assert sum(changed for _, _, changed in recorded.values()) == stats["changed"]
        journaled = [
            str(r[0]) for r in peer.db.fetch_all("SELECT ref FROM journal WHERE kind = 'pulse'")
        ]
        assert sorted(journaled) == sorted(recorded)
        assert entry_statuses(peer.db) == {local.id: "applied", foreign.id: "applied"}
        assert scalar(peer.db, "SELECT applied FROM outbox WHERE entry_id = ?", (local.id,)) == 1
        # Only the other peer's pulse is charged to its budget.
        charges = peer.db.fetch_all(
            "SELECT pulse_id, origin_peer, admitted FROM origin_budget_charges"
        )
        assert charges == [(foreign.pulse.pulse_id, OTHER_ID, 1)]
        # Then the segment read, the cursor past it and the clock.
        assert peer.db.segment_applied(key)
        assert int(peer.db.get_meta(CURSOR_META_KEY) or "0") == parse_segment_key(key).hlc > cursor
        assert int(peer.db.get_meta(HLC_META_KEY) or "0") == peer.clock.last
        assert changed_tables(before, tables(peer.db)) == {
            "applied_pulses", "applied_segments", "journal", "meta", "observations",
            "origin_budget_charges", "origin_budget_windows", "outbox", "seen_entries",
        }  # fmt: skip


def test_an_outcome_of_a_decision_made_here_becomes_pulses_that_credit_its_citations(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        decision = recall(peer.runtime, "a kitten playing with yarn", index=peer.index)
        assert decision.decision_hash is not None
        recalled = {hit.rowid: hit.content_hash for hit in decision.hits}
        cited = sorted(h for r, h in recalled.items() if r in CATS)[:2]
        assert len(cited) == 2, recalled
        emitted = emit_outcome(
            peer.runtime,
            decision=decision.decision_hash,
            reward=0.8,
            reason="it helped",
            cited=cited,
        )
        outcome = queued(peer, emitted)
        st = run_until(peer, "salience_pulse_propagate")
        assert (
            scalar(peer.db, "SELECT status FROM outcomes WHERE outcome_id = ?", (outcome.id,))
            == "waiting"
        )
        pulses_queued = "SELECT entry_id, applied FROM outbox WHERE kind = ?"
        earlier = {str(r[0]) for r in peer.db.fetch_all(pulses_queued, (PulseEntry.KIND,))}
        before_salience = saliences(peer.db)

        stats = run_phase(peer, "salience_pulse_propagate", st)

        derived = {
            str(r[0]): int(r[1])
            for r in peer.db.fetch_all(pulses_queued, (PulseEntry.KIND,))
            if str(r[0]) not in earlier
        }
        assert stats["from_outcomes"] == len(derived) >= 1
        assert set(derived.values()) == {1}  # applied here, waiting to be published
        status, pulses = peer.db.fetch_one(
            "SELECT status, pulses FROM outcomes WHERE outcome_id = ?", (outcome.id,)
        )
        assert (status, pulses) == ("converted", len(derived))
        assert stats["applied"] == len(derived)
        salience = saliences(peer.db)
        by_hash = {h: r for r, h in content_hashes(peer.db).items()}
        for digest in cited:
            assert salience[by_hash[digest]] > before_salience[by_hash[digest]], digest


def _five_pulses(peer: Peer, other: OtherPeer, at_ms: int) -> tuple[str, list[PulseEntry]]:
    base = hlc_from_ms(at_ms)
    pulses = [
        _foreign_pulse(peer, rowid, base + n, strength=0.2)
        for n, rowid in enumerate((1, 4, 7, 10, 13))
    ]
    return other.publish(pulses, at_ms), pulses


def test_a_crash_between_pulse_batches_keeps_them_and_the_next_cycle_applies_the_rest_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(salience_pulse_propagate, "PULSES_PER_TRANSACTION", 2)
    clock = ManualClock(START_MS + HOUR_MS)
    crashed, reference = tmp_path / "crashed", tmp_path / "reference"
    with fresh_peer(tmp_path_factory, reference, clock) as peer:  # applies all five at once
        run_cycle_blocking(peer)
    with fresh_peer(tmp_path_factory, crashed, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        other = other_peer(peer)
        key, pulses = _five_pulses(peer, other, clock.now_ms())
        cursor = peer.db.get_meta(CURSOR_META_KEY)
        apply = salience_pulse_propagate._apply_pulse_entry
        calls: list[str] = []

        def die_at_the_fourth(
            peer_: Peer, st: Any, entry: PulseEntry, *args: Any, **kw: Any
        ) -> None:
            calls.append(entry.id)
            if len(calls) == 4:
                raise Killed
            apply(peer_, st, entry, *args, **kw)

        with monkeypatch.context() as patch:
            patch.setattr(salience_pulse_propagate, "_apply_pulse_entry", die_at_the_fourth)
            with pytest.raises(Killed):
                run_cycle_blocking(peer)
        # The first batch (two pulses) committed; the third went with the second batch.
        assert set(_pulses_applied(peer)) == {p.pulse.pulse_id for p in pulses[:2]}
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'pulse'") == 2
        assert not peer.db.segment_applied(key)
        assert peer.db.get_meta(CURSOR_META_KEY) == cursor

    with opened_peer(crashed, clock) as peer:  # the restart after the crash
        stats = run_cycle_blocking(peer).stats
        assert stats["scan"]["fetched"] == 1
        assert stats["interleave"]["duplicates"] == 2
        assert stats["salience_pulse_propagate"]["applied"] == 3
        recorded = _pulses_applied(peer)
        assert set(recorded) == {p.pulse.pulse_id for p in pulses}
        assert {status for status, _, _ in recorded.values()} == {"applied"}
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'pulse'") == 5
        assert peer.db.segment_applied(key)
        assert int(peer.db.get_meta(CURSOR_META_KEY) or "0") == parse_segment_key(key).hlc
        after_crash = saliences(peer.db)

    with opened_peer(reference, clock) as peer:
        trust_key(peer.config.keyring_path, other.signer)
        (reference / "zeitgeist" / key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(crashed / "zeitgeist" / key, reference / "zeitgeist" / key)
        assert run_cycle_blocking(peer).stats["salience_pulse_propagate"]["applied"] == 5
        assert saliences(peer.db) == after_crash
