"""Recall's reads of many rows come back from SQLite as one row (store/queries.py).

apsw lets go of the GIL for every step of a statement, and a request thread taking it
back waits out the switch interval while a dream cycle runs Python: so a read of a
hundred rows cost a hundred waits. These tests hold the reads recall makes per query to
one row each, and check that packing them loses nothing: every REAL and every text comes
back exactly, and full-text matches keep their BM25 order.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import pytest

from dreamcycle.store import read_paths
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.lexical import CONTENT_COLUMN, match_expression, search_lexical

NOW_MS = 1_800_000_000_000
CHUNKS = 60


@pytest.fixture()
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "d.db")
    rng = random.Random(7)
    words = ["harbour", "ferry", "winter", "timetable", "tyres", "october", "bridge", "toll"]
    items = [
        NewObservation(
            content=f"note {i} — “quoted” \\ back\nslash " + " ".join(rng.choices(words, k=8)),
            title=f"title {i} é",
        )
        for i in range(CHUNKS)
    ]
    with database.transaction():
        added = database.add_observations(items, now_ms=NOW_MS)
        database.conn.executemany(
            "UPDATE observations SET salience = ?, confidence = ? WHERE id = ?",
            [(rng.random(), rng.random() ** 3, a.rowid) for a in added],
        )
        database.conn.executemany(
            "UPDATE observations SET cold_at = ? WHERE id = ?",
            [("2027-01-01T00:00:00.000Z", a.rowid) for a in added[::3]],
        )
    try:
        yield database
    finally:
        database.close()


def _rows_stepped(db: Database, read: Any) -> tuple[Any, int]:
    """What `read()` returns, and how many result rows reached Python while it ran."""
    stepped = 0

    def count(_cursor: apsw.Cursor, row: Any) -> Any:
        nonlocal stepped
        stepped += 1
        return row

    db.conn.row_trace = count
    try:
        return read(), stepped
    finally:
        db.conn.row_trace = None


def _rowids(db: Database) -> list[int]:
    return [int(r[0]) for r in db.fetch_all("SELECT id FROM observations ORDER BY id")]


def test_candidate_numbers_come_back_exact_in_one_row(db: Database) -> None:
    rowids = _rowids(db)[::-1]
    (saliences, confidences, lengths), stepped = _rows_stepped(
        db, lambda: read_paths.candidate_numbers(db, rowids)
    )
    assert stepped == 1
    plain = {
        int(r[0]): (r[1], r[2], r[3])
        for r in db.fetch_all("SELECT id, salience, confidence, length(content) FROM observations")
    }
    assert saliences.tolist() == [plain[r][0] for r in rowids]
    assert confidences.tolist() == [plain[r][1] for r in rowids]
    assert lengths.tolist() == [plain[r][2] for r in rowids]


def test_hit_rows_come_back_exact_in_one_row(db: Database) -> None:
    rowids = _rowids(db)[:10]
    hits, stepped = _rows_stepped(db, lambda: read_paths.hit_rows(db, rowids))
    assert stepped == 1
    for rowid in rowids:
        row = db.fetch_one(
            "SELECT content_hash, title, content, salience, confidence, stability "
            "FROM observations WHERE id = ?",
            (rowid,),
        )
        assert hits[rowid] == read_paths.HitRow(*row)


def test_tier_sets_come_back_in_one_row_each(db: Database) -> None:
    sets, stepped = _rows_stepped(db, lambda: read_paths.tier_sets(db))
    assert stepped == 2
    cold = {
        int(r[0]) for r in db.fetch_all("SELECT id FROM observations WHERE cold_at IS NOT NULL")
    }
    assert sets.cold == cold and len(cold) == CHUNKS // 3
    assert sets.tombstoned == frozenset()


@pytest.mark.parametrize("cold", [None, False, True])
def test_full_text_matches_keep_their_order_in_one_row(db: Database, cold: bool | None) -> None:
    found, stepped = _rows_stepped(db, lambda: search_lexical(db, "winter ferry", 25, cold=cold))
    assert stepped == 1
    tier = {None: "1", False: "o.cold_at IS NULL", True: "o.cold_at IS NOT NULL"}[cold]
    plain = db.fetch_all(
        "SELECT f.rowid FROM recall_fts f JOIN observations o ON o.id = f.rowid "
        f"WHERE recall_fts MATCH ? AND {tier} ORDER BY bm25(recall_fts), f.rowid LIMIT 25",
        (f"{CONTENT_COLUMN} : ({match_expression('winter ferry')})",),
    )
    assert found == [int(r[0]) for r in plain]
    assert len(found) > 5


def test_a_packed_read_of_nothing_is_empty(db: Database) -> None:
    assert db.fetch_packed("id", "FROM observations WHERE id < 0") == []
    assert read_paths.hit_rows(db, []) == {}
