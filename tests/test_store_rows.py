"""The table modules of store/, each through a real database file: what they write, and the
named rows they read back."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.store import database, read_paths, tiers
from dreamcycle.store.attributions import SuccessfulDecision
from dreamcycle.store.database import Database, DatabaseError, NewObservation
from dreamcycle.store.journal import JournalStep
from dreamcycle.store.outbox import PreparedSegment
from dreamcycle.store.salience_rows import DecayCandidate
from dreamcycle.store.timefmt import iso_from_ms

NOW_MS = 1_800_000_000_000
HOUR_MS = 3_600_000


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "store.db")
    try:
        yield database
    finally:
        database.close()


def _admitted_chunks(db: Database, contents: list[str], *, now_ms: int) -> list[int]:
    with db.transaction():
        added = db.add_observations([NewObservation(content=c) for c in contents], now_ms=now_ms)
        for seq, item in enumerate(added, start=1):
            db.mark_admitted(item.rowid, seq)
    return [item.rowid for item in added]


def test_the_outbox_hands_entries_out_in_log_order_and_marks_them_applied(db: Database) -> None:
    with db.transaction():
        for entry_id, hlc in (("e-late", 30), ("e-b", 10), ("e-a", 10)):
            assert db.outbox_add(entry_id, "outcome", hlc, {"id": entry_id}, now_ms=NOW_MS)
        assert not db.outbox_add("e-a", "outcome", 10, {"id": "again"}, now_ms=NOW_MS)
        assert db.outbox_add("e-req", "pulse", 20, {}, now_ms=NOW_MS, request_key="req-1")
    assert db.request_entry("req-1") == "e-req"
    assert db.request_entry("req-2") is None

    unapplied = db.outbox_unapplied()
    assert [entry_id for entry_id, _ in unapplied] == ["e-a", "e-b", "e-req", "e-late"]
    assert unapplied[0][1] == {"id": "e-a"}  # the first body queued, not the duplicate's
    assert db.outbox_unpublished(10) == []  # nothing is published before it applies here

    with db.transaction():
        db.outbox_mark_applied(["e-a", "e-late"])
    assert [e for e, _ in db.outbox_unapplied()] == ["e-b", "e-req"]
    assert [e for e, _ in db.outbox_unpublished(10)] == ["e-a", "e-late"]
    assert [e for e, _ in db.outbox_unpublished(1)] == ["e-a"]


def test_a_prepared_segment_is_a_named_row_until_it_is_finished(db: Database) -> None:
    with db.transaction():
        for entry_id in ("e-1", "e-2", "e-3"):
            db.outbox_add(entry_id, "pulse", 5, {}, now_ms=NOW_MS, applied=True)
        db.prepare_segment(7, "seg/p/0007", b"\x1f\x8bsegment", 5, ["e-1", "e-2"], now_ms=NOW_MS)

    [prepared] = db.prepared_segments()
    assert isinstance(prepared, PreparedSegment)
    assert prepared == PreparedSegment(seq=7, key="seg/p/0007", data=b"\x1f\x8bsegment", hlc=5)
    assert [e for e, _ in db.outbox_unpublished(10)] == ["e-3"]  # packed entries are not again
    assert db.segment_written("seg/p/0007")
    assert not db.segment_written("seg/p/0008")

    with db.transaction():
        db.finish_segment(prepared.seq, "published")
    assert db.prepared_segments() == []
    assert db.counts()["outbox_unpublished"] == 1


def test_journal_steps_come_back_named_in_order_and_only_gain_fields(db: Database) -> None:
    with db.transaction():
        first = db.journal("downscale", "cycle-1", {"chunks": 3}, now_ms=NOW_MS)
        second = db.journal("pulse", "p-1", {"delta": 0.25}, now_ms=NOW_MS + 1)
        db.amend_journal(first, {"stopped_after": 2})

    steps = list(db.journal_entries())
    assert all(isinstance(step, JournalStep) for step in steps)
    assert steps == [
        JournalStep(first, "downscale", "cycle-1", {"chunks": 3, "stopped_after": 2}, NOW_MS),
        JournalStep(second, "pulse", "p-1", {"delta": 0.25}, NOW_MS + 1),
    ]
    assert steps[1].body["delta"] == 0.25
    assert db.journal_counts() == {"downscale": 1, "pulse": 1}
    with pytest.raises(KeyError, match="no journal step 99"):
        db.amend_journal(99, {"x": 1})


def test_decay_candidates_are_named_rows_the_longest_waiting_first(db: Database) -> None:
    older, newer, gone = _admitted_chunks(db, ["alpha fact", "beta fact", "gamma"], now_ms=NOW_MS)
    with db.transaction():
        db.mark_decayed(NOW_MS + 2 * HOUR_MS, [newer])
        db.tombstone(
            db.observation(gone).content_hash,  # type: ignore[union-attr]
            reason="wrong", origin_peer="p", now_ms=NOW_MS,
            collectable_after_ms=None, journal_seq=None,
        )  # fmt: skip

    candidates = db.decay_candidates()
    assert [rowid for rowid, *_ in candidates] == [older, newer]
    first = candidates[0]
    assert isinstance(first, DecayCandidate)
    assert first.kind == "note"
    assert first.decay_from == iso_from_ms(NOW_MS)
    assert first.stability == db.stabilities()[older]
    rowid, kind, decay_from, stability = candidates[1]  # still unpacks positionally
    assert (rowid, kind, decay_from, stability) == (
        newer,
        "note",
        iso_from_ms(NOW_MS + 2 * HOUR_MS),
        db.stabilities()[newer],
    )

    assert [rowid for rowid, *_ in db.decay_candidates(due_by_ms=NOW_MS + HOUR_MS)] == [older]
    assert [rowid for rowid, *_ in db.decay_candidates(limit=1)] == [older]


def test_a_successful_decision_comes_back_named_with_its_query(db: Database) -> None:
    query_vector = np.linspace(-1.0, 1.0, 8, dtype=np.float32)
    with db.transaction():
        recorded = db.record_attribution(
            "d-1", ["h-b", "h-a"], peer="me", hlc=100, ts_ms=NOW_MS,
            decision_text="chose the ferry", ranked=["h-b", "h-a"],
            query_text="winter ferry", query_embedding=query_vector,
        )  # fmt: skip
        again = db.record_attribution(
            "d-1", ["h-c"], peer="me", hlc=101, ts_ms=NOW_MS, decision_text="other"
        )
        db.record_attribution("d-2", ["h-c"], peer="me", hlc=102, ts_ms=NOW_MS, decision_text="x")
        assert db.record_outcome(
            "o-1", decision_hash="d-1", reward=0.8, observer_peer="me", hlc=110,
            reason="it sailed", expires_ms=NOW_MS + HOUR_MS, cited=["h-b"],
        )  # fmt: skip
        assert not db.record_outcome(
            "o-1", decision_hash="d-2", reward=-1.0, observer_peer="me", hlc=111,
            reason="dup", expires_ms=NOW_MS,
        )  # fmt: skip
    assert recorded and not again
    assert db.attribution("d-1").chunk_hashes == ["h-a", "h-b"]  # type: ignore[union-attr]

    [decision] = db.successful_decisions("me", since_ms=NOW_MS - HOUR_MS, limit=10)
    assert isinstance(decision, SuccessfulDecision)
    assert decision.decision_hash == "d-1"
    assert decision.ranked == ["h-b", "h-a"]
    assert decision.cited == ["h-b"]
    assert decision.query_text == "winter ferry"
    np.testing.assert_array_equal(decision.query_embedding, query_vector)
    assert db.successful_decisions("someone-else", since_ms=0, limit=10) == []

    [waiting] = db.waiting_outcomes()
    assert (waiting.outcome_id, waiting.decision_hash, waiting.reward) == ("o-1", "d-1", 0.8)
    with db.transaction():
        db.settle_outcome("o-1", "converted", pulses=2)
    assert db.waiting_outcomes() == []


def test_the_first_tombstone_of_a_hash_wins_and_hides_the_chunk(db: Database) -> None:
    [rowid] = _admitted_chunks(db, ["retract me"], now_ms=NOW_MS)
    digest = db.observation(rowid).content_hash  # type: ignore[union-attr]

    def tombstone(reason: str) -> int | None:
        with db.transaction():
            return db.tombstone(
                digest, reason=reason, origin_peer="p", now_ms=NOW_MS,
                collectable_after_ms=None, journal_seq=None,
            )  # fmt: skip

    assert tombstone("wrong") == rowid
    assert tombstone("superseded") is None
    assert db.is_tombstoned_hash(digest)
    assert not db.observation(rowid).live  # type: ignore[union-attr]
    assert db.tombstones_by_reason() == {"wrong": 1}
    assert db.live_and_tombstoned() == (0, 1)


def test_segments_entries_and_cycles_are_recorded_once(db: Database) -> None:
    with db.transaction():
        for rejected in (0, 5):
            db.record_segment("seg/a", entries=3, rejected=rejected, skipped=0, now_ms=NOW_MS)
            db.record_entry("e-1", kind="pulse", hlc=1, origin="a", status="applied", reason=None)
        cycle = db.start_cycle(NOW_MS)
        stale = db.start_cycle(NOW_MS + 1)
        db.finish_cycle(cycle, status="ok", phases={"scan": 1}, now_ms=NOW_MS + 2)
    assert db.segment_applied("seg/a") and not db.segment_applied("seg/b")
    assert db.entry_seen("e-1") and not db.entry_seen("e-2")
    assert db.fetch_one("SELECT rejected FROM applied_segments WHERE key = 'seg/a'")[0] == 0

    with db.transaction():
        assert db.abandon_running_cycles() == 1
    last = db.last_cycle()
    assert last is not None
    assert (last["id"], last["status"]) == (stale, "interrupted")


def test_the_cold_tier_reads_from_its_index_agree_with_the_rows(db: Database) -> None:
    """Counts, the re-ingested search and the tier sets read the cold tier from its own
    indexes (migrations 0013 and 0014): they must see what the rows say, tombstones and re-ingests
    included, and a read that visited the rows instead would find the same."""
    live, stays_cold, seen_again, retracted = _admitted_chunks(
        db, ["still live", "swept and left", "swept then ingested again", "swept then retracted"],
        now_ms=NOW_MS,
    )  # fmt: skip
    with db.transaction():
        moved = tiers.move_to_cold(
            db, [stays_cold, seen_again, retracted], reason="sweep", now_ms=NOW_MS + HOUR_MS
        )
        db.add_observations([NewObservation(content="swept then ingested again")],
                            now_ms=NOW_MS + 2 * HOUR_MS)  # fmt: skip
        db.tombstone(
            db.observation(retracted).content_hash,  # type: ignore[union-attr]
            reason="wrong", origin_peer="p", now_ms=NOW_MS + 2 * HOUR_MS,
            collectable_after_ms=None, journal_seq=None,
        )  # fmt: skip
    assert sorted(moved) == sorted([stays_cold, seen_again, retracted])

    assert tiers.reingested_cold(db) == [seen_again]
    assert read_paths.tier_sets(db).cold == frozenset({stays_cold, seen_again})
    assert db.live_and_tombstoned() == (1, 1)
    assert db.counts()["cold"] == 2
    # The same questions asked of the rows themselves.
    from_rows = db.fetch_all(
        "SELECT id, last_seen_at > cold_at FROM observations NOT INDEXED "
        "WHERE cold_at IS NOT NULL AND deleted_at IS NULL ORDER BY id"
    )
    assert [(int(a), bool(b)) for a, b in from_rows] == [(stays_cold, False), (seen_again, True)]
    assert db.observation(live).live  # type: ignore[union-attr]
    # Revived, the re-ingested chunk leaves the search's own index (migration 0014).
    with db.transaction():
        assert tiers.revive(db, seen_again)
    assert tiers.reingested_cold(db) == []


def _live_and_tombstoned_from_rows(db: Database) -> tuple[int, int]:
    row = db.fetch_one(
        "SELECT (SELECT count(*) FROM observations NOT INDEXED "
        "WHERE deleted_at IS NULL AND cold_at IS NULL), "
        "(SELECT count(*) FROM tombstones NOT INDEXED)"
    )
    return int(row[0]), int(row[1])


def test_the_counts_reported_after_each_cycle_follow_every_change_and_only_then_are_read(
    db: Database,
) -> None:
    """The daemon reports the live and tombstoned counts after every cycle, from a memo
    that only a change of either may renew: each kind of change must renew it, and a
    cycle that changed neither must not read them again."""
    kept, swept = _admitted_chunks(db, ["stays live", "swept then revived"], now_ms=NOW_MS)
    assert db.live_and_tombstoned() == _live_and_tombstoned_from_rows(db) == (2, 0)

    def tombstone(digest: str) -> None:
        db.tombstone(digest, reason="wrong", origin_peer="p", now_ms=NOW_MS,
                     collectable_after_ms=None, journal_seq=None)  # fmt: skip

    kept_hash = db.observation(kept).content_hash  # type: ignore[union-attr]
    changes = {
        "a chunk added": lambda: db.add_observations(
            [NewObservation(content="added later")], now_ms=NOW_MS
        ),
        "a chunk swept": lambda: tiers.move_to_cold(db, [swept], reason="sweep", now_ms=NOW_MS),
        "a chunk revived": lambda: tiers.revive(db, swept),
        "a chunk tombstoned": lambda: tombstone(kept_hash),
        "a tombstone for a chunk held elsewhere": lambda: tombstone("f" * 64),
    }
    seen = [db.live_and_tombstoned()]
    for what, change in changes.items():
        with db.transaction():
            change()
        counts = db.live_and_tombstoned()
        assert counts == _live_and_tombstoned_from_rows(db), what
        assert counts != seen[-1], what
        seen.append(counts)
    assert seen[-1] == (2, 2)

    with db.transaction():
        db.set_meta("unrelated", "changed")
    statements: list[str] = []

    def trace(_cursor: object, sql: str, _bindings: object) -> bool:
        statements.append(sql)
        return True

    db.before_each_statement(trace)
    try:
        assert db.live_and_tombstoned() == (2, 2)
    finally:
        db.before_each_statement(None)
    assert statements and not any("count(*) FROM tombstones" in sql for sql in statements)


def test_rows_of_more_chunks_than_sqlite_binds_at_once_are_read(db: Database) -> None:
    # A sweep of a large store moves more chunks than SQLite's 32,766 parameters at once.
    rowids = _admitted_chunks(db, [f"chunk {i}" for i in range(3)], now_ms=1_000)
    with db.transaction():
        db.set_embeddings(
            rowids, np.eye(3, 4, dtype=np.float32), model_id="test", index_version="test/4"
        )
    wanted = [*rowids, *range(10_000_000, 10_040_000)]
    assert sorted(db.observations(wanted)) == rowids
    assert sorted(db.embeddings_of(wanted)) == rowids


def test_a_large_database_opens_without_reading_every_page_yet_damage_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "large.db"
    Database(path).close()
    # Every database is "large" here: only the schema and the meta table are checked.
    monkeypatch.setattr(database, "QUICK_CHECK_MAX_BYTES", 0)
    Database(path).close()
    with path.open("r+b") as damaged:
        damaged.write(b"this is not the header of an SQLite file at all")
    with pytest.raises(DatabaseError, match=r"not an SQLite database|corrupt|integrity"):
        Database(path)
