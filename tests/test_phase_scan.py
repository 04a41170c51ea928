"""Phase 1, scan (daemon/cycle/scan.py): what is new in the log, and what this peer queued.

Checks that scan reads the foreign segments after the cursor, the outbox's unapplied
entries and chunks saved meanwhile into the cycle's state; that the only rows it writes
are its own segments seen in the listing and corrupt segments (one rejection each),
leaving the cursor and every other table alone; that only a segment read with a seal
that holds moves the clock; and that a crash inside it leaves the next cycle to list and
fetch the same segments again, which then apply exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import CURSOR_META_KEY, CycleState, run_cycle_blocking, scan
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import NewObservation
from dreamcycle.zeitgeist.entries import PulseEntry, ReconsolidateEntry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.object_keys import parse_segment_key, segment_key
from dreamcycle.zeitgeist.signing import Rejection
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
    scalar,
    seeded_pulse,
    tables,
)

PARROT = "A parrot repeated every word it heard on the radio."


def _applied_segments(peer: Peer) -> dict[str, tuple[int, int]]:
    """Segment key -> (entries, rejected), as recorded."""
    return {
        str(r[0]): (int(r[1]), int(r[2]))
        for r in peer.db.fetch_all("SELECT key, entries, rejected FROM applied_segments")
    }


def _retitle(peer: Peer, rowid: int, title: str, at_ms: int) -> ReconsolidateEntry:
    return ReconsolidateEntry(
        hlc=hlc_from_ms(at_ms),
        origin=OTHER_ID,
        content_hash=content_hashes(peer.db)[rowid],
        changes={"title": title},
    )


def test_scan_reads_new_segments_and_the_outbox_and_records_only_its_own_segments(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)  # admits the chunks and publishes their asserts
        (own_key,) = peer.db.fetch_one("SELECT key FROM segments_out")
        clock.advance(MINUTE_MS)
        now = clock.now_ms()
        other = other_peer(peer)
        pulse = PulseEntry(
            hlc=hlc_from_ms(now) + 1,
            origin=OTHER_ID,
            pulse=seeded_pulse(peer, 4, origin=OTHER_ID, hlc=hlc_from_ms(now) + 1),
        )
        key = other.publish([_retitle(peer, 2, "dogs", now), pulse], now)
        local = queue_pulse(peer, 1)
        # A chunk saved since the peer opened: scan loads its salience for the cycle.
        ingest(peer.runtime, [[NewObservation(content=PARROT)]], embed=False)
        cursor = peer.db.get_meta(CURSOR_META_KEY)
        assert peer.clock.last < parse_segment_key(key).hlc
        before = tables(peer.db)

        st = CycleState(now_ms=clock.now_ms())
        stats = scan.run(peer, st)

        assert (stats["listed"], stats["fetched"], stats["local"], stats["new_chunks"]) == (
            2, 1, 1, 1,
        )  # fmt: skip
        assert [s.key for s in st.segments] == [key]
        assert {e.id for e in st.segments[0].entries} == {
            _retitle(peer, 2, "dogs", now).id,
            pulse.id,
        }
        assert [e.id for e in st.local] == [local.id]
        assert st.own_keys == [own_key]
        # Written: its own segment, as seen (never applied from the log); not b's.
        after = tables(peer.db)
        assert changed_tables(before, after) == {"applied_segments"}
        assert _applied_segments(peer) == {own_key: (0, 0)}
        assert peer.db.get_meta(CURSOR_META_KEY) == cursor
        # b's segment was read and its seal held: its time moved the clock.
        assert peer.clock.last >= parse_segment_key(key).hlc

        # The outbox entry is still unapplied, and nothing was applied from b.
        assert scalar(peer.db, "SELECT applied FROM outbox WHERE entry_id = ?", (local.id,)) == 0
        assert entry_statuses(peer.db) == {}


def test_corrupt_untrusted_and_forged_segments_move_neither_clock_nor_cursor(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(10 * MINUTE_MS)
        now = clock.now_ms()
        trusted = other_peer(peer)
        good = trusted.publish(
            [_retitle(peer, 3, "kittens", now - 3 * MINUTE_MS)], now - 3 * MINUTE_MS
        )
        # Bytes that are no segment, under a key of the trusted peer.
        corrupt = segment_key(hlc_from_ms(now - 2 * MINUTE_MS), OTHER_ID, 99)
        (peer.config.zeitgeist_dir / corrupt).write_bytes(b"not a gzip'd segment")
        stranger = other_peer(peer, trusted=False, peer_id="c")
        untrusted = stranger.publish([], now - MINUTE_MS)
        # A segment under this peer's own name that it never wrote.
        forger = other_peer(peer, trusted=False, peer_id=PEER_ID)
        forger.seq = 50
        forged = forger.publish([], now - MINUTE_MS // 2)
        cursor = peer.db.get_meta(CURSOR_META_KEY)
        before = tables(peer.db)

        st = CycleState(now_ms=now)
        scan.run(peer, st)

        # The corrupt one is recorded as read, with one rejection, and not kept.
        recorded = _applied_segments(peer)
        assert recorded[corrupt] == (0, 1)
        assert corrupt not in [s.key for s in st.segments]
        # The stranger's is kept for classify to drop, refused by its seal and waited for.
        assert st.seal_problems[untrusted].reason is Rejection.UNKNOWN_KEY
        assert st.awaiting_signer == {untrusted: stranger.signer.key_id}
        # The forged one is recorded (never to be listed again) but moves no cursor.
        assert forged in recorded and forged not in st.own_keys
        assert set(recorded) == {corrupt, forged, *st.own_keys}
        assert changed_tables(before, tables(peer.db)) == {"applied_segments"}
        assert peer.db.get_meta(CURSOR_META_KEY) == cursor
        # Only the good segment's time reached the clock.
        assert parse_segment_key(good).hlc <= peer.clock.last < parse_segment_key(corrupt).hlc


def test_a_crash_inside_scan_reads_the_same_segments_next_cycle_and_applies_them_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        now = clock.now_ms()
        other = other_peer(peer)
        retitle = _retitle(peer, 2, "dogs", now - 2000)
        pulse_hlc = hlc_from_ms(now - 1000)
        pulse = PulseEntry(
            hlc=pulse_hlc,
            origin=OTHER_ID,
            pulse=seeded_pulse(peer, 7, origin=OTHER_ID, hlc=pulse_hlc),
        )
        first = other.publish([retitle], now - 2000)
        second = other.publish([pulse], now - 1000)
        cursor = peer.db.get_meta(CURSOR_META_KEY)
        keep = scan._keep
        kept: list[str] = []

        def keep_then_die(*args: object) -> None:
            if kept:
                raise Killed  # dies reading the second segment
            keep(*args)  # type: ignore[arg-type]
            kept.append("first")

        monkeypatch.setattr(scan, "_keep", keep_then_die)
        with pytest.raises(Killed):
            run_cycle_blocking(peer)
        monkeypatch.undo()
        # Nothing of either segment was recorded or applied; the cursor stayed.
        assert first not in _applied_segments(peer) and second not in _applied_segments(peer)
        assert entry_statuses(peer.db) == {}
        assert peer.db.get_meta(CURSOR_META_KEY) == cursor
        assert peer.db.observation(2).title != "dogs"  # type: ignore[union-attr]

    with opened_peer(tmp_path, clock) as peer:  # the restart after the crash
        again = run_cycle_blocking(peer).stats
        assert again["scan"]["fetched"] == 2
        assert entry_statuses(peer.db) == {retitle.id: "applied", pulse.id: "applied"}
        assert peer.db.observation(2).title == "dogs"  # type: ignore[union-attr]
        assert scalar(peer.db, "SELECT count(*) FROM applied_pulses") == 1
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'pulse'") == 1
        assert {first, second} <= set(_applied_segments(peer))
        assert int(peer.db.get_meta(CURSOR_META_KEY) or "0") > int(cursor or "0")
        # Read once: the next cycle neither fetches nor applies them again.
        assert run_cycle_blocking(peer).stats["scan"]["fetched"] == 0
        assert scalar(peer.db, "SELECT count(*) FROM journal WHERE kind = 'pulse'") == 1
