"""Phase 8, promote (daemon/cycle/promote.py): this peer's entries published, and the upkeep
after a cycle.

Checks that promote reads the outbox's applied, unpublished entries and packs them into one
segment written to the log (prepared, then marked published; entries not yet applied stay
queued), heartbeats, saves the index and leaves chunks and salience alone; that a segment
prepared before a crash is published at the next cycle byte for byte and no entry is
packed twice; and that while the log is unreachable the entries wait, and go out first,
once, when it is back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.cycle.state import PUBLISH_SEQ_META_KEY
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.entries import decode_segment
from dreamcycle.zeitgeist.object_keys import heartbeat_key
from tests.phase_helpers import (
    HOUR_MS,
    MINUTE_MS,
    PEER_ID,
    ROWIDS,
    START_MS,
    Killed,
    changed_tables,
    fresh_peer,
    opened_peer,
    queue_pulse,
    run_phase,
    run_until,
    saliences,
    tables,
)

#: Soon enough that a segment keyed before lands in time (within half the log's window):
#: one published later gets a copy under a fresh key as well.
RESTART_MS = 10_000


def _segments_out(peer: Peer) -> list[tuple[int, str, str]]:
    return [
        (int(r[0]), str(r[1]), str(r[2]))
        for r in peer.db.fetch_all("SELECT seq, key, status FROM segments_out ORDER BY seq")
    ]


def _packed(peer: Peer) -> dict[str, int | None]:
    """Entry id -> the segment it went into (None: not yet packed)."""
    return {
        str(r[0]): None if r[1] is None else int(r[1])
        for r in peer.db.fetch_all("SELECT entry_id, segment_seq FROM outbox")
    }


def _logged(peer: Peer, key: str) -> bytes | None:
    path = peer.config.zeitgeist_dir / key
    return path.read_bytes() if path.exists() else None


def _heartbeat(peer: Peer) -> dict[str, Any] | None:
    path = peer.config.zeitgeist_dir / heartbeat_key(PEER_ID)
    return json.loads(path.read_bytes()) if path.exists() else None


def test_promote_packs_applied_entries_into_one_published_segment_and_heartbeats(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        st = run_until(peer, "promote")
        asserts = set(_packed(peer))
        assert len(asserts) == len(ROWIDS)
        late = queue_pulse(peer, 1)  # queued after phase 5: not applied here yet
        assert _heartbeat(peer) is None
        assert not peer.index.is_saved_at(peer.db.change_stamp())  # saved before admission
        salience = saliences(peer.db)
        before = tables(peer.db)

        stats = run_phase(peer, "promote", st)

        assert (stats["published_entries"], stats["segments"], stats["republished"]) == (
            len(ROWIDS), 1, 0,
        )  # fmt: skip
        ((seq, key, status),) = _segments_out(peer)
        assert (seq, status) == (1, "published")
        data = _logged(peer, key)
        assert data is not None
        assert data == bytes(peer.db.fetch_one("SELECT data FROM segments_out WHERE seq = 1")[0])
        assert {e.id for e in decode_segment(data).entries} == asserts
        packed = _packed(peer)
        assert {packed[e] for e in asserts} == {1} and packed[late.id] is None
        assert peer.db.get_meta(PUBLISH_SEQ_META_KEY) == "1"
        beat = _heartbeat(peer)
        assert beat is not None and (beat["peer_id"], beat["seq"]) == (PEER_ID, 1)
        assert stats["index_saved"] and peer.index.is_saved_at(peer.db.change_stamp())
        # Publishing and upkeep records only: chunks and salience stay as they were.
        assert saliences(peer.db) == salience
        assert changed_tables(before, tables(peer.db)) == {
            "checkpoint_chunks", "journal_checkpoints", "meta", "outbox", "segments_out",
        }  # fmt: skip

        clock.advance(MINUTE_MS)
        again = run_cycle_blocking(peer).stats["promote"]
        assert (again["published_entries"], again["segments"]) == (1, 1)
        assert _packed(peer)[late.id] == 2


def test_a_segment_prepared_before_a_crash_is_published_byte_for_byte_at_the_next_cycle(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:

        def die(prepared: object) -> None:
            raise Killed  # prepared and stored, never written to the log

        monkeypatch.setattr(peer.zeitgeist, "publish", die)
        with pytest.raises(Killed):
            run_cycle_blocking(peer)
        ((seq, key, status),) = _segments_out(peer)
        assert (seq, status) == (1, "prepared")
        prepared = bytes(peer.db.fetch_one("SELECT data FROM segments_out WHERE seq = 1")[0])
        assert _logged(peer, key) is None
        assert set(_packed(peer).values()) == {1}

    clock.advance(RESTART_MS)
    with opened_peer(tmp_path, clock) as peer:  # the restart after the crash
        stats = run_cycle_blocking(peer).stats["promote"]
        assert (stats["segments"], stats["published_entries"], stats["republished"]) == (1, 0, 0)
        assert _segments_out(peer) == [(1, key, "published")]
        assert _logged(peer, key) == prepared
        assert peer.db.get_meta(PUBLISH_SEQ_META_KEY) == "1"
        assert set(_packed(peer).values()) == {1}


def test_entries_wait_while_the_log_is_unreachable_and_go_out_first_once_it_is_back(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:

        def unreachable(prepared: object) -> None:
            raise BackendError("the log is down")

        with monkeypatch.context() as patch:
            patch.setattr(peer.zeitgeist, "publish", unreachable)
            stalled = run_cycle_blocking(peer).stats["promote"]
        assert stalled["stalled"] == "the log is down"
        assert peer.snapshot_check_due
        ((_, first_key, status),) = _segments_out(peer)
        assert status == "prepared" and _logged(peer, first_key) is None
        assert _heartbeat(peer) is None  # the upkeep after publishing waited too

        clock.advance(RESTART_MS)
        pulse = queue_pulse(peer, 4)
        back = run_cycle_blocking(peer).stats["promote"]

        assert "stalled" not in back
        assert (back["segments"], back["published_entries"], back["republished"]) == (2, 1, 0)
        out = _segments_out(peer)
        assert [(seq, status) for seq, _, status in out] == [(1, "published"), (2, "published")]
        assert out[0][1] == first_key
        packed = _packed(peer)
        assert packed[pulse.id] == 2
        assert {seq for entry, seq in packed.items() if entry != pulse.id} == {1}
        published = [decode_segment(_logged(peer, k) or b"").entries for _, k, _ in out]
        ids = [e.id for entries in published for e in entries]
        assert len(ids) == len(set(ids)) == len(packed)
        beat = _heartbeat(peer)
        assert beat is not None and beat["seq"] == 2
