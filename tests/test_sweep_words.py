"""The sweep's words kept per chunk (store/sweep_words.py, migration 0020).

The sweep weighs each chunk's words by their rarity. It reads them from numbers kept
once per chunk, through an index that holds no text: these tests check that what it
weighs so equals information_content over the chunks' texts, that a second sweep
tokenizes nothing, that a tombstoned or changed chunk is weighed as the texts say, and
that the plan is the one the candidates' form of the same chunks gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.memory import forgetting
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.information import information_content, information_of_words
from dreamcycle.pulses.sweep import SweepCandidate, plan_sweep
from dreamcycle.store import sweep_words, tiers
from dreamcycle.store.database import Database, NewObservation
from tests.phase_helpers import DAY_MS, SENTENCES, START_MS, fresh_peer, scalar


@pytest.fixture
def peer(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Iterator[Peer]:
    clock = ManualClock(START_MS + 30 * DAY_MS)
    with fresh_peer(tmp_path_factory, tmp_path, clock, **{"sweep.min_population": 0}) as opened:
        run_cycle_blocking(opened)  # admits the template's chunks
        yield opened


def _texts(peer: Peer) -> dict[int, str]:
    return {
        int(rowid): str(content)
        for rowid, content in peer.db.fetch_all(
            "SELECT id, content FROM observations WHERE deleted_at IS NULL "
            "AND admitted_seq IS NOT NULL ORDER BY id"
        )
    }


def test_the_words_kept_weigh_each_chunk_as_its_text_does(peer: Peer) -> None:
    texts = _texts(peer)
    assert len(texts) == len(SENTENCES)
    assert scalar(peer.db, "SELECT count(*) FROM chunk_words") == 0
    columns = forgetting.sweep_columns(peer.runtime, peer.salience, peer.now_ms())
    assert columns.labels.tolist() == list(texts)
    expected = information_content(list(texts.values()))
    np.testing.assert_allclose(columns.information, expected, rtol=1e-12)
    assert scalar(peer.db, "SELECT count(*) FROM chunk_words") == len(texts)


def test_a_second_sweep_reads_no_text(peer: Peer, monkeypatch: pytest.MonkeyPatch) -> None:
    first = forgetting.plan(peer.runtime, peer.salience, peer.now_ms())

    def no_text(*_: object) -> dict[int, str]:
        raise AssertionError("the words are kept: no text is read again")

    monkeypatch.setattr(sweep_words, "texts_of", no_text)
    again = forgetting.plan(peer.runtime, peer.salience, peer.now_ms())
    assert again.doomed == first.doomed
    assert dict(again.values) == dict(first.values)


def test_a_peer_sweeping_dry_moves_nothing_and_reads_each_text_once(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    live = "SELECT count(*) FROM observations WHERE cold_at IS NULL AND deleted_at IS NULL"
    before = scalar(peer.db, live)
    first = forgetting.sweep(peer, peer.now_ms(), dry_run=True)
    assert first["dry_run"] is True and isinstance(first["doomed"], int) and first["doomed"] > 0
    assert scalar(peer.db, live) == before
    assert scalar(peer.db, "SELECT count(*) FROM chunk_words") == len(_texts(peer))

    def no_text(*_: object) -> dict[int, str]:
        raise AssertionError("the words are kept: no text is read again")

    monkeypatch.setattr(sweep_words, "texts_of", no_text)
    assert forgetting.sweep(peer, peer.now_ms(), dry_run=True)["doomed"] == first["doomed"]
    assert scalar(peer.db, live) == before


def test_a_tombstoned_or_rewritten_chunk_is_weighed_as_the_texts_now_say(peer: Peer) -> None:
    forgetting.plan(peer.runtime, peer.salience, peer.now_ms())
    gone, rewritten = list(_texts(peer))[:2]
    with peer.db.transaction():
        peer.db.conn.execute(
            "UPDATE observations SET deleted_at = '2027-01-01T00:00:00.000Z' WHERE id = ?",
            (gone,),
        )
        peer.db.conn.execute(
            "UPDATE observations SET content = 'zyzzyva quokka' WHERE id = ?", (rewritten,)
        )
    assert scalar(peer.db, f"SELECT count(*) FROM chunk_words WHERE id = {rewritten}") == 0
    texts = _texts(peer)
    assert gone not in texts
    columns = forgetting.sweep_columns(peer.runtime, peer.salience, peer.now_ms())
    assert columns.labels.tolist() == list(texts)
    np.testing.assert_allclose(
        columns.information, information_content(list(texts.values())), rtol=1e-12
    )


def test_the_plan_is_the_one_the_candidates_give(peer: Peer) -> None:
    rt, cache, now_ms = peer.runtime, peer.salience, peer.now_ms()
    planned = forgetting.plan(rt, cache, now_ms)
    texts = _texts(peer)
    information = information_content(list(texts.values()))
    kinds = dict(
        (int(r), str(k)) for r, k in peer.db.fetch_all("SELECT id, kind FROM observations")
    )
    importance = dict(
        (int(r), int(i)) for r, i in peer.db.fetch_all("SELECT id, importance FROM observations")
    )
    candidates = [
        SweepCandidate(
            label=label,
            salience=cache.salience(label),
            pinned=cache.pin_floor(label) > 0,
            protected=cache.deletion_policy(label) != "auto_prune",
            kind=kinds[label],
            information=info,
            importance=importance[label],
        )
        for label, info in zip(texts, information, strict=True)
    ]
    cfg = rt.config.sweep
    by_candidates = plan_sweep(
        candidates, percentile=cfg.percentile, min_population=cfg.min_population, mix=cfg.mix()
    )
    assert planned.doomed == by_candidates.doomed
    assert planned.thresholds == pytest.approx(by_candidates.thresholds)
    assert dict(planned.values) == pytest.approx(dict(by_candidates.values))


def test_the_sweep_reads_no_row_of_text_or_embedding(peer: Peer) -> None:
    plan = " ".join(
        str(row[-1])
        for row in peer.db.fetch_all("EXPLAIN QUERY PLAN " + sweep_words._SWEEP_ROWS, (0, 10))
    )
    assert "COVERING INDEX observations_sweep" in plan


def test_a_dry_run_weighs_the_same_and_keeps_nothing(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three chunks a batch: a word met in several batches keeps one number.
    monkeypatch.setattr(forgetting, "WORDS_BATCH", 3)
    dry = forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), keep_words=False)
    assert scalar(peer.db, "SELECT count(*) FROM chunk_words") == 0
    assert scalar(peer.db, "SELECT count(*) FROM sweep_words") == 0
    kept = forgetting.plan(peer.runtime, peer.salience, peer.now_ms())
    assert dry.doomed == kept.doomed
    assert dict(dry.values) == dict(kept.values)


@pytest.mark.parametrize("batch", [1, 3, 1000])
def test_rows_read_in_batches_weigh_as_read_at_once(
    peer: Peer, monkeypatch: pytest.MonkeyPatch, batch: int
) -> None:
    forgetting.plan(peer.runtime, peer.salience, peer.now_ms())
    labels = list(_texts(peer))
    # Some chunks keep their words and some do not, interleaved.
    with peer.db.transaction():
        peer.db.conn.executemany(
            "DELETE FROM chunk_words WHERE id = ?", [(r,) for r in labels[1::3]]
        )
    monkeypatch.setattr(sweep_words, "READ_BATCH", batch)
    columns = forgetting.sweep_columns(peer.runtime, peer.salience, peer.now_ms(), keep_words=False)
    assert columns.labels.tolist() == labels
    np.testing.assert_allclose(
        columns.information, information_content(list(_texts(peer).values())), rtol=1e-12
    )


def _same_rows(kept: sweep_words.SweepRows, read: sweep_words.SweepRows) -> None:
    assert kept.labels.tolist() == read.labels.tolist()
    assert kept.kinds == read.kinds
    assert kept.importance.tolist() == read.importance.tolist()
    assert kept.created_ms.tolist() == read.created_ms.tolist()
    assert kept.cold.tolist() == read.cold.tolist()
    assert kept.word_counts.tolist() == read.word_counts.tolist()
    assert kept.word_numbers.tolist() == read.word_numbers.tolist()


def test_rows_kept_between_sweeps_are_the_rows_the_store_holds(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kept from one sweep to the next, the rows follow every change a sweep must see:
    chunks admitted (one that waited behind a newer one too), tombstoned through the
    cycle or behind its back, moved to the cold tier or back, revised. Every row is read
    again only after a revision or a tombstone the cycle did not see."""
    db, kept = peer.db, peer.sweep_rows
    whole = sweep_words.sweep_rows
    read_after: list[int] = []

    def counted(db: Database, *, after: int = 0) -> sweep_words.SweepRows:
        read_after.append(after)
        return whole(db, after=after)

    monkeypatch.setattr(sweep_words, "sweep_rows", counted)

    def gone(labels: np.ndarray) -> np.ndarray:
        return peer.salience.sweep_view(labels)[3]

    def check(*, all_read: bool) -> None:
        read_after.clear()
        forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), kept=kept)
        _same_rows(kept.read(db, gone), whole(db))
        assert (0 in read_after) is all_read

    check(all_read=True)
    labels = list(_texts(peer))
    with db.transaction():
        waiting, newer = db.add_observations(
            [NewObservation(content="a chunk that waits"), NewObservation(content="a newer one")],
            now_ms=peer.now_ms(),
        )
        db.conn.execute("UPDATE observations SET admitted_seq = 1 WHERE id = ?", (newer.rowid,))
    check(all_read=False)
    assert waiting.rowid not in kept.read(db, gone).labels.tolist()
    with db.transaction():
        db.conn.execute("UPDATE observations SET admitted_seq = 1 WHERE id = ?", (waiting.rowid,))
        tiers.move_to_cold(db, labels[:3], reason="test", now_ms=peer.now_ms())
    check(all_read=False)
    with db.transaction():
        tiers.revive(db, labels[1])
    check(all_read=False)
    with db.transaction():
        db.revise(labels[4], {"importance": 5}, now_ms=peer.now_ms())
    check(all_read=True)
    peer.salience.mark_tombstoned(labels[6])
    with db.transaction():
        db.conn.execute(
            "UPDATE observations SET deleted_at = '2027-01-01T00:00:00.000Z' WHERE id = ?",
            (labels[6],),
        )
    check(all_read=False)
    with db.transaction():
        # Tombstoned behind the salience cache's back: the count tells.
        db.conn.execute(
            "UPDATE observations SET deleted_at = '2027-01-01T00:00:00.000Z' WHERE id = ?",
            (labels[5],),
        )
    check(all_read=True)
    assert labels[5] not in kept.read(db, gone).labels.tolist()


def test_a_sweep_through_kept_rows_reads_only_what_changed(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), kept=peer.sweep_rows)
    read_after: list[int] = []
    whole = sweep_words.sweep_rows

    def counted(db: Database, *, after: int = 0) -> sweep_words.SweepRows:
        read_after.append(after)
        return whole(db, after=after)

    monkeypatch.setattr(sweep_words, "sweep_rows", counted)
    again = forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), kept=peer.sweep_rows)
    assert read_after == [max(_texts(peer))]
    assert again.doomed == first.doomed
    assert dict(again.values) == dict(first.values)


def test_a_settled_sweep_weighs_words_once_until_a_chunk_comes(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each chunk's information depends on every chunk's words: kept rows keep it while no
    chunk comes or goes, and it is weighed again, over all of them, once one does."""
    forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), kept=peer.sweep_rows)
    weigh = information_of_words
    weighed: list[int] = []

    def counted(numbers: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        weighed.append(len(lengths))
        return weigh(numbers, lengths)

    monkeypatch.setattr(forgetting, "information_of_words", counted)
    forgetting.plan(peer.runtime, peer.salience, peer.now_ms(), kept=peer.sweep_rows)
    assert weighed == []
    with peer.db.transaction():
        (added,) = peer.db.add_observations(
            [NewObservation(content="zyzzyva quokka wombat")], now_ms=peer.now_ms()
        )
        peer.db.conn.execute(
            "UPDATE observations SET admitted_seq = 1 WHERE id = ?", (added.rowid,)
        )
    columns = forgetting.sweep_columns(
        peer.runtime, peer.salience, peer.now_ms(), kept=peer.sweep_rows
    )
    assert weighed == [len(_texts(peer))]
    np.testing.assert_allclose(
        columns.information, information_content(list(_texts(peer).values())), rtol=1e-12
    )


def test_the_sweep_finds_revivals_through_an_index_of_their_own(peer: Peer) -> None:
    """Migration 0022: which chunks came back within the grace period is read from an index
    of revivals, not from the whole journal, and answers as the journal does."""
    db, labels = peer.db, list(_texts(peer))
    with db.transaction():
        tiers.move_to_cold(db, labels[:3], reason="test", now_ms=peer.now_ms())
    forgetting.revive(peer, [labels[0]], peer.now_ms() - DAY_MS)
    forgetting.revive(peer, [labels[1]], peer.now_ms())
    plan = " ".join(
        str(row[3]) for row in db.fetch_all("EXPLAIN QUERY PLAN " + tiers._REVIVED_SINCE, (0,))
    )
    assert "INDEX journal_revivals" in plan
    assert tiers.revived_since(db, peer.now_ms()) == {labels[1]}
    assert tiers.revived_since(db, peer.now_ms() - DAY_MS) == {labels[0], labels[1]}


def test_kept_rows_follow_the_peer_s_own_moves_without_reading_the_cold_tier(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sweep's moves and a revival tell the kept rows, which then need not read the cold
    tier's labels (most of a large store); a move they were not told of is read."""
    db, kept = peer.db, peer.sweep_rows
    moved = forgetting.sweep(peer, peer.now_ms())
    assert isinstance(moved["cold"], int) and moved["cold"] > 1
    cold = [
        int(r[0]) for r in db.fetch_all("SELECT id FROM observations WHERE cold_at IS NOT NULL")
    ]
    forgetting.revive(peer, cold[:1], peer.now_ms())
    fetch_all = db.fetch_all
    cold_reads: list[str] = []

    def counted(sql: str, *args: Any) -> list[Any]:
        if sql == sweep_words._COLD_LABELS:
            cold_reads.append(sql)
        return fetch_all(sql, *args)

    monkeypatch.setattr(db, "fetch_all", counted)

    def gone(labels: np.ndarray) -> np.ndarray:
        return peer.salience.sweep_view(labels)[3]

    _same_rows(kept.read(db, gone), sweep_words.sweep_rows(db))
    assert cold_reads == []
    with db.transaction():
        tiers.move_to_cold(db, [cold[0]], reason="test", now_ms=peer.now_ms())
    _same_rows(kept.read(db, gone), sweep_words.sweep_rows(db))
    assert len(cold_reads) == 1


def test_a_sweep_tells_live_chunks_from_the_state_index_not_their_rows(peer: Peer) -> None:
    """The sweep moves thousands of chunks at once: which of them are still live is read
    from the index of every chunk's state (no row, embedding and all, is read for it), and
    only those move."""
    db, labels = peer.db, list(_texts(peer))
    with db.transaction():
        tiers.move_to_cold(db, labels[:1], reason="test", now_ms=peer.now_ms())
        db.conn.execute(
            "UPDATE observations SET deleted_at = '2027-01-01T00:00:00.000Z' WHERE id = ?",
            (labels[1],),
        )
    many = labels + list(range(10**6, 10**6 + 5_000))
    marks = ",".join("?" * len(many))
    plan = " ".join(
        str(row[3])
        for row in db.fetch_all(
            "EXPLAIN QUERY PLAN " + tiers._LIVE_AMONG.format(marks=marks), tuple(many)
        )
    )
    assert "USING COVERING INDEX observations_salience_state" in plan
    with db.transaction():
        moved = tiers.move_to_cold(db, many, reason="test", now_ms=peer.now_ms())
    assert moved == labels[2:]
