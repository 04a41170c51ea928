"""The change stamp (store/database.py) moves with every change the index and recall's
caches depend on (a row added, admitted, tombstoned, moved between tiers, deleted), not
with the others, and is seen by another connection after the commit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.store.database import Database, NewObservation, tier_stamp
from dreamcycle.store.meta import TIER_EPOCH_META_KEY

NOW_MS = 1_800_000_000_000


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "d.db")
    yield database
    database.close()


def _add(db: Database, text: str) -> int:
    with db.transaction():
        added = db.add_observations([NewObservation(content=text)], now_ms=NOW_MS)[0]
        db.set_embeddings(
            [added.rowid], np.ones((1, 4), dtype=np.float32), model_id="m", index_version="m/4"
        )
    return added.rowid


def _write(db: Database, sql: str, *params: object) -> None:
    with db.transaction():
        db.conn.execute(sql, params)


def test_each_change_the_index_depends_on_moves_the_stamp(tmp_path: Path, db: Database) -> None:
    first = _add(db, "the ferry leaves at nine")
    second = _add(db, "winter tyres in october")
    other = Database(tmp_path / "d.db", prepare=False)
    seen = {db.change_stamp()}
    changes: list[Callable[[], object]] = [
        lambda: _add(db, "a third chunk"),
        lambda: _write(db, "UPDATE observations SET admitted_seq = 1 WHERE id = ?", first),
        lambda: _write(
            db, "UPDATE observations SET deleted_at = '2027-01-01' WHERE id = ?", second
        ),
        lambda: _move_to_cold(db, first),
        lambda: _write(db, "DELETE FROM observations WHERE id = ?", first),
    ]
    for change in changes:
        before = other.change_stamp()
        change()
        after = db.change_stamp()
        assert after not in seen, f"stamp {after} came back after {len(seen)} changes"
        seen.add(after)
        # Another connection sees the commit, as recall's readers do.
        assert other.change_stamp() == after != before
    other.close()


def _move_to_cold(db: Database, rowid: int) -> None:
    """As the tier code moves a chunk: its cold mark and the tier epoch, in one commit."""
    with db.transaction():
        db.conn.execute("UPDATE observations SET cold_at = '2027-01-01' WHERE id = ?", (rowid,))
        db.next_counter(TIER_EPOCH_META_KEY)


def test_changes_the_index_does_not_depend_on_leave_the_stamp(db: Database) -> None:
    rowid = _add(db, "the ferry leaves at nine")
    stamp = db.change_stamp()
    _write(db, "UPDATE observations SET salience = 0.9, title = 't' WHERE id = ?", rowid)
    with db.transaction():
        db.set_meta("some_cursor", "42")
    assert db.change_stamp() == stamp


def test_a_rolled_back_write_leaves_the_stamp_it_found(db: Database) -> None:
    _add(db, "the ferry leaves at nine")
    stamp = db.change_stamp()

    class Undo(Exception):
        pass

    with pytest.raises(Undo), db.transaction():
        db.add_observations([NewObservation(content="never kept")], now_ms=NOW_MS)
        assert db.change_stamp() != stamp  # counted afresh inside the transaction
        raise Undo
    assert db.change_stamp() == stamp


def test_the_tier_part_moves_with_tier_changes_and_not_with_saves_or_admissions(
    db: Database,
) -> None:
    """What recall keeps per tier (the cold tier's vectors, the tombstoned and cold sets,
    learned keys) outlives a save; a tombstone, a move between tiers or a deletion ends it."""
    first = _add(db, "the ferry leaves at nine")
    second = _add(db, "winter tyres in october")
    seen = {tier_stamp(db.change_stamp())}
    for unseen in [
        lambda: _add(db, "a third chunk"),
        lambda: _write(db, "UPDATE observations SET admitted_seq = 1 WHERE id = ?", first),
    ]:
        unseen()
        assert tier_stamp(db.change_stamp()) in seen
    for change in [
        lambda: _move_to_cold(db, first),
        lambda: _write(
            db, "UPDATE observations SET deleted_at = '2027-01-01' WHERE id = ?", second
        ),
        lambda: _write(db, "DELETE FROM observations WHERE id = ?", first),
    ]:
        change()
        after = tier_stamp(db.change_stamp())
        assert after not in seen
        seen.add(after)
