"""Phase 3, interleave (daemon/cycle/interleave.py): one deterministic order, duplicates dropped.

Checks that interleave reads the entries scan gathered (log segments and local ones) and
which were applied before, and puts the rest in (HLC, origin, id) order with every copy
and every entry seen before dropped; that it observes into the clock only the entries
classify did not refuse, refusing other peers' entries stamped beyond the allowed skew
(this peer's own still apply); and that it writes nothing durable, so a crash inside
leaves nothing to redo and the next run orders the same entries alike.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import CycleState, interleave
from dreamcycle.daemon.cycle.state import FetchedSegment
from dreamcycle.daemon.runtime import HLC_META_KEY, Peer
from dreamcycle.zeitgeist.entries import Entry, ReconsolidateEntry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from tests.phase_helpers import (
    HOUR_MS,
    MINUTE_MS,
    PEER_ID,
    START_MS,
    Killed,
    changed_tables,
    fresh_peer,
    run_phase,
    tables,
)


def _entry(hlc: int, origin: str, label: str) -> ReconsolidateEntry:
    return ReconsolidateEntry(
        hlc=hlc, origin=origin, content_hash="ab" * 32, changes={"title": label}
    )


def _state(now_ms: int, segments: list[list[Entry]], local: list[Entry]) -> CycleState:
    st = CycleState(now_ms=now_ms)
    st.segments = [
        FetchedSegment(f"seg/{n}", list(entries), 0, 0) for n, entries in enumerate(segments)
    ]
    st.local = list(local)
    return st


def _mixed(peer: Peer) -> tuple[list[list[Entry]], list[Entry], list[str], Entry]:
    """(segments, local entries, the ids in the order expected, the entry applied before)."""
    base = hlc_from_ms(peer.now_ms())
    late = _entry(base + 30, "b", "late")
    tie_c = _entry(base + 10, "c", "tie c")
    tie_b = _entry(base + 10, "b", "tie b")
    early = _entry(base + 5, "c", "early")
    mine = _entry(base + 20, PEER_ID, "mine")
    applied_before = _entry(base + 1, "b", "applied before")
    segments: list[list[Entry]] = [[late, tie_c, applied_before], [tie_b, early, tie_c]]
    return segments, [mine], [early.id, tie_b.id, tie_c.id, mine.id, late.id], applied_before


def _record_seen(peer: Peer, entry: Entry) -> None:
    with peer.db.transaction():
        peer.db.record_entry(
            entry.id, kind=entry.KIND, hlc=entry.hlc, origin=entry.origin, status="applied",
            reason=None,
        )  # fmt: skip


def test_interleave_orders_by_hlc_origin_and_id_and_drops_copies_and_entries_seen(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        segments, local, expected, applied_before = _mixed(peer)
        _record_seen(peer, applied_before)
        st = _state(clock.now_ms(), segments, local)
        before = tables(peer.db)

        stats = run_phase(peer, "interleave", st)

        assert [e.id for e in st.ordered] == expected
        # tie c came twice, and one entry was applied by an earlier cycle.
        assert stats == {"entries": 5, "duplicates": 2}
        assert st.rejected == {}
        assert changed_tables(before, tables(peer.db)) == set()
        # The input is left as scan gathered it.
        assert [len(s.entries) for s in st.segments] == [3, 3]


def test_interleave_observes_accepted_hlcs_only_and_refuses_foreign_ones_beyond_the_skew(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        now = clock.now_ms()
        skew = peer.zeitgeist.max_future_ms
        accepted = _entry(hlc_from_ms(now + MINUTE_MS), "b", "accepted")
        refused_by_classify = _entry(hlc_from_ms(now + 2 * MINUTE_MS), "b", "bad pulse")
        foreign_ahead = _entry(hlc_from_ms(now + 2 * skew), "b", "ahead")
        mine_ahead = _entry(hlc_from_ms(now + 3 * skew), PEER_ID, "mine ahead")
        assert peer.clock.last < accepted.hlc
        st = _state(now, [[accepted, refused_by_classify, foreign_ahead]], [mine_ahead])
        st.rejected[refused_by_classify.id] = "invalid: from classify"

        run_phase(peer, "interleave", st)

        assert accepted.hlc <= peer.clock.last < refused_by_classify.hlc
        assert set(st.rejected) == {refused_by_classify.id, foreign_ahead.id}
        assert st.rejected[refused_by_classify.id] == "invalid: from classify"
        assert "more than the allowed skew ahead" in st.rejected[foreign_ahead.id]
        # Refused entries stay in the order, for the next phases to record; this peer's
        # own entry stamped ahead still applies.
        assert [e.id for e in st.ordered] == [
            accepted.id,
            refused_by_classify.id,
            foreign_ahead.id,
            mine_ahead.id,
        ]
        assert mine_ahead.id not in st.rejected
        # The clock is persisted by later phases, not here.
        assert int(peer.db.get_meta(HLC_META_KEY) or "0") < accepted.hlc


def test_a_crash_inside_interleave_leaves_nothing_to_redo(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        segments, local, expected, applied_before = _mixed(peer)
        _record_seen(peer, applied_before)
        before = tables(peer.db)

        def die(entry: Entry) -> tuple[int, str, str]:
            raise Killed

        monkeypatch.setattr(interleave, "entry_order_key", die)
        crashed = _state(clock.now_ms(), segments, local)
        with pytest.raises(Killed):
            interleave.run(peer, crashed)
        monkeypatch.undo()
        assert crashed.ordered == []
        assert changed_tables(before, tables(peer.db)) == set()

        again = _state(clock.now_ms(), segments, local)
        assert interleave.run(peer, again) == {"entries": 5, "duplicates": 2}
        assert [e.id for e in again.ordered] == expected
