"""Phase 2, classify (daemon/cycle/classify.py): which entries may apply, and this peer's new
chunks admitted.

Checks that classify admits the chunks waiting for admission with the embeddings ingest
stored, one transaction per embedding batch, each batch in the live index before the next
(journal step, assert queued, nothing else changed); that it keeps a refused pulse's reason
in the cycle's state (recorded later by the phase that meets it) while an entry whose
signature fails is dropped from the cycle, counted against its segment and recorded
nowhere; and that a crash
between batches leaves the committed batches admitted and the rest admitted, once, by the
next cycle.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import classify, run_cycle_blocking
from dreamcycle.daemon.memory.admission import record_admission
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.entries import PulseEntry, ReconsolidateEntry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from tests.phase_helpers import (
    HOUR_MS,
    MINUTE_MS,
    OTHER_ID,
    ROWIDS,
    START_MS,
    Killed,
    changed_tables,
    content_hashes,
    entry_statuses,
    fresh_peer,
    opened_peer,
    other_peer,
    run_phase,
    run_until,
    saliences,
    scalar,
    seeded_pulse,
    tables,
)

BATCH = 5


def _admission(peer: Peer) -> tuple[set[int], Counter[str], Counter[str]]:
    """(admitted rowids, journal 'chunk' steps by hash, asserts queued by hash)."""
    admitted = {
        int(r[0])
        for r in peer.db.fetch_all("SELECT id FROM observations WHERE admitted_seq IS NOT NULL")
    }
    journaled = Counter(
        str(r[0]) for r in peer.db.fetch_all("SELECT ref FROM journal WHERE kind = 'chunk'")
    )
    announced = Counter(
        str(json.loads(r[0])["content_hash"])
        for r in peer.db.fetch_all("SELECT body FROM outbox WHERE kind = 'assert'")
    )
    return admitted, journaled, announced


def _recording_batches(
    peer: Peer, monkeypatch: pytest.MonkeyPatch, *, die_at: int | None = None
) -> list[list[int]]:
    """Patch classify's admission to record each batch's rowids (and check it runs inside a
    transaction, with every earlier batch already in the live index); Killed at batch
    `die_at` (counting from 1)."""
    batches: list[list[int]] = []

    def recorded(peer_: Peer, db: Any, batch: Sequence[Any], *rest: Any) -> None:
        assert db.conn.in_transaction
        assert all(peer.index.is_live(rowid) for done in batches for rowid in done)
        if die_at is not None and len(batches) + 1 == die_at:
            raise Killed
        record_admission(peer_, db, batch, *rest)
        batches.append([chunk.rowid for chunk in batch])

    monkeypatch.setattr(classify, "record_admission", recorded)
    return batches


def test_classify_admits_pending_chunks_batch_by_batch_with_their_stored_embeddings(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock, **{"embedding.batch_size": BATCH}) as peer:
        embedded: list[list[str]] = []
        embed = peer.embedder.embed

        def watched(texts: Sequence[str]) -> Any:
            embedded.append(list(texts))
            return embed(texts)

        monkeypatch.setattr(peer.embedder, "embed", watched)
        batches = _recording_batches(peer, monkeypatch)
        st = run_until(peer, "classify")
        assert peer.index.live_count == 0
        assert _admission(peer)[0] == set()
        before_salience = saliences(peer.db)
        before = tables(peer.db)

        stats = run_phase(peer, "classify", st)

        assert stats["admitted"] == len(ROWIDS)
        assert [len(b) for b in batches] == [5, 5, 5, 1]
        assert sorted(r for b in batches for r in b) == list(ROWIDS)
        # Ingest embedded them already: nothing was embedded again.
        assert all(texts == [] for texts in embedded)
        admitted, journaled, announced = _admission(peer)
        hashes = set(content_hashes(peer.db).values())
        assert admitted == set(ROWIDS)
        assert set(journaled) == set(announced) == hashes
        assert set(journaled.values()) == set(announced.values()) == {1}
        # Asserts are applied here already: only publishing remains.
        assert scalar(peer.db, "SELECT count(*) FROM outbox WHERE applied = 0") == 0
        assert scalar(peer.db, "SELECT count(*) FROM outbox WHERE segment_seq IS NOT NULL") == 0
        assert peer.index.live_count == len(ROWIDS)
        assert all(peer.index.is_live(rowid) for rowid in ROWIDS)
        assert saliences(peer.db) == before_salience
        assert changed_tables(before, tables(peer.db)) == {
            "journal",
            "meta",
            "observations",
            "outbox",
        }
        # The index holds the stored vectors: chunk 1's is nearest to itself.
        vector = peer.db.embedding_of_hash(content_hashes(peer.db)[1], peer.embedder.index_version)
        assert vector is not None
        labels, _ = peer.index.knn_many(np.stack([vector]), 1)
        assert int(labels[0][0]) == 1


def test_refused_pulses_are_kept_for_later_phases_and_unsigned_entries_vanish(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock) as peer:
        run_cycle_blocking(peer)
        clock.advance(MINUTE_MS)
        hlc = hlc_from_ms(clock.now_ms())
        good = PulseEntry(
            hlc=hlc, origin=OTHER_ID, pulse=seeded_pulse(peer, 1, origin=OTHER_ID, hlc=hlc)
        )
        foreign_space = replace(
            seeded_pulse(peer, 4, origin=OTHER_ID, hlc=hlc + 1), index_version="another-model/384"
        ).with_id()
        wrong_space = PulseEntry(hlc=hlc + 1, origin=OTHER_ID, pulse=foreign_space)
        # Carried in b's segment but claiming c's origin: b cannot sign them.
        not_signed = ReconsolidateEntry(
            hlc=hlc + 2, origin="c", content_hash=content_hashes(peer.db)[7], changes={"title": "x"}
        )
        stranger_pulse = PulseEntry(
            hlc=hlc + 3, origin="c", pulse=seeded_pulse(peer, 10, origin="c", hlc=hlc + 3)
        )
        other = other_peer(peer)
        key = other.publish([good, wrong_space, not_signed, stranger_pulse], clock.now_ms())
        st = run_until(peer, "classify")
        before = tables(peer.db)

        stats = run_phase(peer, "classify", st)

        assert (stats["unsigned"], stats["rejected_pulses"], stats["admitted"]) == (2, 1, 0)
        assert set(st.rejected) == {wrong_space.id}
        assert st.rejected[wrong_space.id].startswith("index_version another-model/384")
        # The segment keeps how many it lost, to be recorded with it.
        (segment,) = st.segments
        assert segment.key == key
        assert [e.id for e in segment.entries] == [good.id, wrong_space.id]
        assert segment.rejected == 2
        assert changed_tables(before, tables(peer.db)) == set()

        for name in ("interleave", "reconsolidate", "salience_pulse_propagate"):
            run_phase(peer, name, st)
        # The refusal is recorded where the pulse is met; the dropped entries nowhere.
        seen = entry_statuses(peer.db)
        assert (seen[good.id], seen[wrong_space.id]) == ("applied", "rejected")
        assert not_signed.id not in seen and stranger_pulse.id not in seen
        assert scalar(peer.db, "SELECT rejected FROM applied_segments WHERE key = ?", (key,)) == 2
        pulses = {
            str(r[0]): str(r[1])
            for r in peer.db.fetch_all("SELECT pulse_id, status FROM applied_pulses")
        }
        assert pulses == {good.pulse.pulse_id: "applied", foreign_space.pulse_id: "rejected"}
        assert peer.db.observation(7).title != "x"  # type: ignore[union-attr]


def test_a_crash_between_batches_keeps_what_committed_and_the_next_cycle_admits_the_rest_once(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = ManualClock(START_MS + HOUR_MS)
    settings = {"embedding.batch_size": BATCH}
    with fresh_peer(tmp_path_factory, tmp_path, clock, **settings) as peer:
        batches = _recording_batches(peer, monkeypatch, die_at=3)
        with pytest.raises(Killed):
            run_cycle_blocking(peer)
        monkeypatch.undo()
        admitted, journaled, announced = _admission(peer)
        assert [len(b) for b in batches] == [BATCH, BATCH]
        assert admitted == {r for b in batches for r in b}
        assert len(journaled) == len(announced) == 2 * BATCH

    with opened_peer(tmp_path, clock, **settings) as peer:
        stats = run_cycle_blocking(peer).stats
        assert stats["classify"]["admitted"] == len(ROWIDS) - 2 * BATCH
        admitted, journaled, announced = _admission(peer)
        hashes = set(content_hashes(peer.db).values())
        assert admitted == set(ROWIDS)
        assert set(journaled) == set(announced) == hashes
        assert set(journaled.values()) == set(announced.values()) == {1}
        assert peer.index.live_count == len(ROWIDS)
        # Every assert published once, in this cycle's segment.
        assert stats["promote"]["published_entries"] == len(ROWIDS)
        assert run_cycle_blocking(peer).stats["classify"]["admitted"] == 0
