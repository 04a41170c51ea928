"""Migrations 0011 and 0021: tombstoned chunks leave full text, and recall's filters and the
salience cache's load read indexes.

Recall searches recall_fts without reading observations (store/lexical.py) only because a
tombstoned chunk's words are gone from it; a database tombstoned before the migration is
cleaned by it, and one tombstoned after by the trigger.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamcycle.store import embeddings, read_paths, salience_rows, tiers
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.lexical import search_lexical
from dreamcycle.store.observations import DELETION_POLICIES
from tests.store_helpers import migrations_before, tombstone

NOW_MS = 1_800_000_000_000
TEXTS = ("the ferry timetable changes in winter", "winter tyres are fitted in october")
PINNED_TEXT = "the harbour office keeps the spare keys"


def _fts_rowids(db: Database) -> set[int]:
    return {int(r[0]) for r in db.fetch_all("SELECT rowid FROM recall_fts")}


def test_a_tombstoned_chunk_leaves_full_text_and_a_live_one_stays(tmp_path: Path) -> None:
    db = Database(tmp_path / "d.db")
    try:
        with db.transaction():
            added = db.add_observations([NewObservation(content=t) for t in TEXTS], now_ms=NOW_MS)
        assert set(search_lexical(db, "winter", 10, cold=None)) == {a.rowid for a in added}
        assert tombstone(db, added[0].content_hash, NOW_MS) == added[0].rowid
        assert _fts_rowids(db) == {added[1].rowid}
        assert search_lexical(db, "winter", 10, cold=None) == [added[1].rowid]
        assert search_lexical(db, "ferry", 10, cold=None) == []
    finally:
        db.close()


def test_the_migration_removes_words_of_chunks_tombstoned_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    with migrations_before(monkeypatch, 11):
        old = Database(path)
        with old.transaction():
            added = old.add_observations([NewObservation(content=t) for t in TEXTS], now_ms=NOW_MS)
        tombstone(old, added[0].content_hash, NOW_MS)
        # Before 0011 the retracted chunk's words stay searchable.
        assert _fts_rowids(old) == {a.rowid for a in added}
        old.close()
    db = Database(path)
    try:
        assert _fts_rowids(db) == {added[1].rowid}
        assert search_lexical(db, "ferry", 10, cold=None) == []
    finally:
        db.close()


def test_filters_read_the_covering_index(tmp_path: Path) -> None:
    db = Database(tmp_path / "d.db")
    try:
        plan = " ".join(
            str(row[3])
            for row in db.fetch_all(
                "EXPLAIN QUERY PLAN SELECT id FROM observations WHERE deleted_at IS NULL "
                "AND type != 'efficacy' AND project = ? AND kind = ?",
                ("p", "fact"),
            )
        )
        assert "USING COVERING INDEX observations_filters" in plan
    finally:
        db.close()


def test_status_counts_and_saliences_read_from_indexes_equal_the_plain_queries(
    tmp_path: Path,
) -> None:
    db = Database(tmp_path / "d.db")
    try:
        texts = [f"note {n}: the deploy script step {n}" for n in range(12)]
        with db.transaction():
            added = db.add_observations([NewObservation(content=t) for t in texts], now_ms=NOW_MS)
            rowids = [a.rowid for a in added]
            db.write_salience({r: 0.05 * i for i, r in enumerate(rowids)})
            # Admitted but the last two, three cold, two tombstoned.
            db.conn.executemany(
                "UPDATE observations SET admitted_seq = 0 WHERE id = ?",
                [(r,) for r in rowids[:10]],
            )
            tiers.move_to_cold(db, rowids[2:5], reason="test", now_ms=NOW_MS)
        tombstone(db, added[6].content_hash, NOW_MS)
        tombstone(db, added[3].content_hash, NOW_MS)  # a cold one
        plain = db.fetch_all(
            "SELECT salience FROM observations WHERE deleted_at IS NULL AND cold_at IS NULL "
            "ORDER BY id"
        )
        assert db.live_saliences().tolist() == [float(r[0]) for r in plain]
        counts = db.counts()
        assert counts["live"] == 12 - 3 - 1 == len(plain)
        assert counts["cold"] == 2
        assert counts["pending_admission"] == 2
    finally:
        db.close()


def test_start_up_reads_every_chunks_salience_state_from_an_index(tmp_path: Path) -> None:
    """Migration 0021: the salience cache's load reads an index of the state alone, not the
    rows with their texts and embeddings, and answers as the table does."""
    db = Database(tmp_path / "d.db")
    try:
        with db.transaction():
            added = db.add_observations(
                [NewObservation(content=t) for t in (*TEXTS, PINNED_TEXT)], now_ms=NOW_MS
            )
            db.write_salience({added[0].rowid: 0.75})
            tiers.move_to_cold(db, [added[1].rowid], reason="test", now_ms=NOW_MS)
            db.set_pin_floor(added[2].rowid, 0.5, now_ms=NOW_MS)
            db.conn.execute(
                "UPDATE observations SET deletion_policy = 'never' WHERE id = ?",
                (added[2].rowid,),
            )
        plan = " ".join(
            str(row[3])
            for row in db.fetch_all("EXPLAIN QUERY PLAN " + salience_rows._SALIENCE_ROWS, (0,))
        )
        assert "USING COVERING INDEX observations_salience_state" in plan
        plan = " ".join(
            str(row[3])
            for row in db.fetch_all(
                "EXPLAIN QUERY PLAN " + salience_rows._SALIENCE_COLUMNS, (0, 10)
            )
        )
        assert "USING COVERING INDEX observations_salience_state" in plan
        from_table = db.fetch_all(
            "SELECT id, salience, pin_floor, deleted_at IS NOT NULL, deletion_policy, "
            "cold_at IS NOT NULL FROM observations NOT INDEXED WHERE id > 0 ORDER BY id"
        )
        as_numbers = [[*row[:4], DELETION_POLICIES.index(row[4]), row[5]] for row in from_table]
        assert db.salience_columns(limit=len(as_numbers)).tolist() == as_numbers
        assert db.salience_columns(after_rowid=added[0].rowid, limit=1).tolist() == as_numbers[1:2]
        assert from_table[0][1] == 0.75 and from_table[1][5] == 1
        assert from_table[2][2] == 0.5 and from_table[2][4] == "never"
        plan = " ".join(
            str(row[3])
            for row in db.fetch_all(
                "EXPLAIN QUERY PLAN " + salience_rows._PIN_FLOORS_BETWEEN, (0, 10)
            )
        )
        assert "USING COVERING INDEX observations_salience_state" in plan
    finally:
        db.close()


def test_an_ingest_finds_what_to_embed_through_its_index(tmp_path: Path) -> None:
    """Each batch of an ingest looks for the chunks still to embed: through an index of just
    those, not the index of live chunks and every row it names."""
    db = Database(tmp_path / "d.db")
    try:
        plan = " ".join(
            str(row[3])
            for row in db.fetch_all("EXPLAIN QUERY PLAN " + embeddings._UNEMBEDDED, (10,))
        )
        assert "observations_unembedded" in plan
        assert "TEMP B-TREE" not in plan
    finally:
        db.close()


def test_recall_loads_its_held_embeddings_in_rowid_order_without_sorting(
    tmp_path: Path,
) -> None:
    """Each batch of held embeddings is a range of rowids, not a scan of every live chunk
    through another index and a sort of all of them."""
    db = Database(tmp_path / "d.db")
    try:
        for query in (read_paths.HELD_LIVE_FIRST, read_paths.HELD_COLD_NEXT):
            plan = " ".join(
                str(row[3]) for row in db.fetch_all("EXPLAIN QUERY PLAN " + query, (9, "v", 10))
            )
            assert "INTEGER PRIMARY KEY (rowid<?)" in plan
            assert "TEMP B-TREE" not in plan
    finally:
        db.close()
