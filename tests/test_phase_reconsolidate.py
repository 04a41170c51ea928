"""Phase 4, reconsolidate (daemon/cycle/reconsolidate.py): every structural entry applied in
the interleaved order, pulses left to phase 5.

Checks that reconsolidate applies tombstones, supersedes and metadata and pin changes, from
this peer's outbox and from another peer's segment, to the chunks they name (salience
carried over, floors raised, hidden chunks out of the live index), recording each entry's
status with its effect and marking local entries applied, while an entry that fails is
rejected alone and pulses, the log position and other chunks are left untouched; and that a
crash inside its one transaction keeps nothing of it, so the next cycle applies each
entry exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import CURSOR_META_KEY, SUPERSEDED_REASON, run_cycle_blocking
from dreamcycle.daemon.intake.emit_revisions import emit_revision, emit_supersede
from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.entries import ReconsolidateEntry, TombstoneEntry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from tests.phase_helpers import (
    HOUR_MS,
    MINUTE_MS,
    OTHER_ID,
    PEER_ID,
    START_MS,
    Killed,
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
    tables,
)


def _tombstone(peer: Peer, rowid: int) -> TombstoneEntry:
    """`pulse-emit tombstone`: the retraction, with the forget pulse that travels with it."""
    digest = content_hashes(peer.db)[rowid]
    entry = queued(peer, emit_tombstone(peer.runtime, digest=digest, reason="wrong", ttl_s=3600.0))
    assert isinstance(entry, TombstoneEntry) and entry.forget_pulse is not None
    return entry


def _revise(peer: Peer, rowid: int, changes: dict[str, Any]) -> ReconsolidateEntry:
    digest = content_hashes(peer.db)[rowid]
    entry = queued(peer, emit_revision(peer.runtime, digest=digest, changes=changes, nonce="1"))
    assert isinstance(entry, ReconsolidateEntry)
    return entry


def _column(peer: Peer, column: str, rowid: int) -> Any:
    return scalar(peer.db, f"SELECT {column} FROM observations WHERE id = ?", (rowid,))


def _outbox_applied(peer: Peer) -> dict[str, int]:
    return {str(r[0]): int(r[1]) for r in peer.db.fetch_all("SELECT entry_id, applied FROM outbox")}


def test_reconsolidate_applies_structural_entries_alone_and_leaves_pulses_for_phase_5(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        with peer.db.transaction():
            peer.db.write_salience({5: 0.9, 6: 0.2, 8: 0.1})
        peer.salience.reload()
        h = content_hashes(peer.db)
        tomb = _tombstone(peer, 3)
        supersede = queued(
            peer, emit_supersede(peer.runtime, old_hash=h[5], new_hash=h[6], reason="newer")
        )
        revise = _revise(peer, 8, {"title": "Tomato sauce", "pin_floor": 0.7})
        pulse = queue_pulse(peer, 10)
        now = clock.now_ms()
        bad = ReconsolidateEntry(
            hlc=hlc_from_ms(now), origin=OTHER_ID, content_hash=h[11], changes={"importance": 42}
        )
        good = ReconsolidateEntry(
            hlc=hlc_from_ms(now) + 1,
            origin=OTHER_ID,
            content_hash=h[11],
            changes={"title": "Hash maps"},
        )
        key = other_peer(peer).publish([bad, good], now)
        importance = _column(peer, "importance", 11)
        st = run_until(peer, "reconsolidate")
        cursor = peer.db.get_meta(CURSOR_META_KEY)
        salience_before = saliences(peer.db)
        assert all(peer.index.is_live(rowid) for rowid in (3, 5, 6, 8))
        before = tables(peer.db)

        stats = run_phase(peer, "reconsolidate", st)

        assert stats == {
            "tombstone:applied": 1,
            "supersede:applied": 1,
            "reconsolidate:applied": 2,
            "reconsolidate:rejected": 1,
        }
        tombstones = {
            str(r[0]): (str(r[1]), str(r[2]))
            for r in peer.db.fetch_all("SELECT hash, reason, origin_peer FROM tombstones")
        }
        assert tombstones == {h[3]: ("wrong", PEER_ID), h[5]: (SUPERSEDED_REASON, PEER_ID)}
        assert _column(peer, "deleted_at", 3) is not None
        assert _column(peer, "deleted_at", 5) is not None
        assert not peer.index.is_live(3) and not peer.index.is_live(5)
        assert peer.index.is_live(6) and peer.index.is_live(8)
        # The new chunk takes the old one's salience; the pin lifts chunk 8 to its floor.
        salience = saliences(peer.db)
        assert salience[6] == 0.9 and salience[8] == 0.7
        assert (_column(peer, "title", 8), _column(peer, "pin_floor", 8)) == ("Tomato sauce", 0.7)
        assert {r: s for r, s in salience.items() if r not in (6, 8)} == {
            r: s for r, s in salience_before.items() if r not in (6, 8)
        }
        # b's bad entry is rejected alone; its good one applied.
        assert (_column(peer, "title", 11), _column(peer, "importance", 11)) == (
            "Hash maps",
            importance,
        )
        seen = entry_statuses(peer.db)
        assert {e.id: seen.get(e.id) for e in (tomb, supersede, revise, good, bad, pulse)} == {
            tomb.id: "applied",
            supersede.id: "applied",
            revise.id: "applied",
            good.id: "applied",
            bad.id: "rejected",
            pulse.id: None,
        }
        applied = _outbox_applied(peer)
        assert [applied[e.id] for e in (tomb, supersede, revise, pulse)] == [1, 1, 1, 0]
        # Chunks and their full-text indexes, the journal, the entries' records: no more.
        assert changed_tables(before, tables(peer.db)) == {
            "applied_pulses", "journal", "meta", "observations", "observations_fts", "outbox",
            "recall_fts", "seen_entries", "tombstones",
        }  # fmt: skip
        # The tombstone's forget pulse is recorded with it; pulses proper, the log's segments
        # and the cursor are phase 5's.
        pulses = peer.db.fetch_all("SELECT pulse_id, status FROM applied_pulses")
        assert tomb.forget_pulse is not None
        assert pulses == [(tomb.forget_pulse.pulse_id, "applied")]
        assert not peer.db.segment_applied(key)
        assert peer.db.get_meta(CURSOR_META_KEY) == cursor


def test_a_crash_inside_reconsolidate_keeps_nothing_and_the_next_cycle_applies_each_entry_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        tomb = _tombstone(peer, 3)
        revise = _revise(peer, 8, {"title": "Tomato sauce", "pin_floor": 0.7})
        before = tables(peer.db)

        def die(entry_ids: object) -> None:
            raise Killed  # after every entry was applied, before the commit

        monkeypatch.setattr(peer.db, "outbox_mark_applied", die)
        with pytest.raises(Killed):
            run_cycle_blocking(peer)
        monkeypatch.undo()
        # Only scan's record of its own segment and the cycle's 'running' row remain.
        assert changed_tables(before, tables(peer.db)) == {"applied_segments", "cycles"}
        assert peer.index.is_live(3)

    with opened_peer(tmp_path, clock) as peer:  # the restart after the crash
        stats = run_cycle_blocking(peer).stats["reconsolidate"]
        assert {k: v for k, v in stats.items() if k != "seconds"} == {
            "tombstone:applied": 1,
            "reconsolidate:applied": 1,
        }
        assert entry_statuses(peer.db) == {tomb.id: "applied", revise.id: "applied"}
        assert _outbox_applied(peer)[tomb.id] == _outbox_applied(peer)[revise.id] == 1
        assert scalar(peer.db, "SELECT count(*) FROM tombstones") == 1
        assert scalar(peer.db, "SELECT count(*) FROM applied_pulses") == 1  # its forget pulse
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'tombstone'") == 1
        assert (_column(peer, "title", 8), _column(peer, "pin_floor", 8)) == ("Tomato sauce", 0.7)
        assert not peer.index.is_live(3)
        again = run_cycle_blocking(peer).stats["reconsolidate"]
        assert set(again) == {"seconds"}
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'tombstone'") == 1
