"""Migration 0019: the words of learned questions have a full-text table of their own.

bm25() divides a row's score by its length over every column of its table, so learned
words kept beside a chunk's content ranked that chunk lower by its own words for every
other query: learning a key cost new questions. Apart, a chunk's content ranks the same
whatever it learned, and the learned words are still found as their own list.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.lexical import CONTENT_COLUMN, LEARNED_COLUMN, search_lexical
from tests.store_helpers import migrations_before, tombstone

NOW_MS = 1_800_000_000_000
#: Two chunks the query "winter ferry" matches alike: same words matched, same length.
TEXTS = ("the winter ferry leaves from pier four", "the winter ferry leaves from pier nine")
#: A long question the first chunk learned to answer (none of the query's words).
LEARNED = "which pier does the boat to the island use on weekdays during the cold months"
DIM = 4


def _learn(db: Database, chunk_id: int, text: str) -> None:
    embedding = np.full(DIM, 0.5, dtype=np.float32)
    key = key_store.StoredKey(chunk_id, embedding, text, 1.0, NOW_MS)
    with db.transaction():
        key_store.replace_keys(db, chunk_id, [key])


def _two_chunks(db: Database) -> list[int]:
    with db.transaction():
        added = db.add_observations([NewObservation(content=t) for t in TEXTS], now_ms=NOW_MS)
    return [a.rowid for a in added]


def test_learned_words_leave_a_chunks_own_ranking_as_it_was(tmp_path: Path) -> None:
    db = Database(tmp_path / "d.db")
    try:
        first, second = _two_chunks(db)
        before = search_lexical(db, "winter ferry", 10, cold=None)
        assert before == [first, second]  # a tie: the smaller rowid first
        _learn(db, first, LEARNED)
        assert search_lexical(db, "winter ferry", 10, cold=None) == before
        assert search_lexical(db, "boat island", 10, cold=None, column=LEARNED_COLUMN) == [first]
        assert search_lexical(db, "boat island", 10, cold=None, column=CONTENT_COLUMN) == []
    finally:
        db.close()


def test_keys_replaced_or_tombstoned_take_their_words_with_them(tmp_path: Path) -> None:
    db = Database(tmp_path / "d.db")
    try:
        first, _ = _two_chunks(db)
        _learn(db, first, LEARNED)
        _learn(db, first, "where do the ferries dock")
        assert search_lexical(db, "boat island", 10, cold=None, column=LEARNED_COLUMN) == []
        assert search_lexical(db, "ferries dock", 10, cold=None, column=LEARNED_COLUMN) == [first]
        assert tombstone(db, db.observations([first])[first].content_hash, NOW_MS) == first
        assert db.fetch_all("SELECT rowid FROM learned_fts") == []
    finally:
        db.close()


def test_the_migration_moves_learned_words_out_of_recall_fts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    with migrations_before(monkeypatch, 19):
        old = Database(path)
        first, second = _two_chunks(old)
        with old.transaction():
            old.conn.execute("UPDATE recall_fts SET learned = ? WHERE rowid = ?", (LEARNED, first))
        # Before 0019 the learned words lengthen the first chunk: it ranks second.
        assert search_lexical(old, "winter ferry", 10, cold=None) == [second, first]
        old.close()
    db = Database(path)
    try:
        assert search_lexical(db, "winter ferry", 10, cold=None) == [first, second]
        assert search_lexical(db, "boat island", 10, cold=None, column=LEARNED_COLUMN) == [first]
        assert db.fetch_all("SELECT rowid FROM recall_fts WHERE learned != ''") == []
    finally:
        db.close()
