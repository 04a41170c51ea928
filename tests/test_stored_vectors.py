"""Recall's memory of stored embeddings (store/read_paths.StoredVectors) gives each chunk
the embedding the database holds, keeps only admitted chunks' (a pending chunk may be
embedded again), serves one model's embeddings only, and finds chunks whose rowids lie
past everything it held before."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import apsw
import numpy as np
import pytest

from dreamcycle.daemon.config import Config, ConfigError
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store import read_paths, tiers
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.read_paths import StoredVectors
from tests.phase_helpers import phase_config

NOW_MS = 1_800_000_000_000
DIM = 8
VERSION = "m/8"


def _add(db: Database, count: int, rng: np.random.Generator, *, admitted: bool) -> list[int]:
    items = [NewObservation(content=f"chunk {rng.integers(1 << 62)}") for _ in range(count)]
    with db.transaction():
        rowids = [a.rowid for a in db.add_observations(items, now_ms=NOW_MS)]
        vectors = rng.standard_normal((count, DIM)).astype(np.float32)
        db.set_embeddings(rowids, vectors, model_id="m", index_version=VERSION)
        if admitted:
            db.conn.executemany(
                "UPDATE observations SET admitted_seq = 0 WHERE id = ?", [(r,) for r in rowids]
            )
    return rowids


def _stored(db: Database, rowids: list[int]) -> np.ndarray:
    rows = dict(
        db.fetch_all(
            f"SELECT id, embedding FROM observations WHERE id IN ({','.join('?' * len(rowids))})",
            tuple(rowids),
        )
    )
    return np.stack([np.frombuffer(bytes(rows[r]), dtype="<f4") for r in rowids])


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "d.db")
    yield database
    database.close()


def test_gather_returns_the_stored_rows_and_keeps_only_admitted_ones(db: Database) -> None:
    rng = np.random.default_rng(7)
    admitted = _add(db, 30, rng, admitted=True)
    pending = _add(db, 5, rng, admitted=False)
    vectors = StoredVectors()
    wanted = [pending[0], *admitted[::-1], pending[3]]
    matrix, present = vectors.gather(db, wanted, VERSION)
    assert present.all()
    np.testing.assert_array_equal(matrix, _stored(db, wanted))
    assert len(vectors) == len(admitted)
    # Now from memory alone (the same rows), and still a read for the pending ones.
    again, _ = vectors.gather(db, admitted, VERSION)
    np.testing.assert_array_equal(again, _stored(db, admitted))
    assert len(vectors) == len(admitted)


def test_a_chunk_past_every_held_rowid_is_read_and_then_held(db: Database) -> None:
    rng = np.random.default_rng(8)
    first = _add(db, 20, rng, admitted=True)
    vectors = StoredVectors()
    assert vectors.load_all(db, VERSION) == len(first)
    later = _add(db, 300, rng, admitted=True)
    asked = [later[-1], first[0], later[0]]
    matrix, present = vectors.gather(db, asked, VERSION)
    assert present.all()
    np.testing.assert_array_equal(matrix, _stored(db, asked))
    assert len(vectors) == len(first) + 2
    assert vectors.load_all(db, VERSION) == len(first) + len(later)
    np.testing.assert_array_equal(vectors.gather(db, later, VERSION)[0], _stored(db, later))


def test_a_rowid_without_an_embedding_is_reported_absent(db: Database) -> None:
    rng = np.random.default_rng(9)
    held = _add(db, 4, rng, admitted=True)
    with db.transaction():
        bare = db.add_observations([NewObservation(content="never embedded")], now_ms=NOW_MS)
    vectors = StoredVectors()
    vectors.load_all(db, VERSION)
    asked = [held[1], bare[0].rowid, 10_000_000, held[0]]
    matrix, present = vectors.gather(db, asked, VERSION)
    assert present.tolist() == [True, False, False, True]
    np.testing.assert_array_equal(matrix, _stored(db, [held[1], held[0]]))


@pytest.mark.parametrize("dim", [DIM, 3], ids=["same dimension", "another dimension"])
def test_embeddings_of_another_model_are_neither_held_nor_returned(db: Database, dim: int) -> None:
    """After a change of model the database holds both kinds: another model's vector,
    whatever its width, is no embedding to compare a query with."""
    rng = np.random.default_rng(11)
    ours = _add(db, 4, rng, admitted=True)
    theirs = _add(db, 2, rng, admitted=True) + _add(db, 1, rng, admitted=False)
    with db.transaction():
        db.set_embeddings(
            theirs, rng.standard_normal((3, dim)).astype(np.float32), model_id="other",
            index_version=f"other/{dim}",
        )  # fmt: skip
    asked = [theirs[0], ours[2], theirs[2], ours[0], theirs[1]]
    for loaded in (False, True):
        vectors = StoredVectors()
        if loaded:
            assert vectors.load_all(db, VERSION) == len(ours)
        matrix, present = vectors.gather(db, asked, VERSION)
        assert present.tolist() == [False, True, False, True, False]
        np.testing.assert_array_equal(matrix, _stored(db, [ours[2], ours[0]]))
        with pytest.raises(ValueError, match="other/"):
            vectors.gather(db, asked, f"other/{dim}")


def test_rowids_beyond_the_held_range_are_served_but_not_held(db: Database) -> None:
    rng = np.random.default_rng(10)
    held = _add(db, 3, rng, admitted=True)
    far = read_paths.MAX_HELD_ROWID + 5
    with db.transaction():
        db.conn.execute("UPDATE observations SET id = ? WHERE id = ?", (far, held[2]))
    vectors = StoredVectors()
    asked = [held[0], far]
    for _ in range(2):
        matrix, present = vectors.gather(db, asked, VERSION)
        assert present.all()
        np.testing.assert_array_equal(matrix, _stored(db, asked))
        assert len(vectors) == 1


def test_gather_takes_an_array_of_rowids_with_some_not_held(db: Database) -> None:
    rng = np.random.default_rng(11)
    admitted = _add(db, 10, rng, admitted=True)
    pending = _add(db, 3, rng, admitted=False)
    wanted = np.array([admitted[2], pending[1], admitted[7]], dtype=np.int64)
    matrix, present = StoredVectors().gather(db, wanted, VERSION)
    assert present.all()
    np.testing.assert_array_equal(matrix, _stored(db, wanted.tolist()))


def test_gather_reads_more_rows_than_one_statement_may_name(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(13)
    pending = _add(db, 40, rng, admitted=False)
    # As if SQLite took 16 parameters at most, as it takes 32,766 by default.
    db.conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER, 16)
    monkeypatch.setattr(read_paths, "LOAD_BATCH", 16)
    matrix, present = StoredVectors().gather(db, pending, VERSION)
    assert present.all()
    db.conn.limit(apsw.SQLITE_LIMIT_VARIABLE_NUMBER, 32766)
    np.testing.assert_array_equal(matrix, _stored(db, pending))


def test_gather_interleaves_held_rows_with_rows_read_and_skips_rows_without_one(
    db: Database,
) -> None:
    rng = np.random.default_rng(17)
    admitted = _add(db, 6, rng, admitted=True)
    pending = _add(db, 3, rng, admitted=False)
    with db.transaction():
        bare = db.add_observations([NewObservation(content="not embedded")], now_ms=NOW_MS)
    vectors = StoredVectors()
    vectors.gather(db, admitted, VERSION)
    assert len(vectors) == len(admitted)
    wanted = [pending[0], admitted[3], bare[0].rowid, pending[2], admitted[1]]
    matrix, present = vectors.gather(db, np.array(wanted, dtype=np.int64), VERSION)
    assert present.tolist() == [True, True, False, True, True]
    kept = [rowid for rowid, found in zip(wanted, present.tolist(), strict=True) if found]
    np.testing.assert_array_equal(matrix, _stored(db, kept))


def test_a_bounded_memory_holds_the_newest_live_chunks_and_reads_the_rest(
    db: Database,
) -> None:
    rng = np.random.default_rng(19)
    admitted = _add(db, 30, rng, admitted=True)
    cold = admitted[-4:]
    with db.transaction():
        tiers.move_to_cold(db, cold, reason="test", now_ms=NOW_MS)
    room = 10
    vectors = StoredVectors(held_bytes=room * DIM * 4 + DIM)  # a part-row is no row
    assert vectors.load_all(db, VERSION) == room
    live = [rowid for rowid in admitted if rowid not in cold]
    # Live before cold, the newest first: recall meets the live index's chunks most.
    assert _held(vectors, admitted) == set(live[-room:])
    for _ in range(2):
        matrix, present = vectors.gather(db, admitted[::-1], VERSION)
        assert present.all()
        np.testing.assert_array_equal(matrix, _stored(db, admitted[::-1]))
        assert len(vectors) == room
    assert vectors._matrix.shape[0] == room


def test_a_bounded_memory_keeps_what_it_reads_until_full(db: Database) -> None:
    rng = np.random.default_rng(23)
    admitted = _add(db, 12, rng, admitted=True)
    vectors = StoredVectors(held_bytes=5 * DIM * 4)
    vectors.gather(db, admitted[:3], VERSION)
    assert _held(vectors, admitted) == set(admitted[:3])
    matrix, present = vectors.gather(db, admitted[2:9], VERSION)
    assert present.all()
    np.testing.assert_array_equal(matrix, _stored(db, admitted[2:9]))
    assert _held(vectors, admitted) == set(admitted[:5])
    assert StoredVectors(held_bytes=0).load_all(db, VERSION) == 0
    with pytest.raises(ValueError, match="held_bytes"):
        StoredVectors(held_bytes=-1)


def test_a_bounded_memory_is_allocated_once_and_never_copied(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Growing by doubling held the old matrix beside the new one: half as much again at
    the peak, with a million chunks' embeddings to hold."""
    rng = np.random.default_rng(29)
    admitted = _add(db, 40, rng, admitted=True)
    monkeypatch.setattr(read_paths, "LOAD_BATCH", 7)
    vectors = StoredVectors(held_bytes=30 * DIM * 4)
    vectors.gather(db, admitted[:2], VERSION)
    first = vectors._matrix
    assert first.shape == (30, DIM)
    assert vectors.load_all(db, VERSION) == 30
    assert vectors._matrix is first
    matrix, present = vectors.gather(db, admitted, VERSION)
    assert present.all()
    np.testing.assert_array_equal(matrix, _stored(db, admitted))


def _held(vectors: StoredVectors, rowids: list[int]) -> set[int]:
    """Which of `rowids` are held in memory."""
    positions = vectors._positions(rowids)
    return {rowid for rowid, at in zip(rowids, positions.tolist(), strict=True) if at >= 0}


def test_recall_holds_what_the_configuration_lets_it(tmp_path: Path) -> None:
    def config(mib: int) -> Config:
        return phase_config(tmp_path, **{"recall.embeddings_held_mib": mib})

    rt = Runtime.open(config(3))
    try:
        assert recall_state(rt).stored_vectors._held_bytes == 3 << 20
    finally:
        rt.close()
    with pytest.raises(ConfigError, match=r"recall\.embeddings_held_mib"):
        config(-1)


class _Index:
    """A live index holding some labels' vectors, as store/index_graph.py answers."""

    def __init__(self, vectors: dict[int, np.ndarray], version: str = VERSION) -> None:
        self._vectors = vectors
        self.index_version = version
        self.asked: list[list[int]] = []

    def live_vectors(self, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.asked.append(labels.tolist())
        present = np.array([label in self._vectors for label in labels.tolist()], dtype=bool)
        found = [self._vectors[label] for label in labels.tolist() if label in self._vectors]
        return (np.stack(found) if found else np.zeros((0, DIM), np.float32)), present


def test_once_full_chunks_not_held_come_from_the_live_index_and_the_rest_from_the_database(
    db: Database,
) -> None:
    rng = np.random.default_rng(29)
    admitted = _add(db, 12, rng, admitted=True)
    stored = dict(zip(admitted, _stored(db, admitted), strict=True))
    # The index's copies differ from the stored rows, to tell where each row came from.
    index = _Index({rowid: stored[rowid] + 1 for rowid in admitted[4:8]})
    vectors = StoredVectors(held_bytes=2 * DIM * 4)
    vectors.gather(db, admitted[:2], VERSION)
    wanted = [admitted[9], admitted[5], admitted[0], 10_000_000, admitted[1], admitted[7]]
    matrix, present = vectors.gather(db, wanted, VERSION, index=index)
    assert present.tolist() == [True, True, True, False, True, True]
    expected = [stored[admitted[9]], stored[admitted[5]] + 1, stored[admitted[0]]]
    expected += [stored[admitted[1]], stored[admitted[7]] + 1]
    np.testing.assert_array_equal(matrix, np.stack(expected))
    assert index.asked == [[admitted[9], admitted[5], 10_000_000, admitted[7]]]
    # While there is room, what is read comes from the database and is held.
    roomy, asked = StoredVectors(held_bytes=100 * DIM * 4), _Index(index._vectors)
    matrix, _ = roomy.gather(db, admitted[4:6], VERSION, index=asked)
    np.testing.assert_array_equal(matrix, np.stack([stored[r] for r in admitted[4:6]]))
    assert asked.asked == [] and len(roomy) == 2
    # Another model's index is not asked.
    other = _Index({admitted[9]: stored[admitted[9]] + 1}, version="other/8")
    matrix, _ = vectors.gather(db, [admitted[9]], VERSION, index=other)
    np.testing.assert_array_equal(matrix, stored[admitted[9]][None, :])
    assert other.asked == []
