"""The persisted HNSW index: exactness, growth, tombstones, persistence, rebuilds, threads.

One file: it tests the index's modules (store/index.py and its index_* siblings: HnswIndex,
its labels, files and rebuild) through HnswIndex, with shared clustered vectors and built
indexes checked against brute force.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import blake3
import numpy as np
import pytest

from dreamcycle.store.index import (
    REBUILD_CHUNK_SIZE,
    HnswIndex,
    IndexUnusable,
    Unusable,
    open_or_rebuild,
)
from dreamcycle.store.index_file import (
    _HEADER,
    META_FORMAT,
    IndexSaveFailed,
    meta_path,
    write_engine,
)
from dreamcycle.store.index_graph import DEFAULT_EF, GROWTH_FACTOR, INITIAL_CAPACITY
from dreamcycle.store.index_input import InvalidIndexInput, LabelNotLive
from dreamcycle.store.index_labels import MAX_MASKED_LABEL
from dreamcycle.store.readers_writer_lock import ReadersWriterLock

DIM = 32
VERSION = "test-model/32"
CLUSTERS = 12
CLUSTER_SPREAD = 0.35


def clustered_unit_vectors(count: int, dim: int = DIM, seed: int = 0) -> np.ndarray:
    """Unit vectors around a few centres, like embeddings of topical text."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((CLUSTERS, dim))
    points = centres[rng.integers(0, CLUSTERS, count)]
    points = points + CLUSTER_SPREAD * rng.standard_normal((count, dim))
    unit: np.ndarray = (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)
    return unit


def brute_force_knn(
    labels: np.ndarray, vectors: np.ndarray, queries: np.ndarray, k: int
) -> tuple[np.ndarray, np.ndarray]:
    distances = 1.0 - queries @ vectors.T
    order = np.argsort(distances, axis=1, kind="stable")[:, :k]
    return labels[order], np.take_along_axis(distances, order, axis=1)


def labels_range(start: int, stop: int) -> np.ndarray:
    return np.arange(start, stop, dtype=np.int64)


def built_index(path: Path, count: int, seed: int = 0) -> tuple[HnswIndex, np.ndarray]:
    vectors = clustered_unit_vectors(count, seed=seed)
    index = HnswIndex.create(path, DIM, VERSION)
    index.add(labels_range(0, count), vectors)
    return index, vectors


class DatabaseState:
    """Stands in for the database's view: what `load_all` would return, and call counts."""

    def __init__(
        self,
        live: np.ndarray,
        vectors: np.ndarray,
        deleted: np.ndarray,
        cold: np.ndarray | None = None,
    ) -> None:
        self.live = live
        self.vectors = vectors
        self.deleted = deleted
        self.cold = cold if cold is not None else np.zeros(0, dtype=np.int64)
        self.calls = 0

    def load_all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Live and cold labels with their vectors, the cold ones, the tombstoned ones."""
        self.calls += 1
        return self.live, self.vectors, self.cold, self.deleted


def test_knn_matches_brute_force_exactly(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 500)
    queries = clustered_unit_vectors(60, seed=1)
    found_labels, found_distances = index.knn_many(queries, 10)
    expected_labels, expected_distances = brute_force_knn(
        labels_range(0, 500), vectors, queries, 10
    )
    assert found_labels.dtype == np.int64
    assert found_distances.dtype == np.float32
    recall = np.mean(
        [
            len(set(found) & set(expected)) / 10
            for found, expected in zip(found_labels, expected_labels, strict=True)
        ]
    )
    assert recall == 1.0
    np.testing.assert_allclose(found_distances, expected_distances, atol=1e-5)


def test_each_vector_finds_itself_first_at_distance_zero(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 200)
    found_labels, found_distances = index.knn_many(vectors, 3)
    assert (found_labels[:, 0] == labels_range(0, 200)).all()
    assert (found_distances >= 0.0).all()
    assert (found_distances <= 2.0).all()
    np.testing.assert_allclose(found_distances[:, 0], 0.0, atol=1e-6)


def test_ties_are_ordered_by_label(tmp_path: Path) -> None:
    index = HnswIndex.create(tmp_path / "index.bin", DIM, VERSION)
    same = clustered_unit_vectors(1, seed=4)
    for label in (9, 3, 5):
        index.add(np.array([label]), same)
    index.add(labels_range(100, 150), clustered_unit_vectors(50, seed=5))
    found_labels, found_distances = index.knn_many(same, 3)
    assert found_labels.tolist() == [[3, 5, 9]]
    assert found_distances[0, 0] == found_distances[0, 2]


def test_capacity_grows_past_the_initial_size(tmp_path: Path) -> None:
    index = HnswIndex.create(tmp_path / "index.bin", DIM, VERSION)
    assert index.capacity == INITIAL_CAPACITY
    vectors = clustered_unit_vectors(INITIAL_CAPACITY * 2 + 500, seed=2)
    index.add(labels_range(0, INITIAL_CAPACITY), vectors[:INITIAL_CAPACITY])
    assert index.capacity == INITIAL_CAPACITY
    index.add(labels_range(INITIAL_CAPACITY, INITIAL_CAPACITY + 1), vectors[INITIAL_CAPACITY:][:1])
    assert index.capacity == INITIAL_CAPACITY * GROWTH_FACTOR
    index.add(labels_range(INITIAL_CAPACITY + 1, len(vectors)), vectors[INITIAL_CAPACITY + 1 :])
    assert index.capacity == INITIAL_CAPACITY * GROWTH_FACTOR**2
    assert index.live_count == len(vectors)
    found_labels, _ = index.knn_many(vectors[-50:], 1)
    assert found_labels[:, 0].tolist() == list(range(len(vectors) - 50, len(vectors)))


def test_one_large_add_grows_several_times_at_once(tmp_path: Path) -> None:
    index = HnswIndex.create(tmp_path / "index.bin", DIM, VERSION, capacity=10)
    index.add(labels_range(0, 75), clustered_unit_vectors(75))
    assert index.capacity == 80


def test_tombstoned_labels_are_never_returned(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 300)
    rng = np.random.default_rng(7)
    tombstoned = rng.choice(300, size=200, replace=False).astype(np.int64)
    index.mark_deleted(tombstoned)
    found_labels, _ = index.knn_many(vectors, 300)
    assert found_labels.shape == (300, 100)
    assert not set(found_labels.ravel().tolist()) & set(tombstoned.tolist())
    assert index.live_count == 100
    assert index.deleted_labels() == set(tombstoned.tolist())
    assert index.labels() == set(range(300))
    assert index.contains(int(tombstoned[0]))
    assert not index.is_live(int(tombstoned[0]))


def test_adding_a_tombstoned_label_does_not_revive_it(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 50)
    index.mark_deleted(np.array([7]))
    index.add(np.array([7, 50]), np.stack([vectors[7], vectors[8]]))
    assert not index.is_live(7)
    assert index.is_live(50)
    found_labels, _ = index.knn_many(vectors[7:8], 50)
    assert 7 not in found_labels.tolist()[0]


def test_adding_a_live_label_again_keeps_the_first_vector(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 50)
    index.add(np.array([3]), vectors[40:41])
    np.testing.assert_allclose(index.vectors(np.array([3])), vectors[3:4], atol=1e-6)
    assert index.live_count == 50


def test_mark_deleted_ignores_unknown_and_repeated_labels(tmp_path: Path) -> None:
    index, _ = built_index(tmp_path / "index.bin", 20)
    index.mark_deleted(np.array([4, 4, 999]))
    index.mark_deleted(np.array([4]))
    assert index.deleted_labels() == {4}
    assert index.live_count == 19
    assert not index.contains(999)


def test_vectors_returns_stored_unit_vectors(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 40)
    wanted = np.array([5, 0, 39])
    stored = index.vectors(wanted)
    assert stored.dtype == np.float32
    np.testing.assert_allclose(stored, vectors[wanted], atol=1e-6)
    assert index.vectors(np.array([], dtype=np.int64)).shape == (0, DIM)


def test_vectors_of_absent_or_tombstoned_labels_are_refused(tmp_path: Path) -> None:
    index, _ = built_index(tmp_path / "index.bin", 10)
    index.mark_deleted(np.array([2]))
    with pytest.raises(LabelNotLive, match=r"tombstoned.*: 2$"):
        index.vectors(np.array([2]))
    with pytest.raises(LabelNotLive, match=r"not live.*: 2, 77$"):
        index.vectors(np.array([1, 2, 77]))


def test_k_is_clamped_to_the_live_count(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 3)
    found_labels, found_distances = index.knn_many(vectors[:2], 10)
    assert found_labels.shape == (2, 3)
    assert found_distances.shape == (2, 3)
    index.mark_deleted(labels_range(0, 3))
    found_labels, found_distances = index.knn_many(vectors[:2], 10)
    assert found_labels.shape == (2, 0)
    assert found_distances.shape == (2, 0)


def test_empty_index_and_empty_queries(tmp_path: Path) -> None:
    index = HnswIndex.create(tmp_path / "index.bin", DIM, VERSION)
    assert index.knn_many(clustered_unit_vectors(4), 5)[0].shape == (4, 0)
    index.add(labels_range(0, 10), clustered_unit_vectors(10))
    assert index.knn_many(np.zeros((0, DIM), dtype=np.float32), 5)[0].shape == (0, 5)
    assert index.knn_many(clustered_unit_vectors(2), 0)[0].shape == (2, 0)


def test_k_larger_than_ef_still_returns_k(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 400)
    found_labels, _ = index.knn_many(vectors[:3], DEFAULT_EF * 3)
    assert found_labels.shape == (3, DEFAULT_EF * 3)
    assert all(len(set(row)) == DEFAULT_EF * 3 for row in found_labels.tolist())


class StarvingEngine:
    """hnswlib's engine, except that a search holding `starving` fails below the exhaustive
    breadth, as hnswlib fails when it finds fewer than k."""

    def __init__(self, inner: Any, starving: np.ndarray) -> None:
        self.inner = inner
        self.starving = starving
        self.exhaustive_rows: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def knn_query(self, queries: np.ndarray, **options: Any) -> Any:
        exhaustive = self.inner.ef >= self.inner.element_count
        if exhaustive:
            self.exhaustive_rows.append(len(queries))
        elif any(np.array_equal(row, self.starving) for row in queries):
            raise RuntimeError("Cannot return the results in a contiguous 2D array")
        return self.inner.knn_query(queries, **options)


def test_a_batch_with_a_starving_row_answers_every_row_as_it_would_alone(
    tmp_path: Path,
) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 300)
    engine = StarvingEngine(index._engine, vectors[5])
    index._engine = engine
    found_labels, found_distances = index.knn_many(vectors[:10], 8)
    assert engine.exhaustive_rows == [1]  # the starving row alone
    for row in range(10):
        alone_labels, alone_distances = index.knn_many(vectors[row : row + 1], 8)
        assert found_labels[row].tolist() == alone_labels[0].tolist()
        assert found_distances[row].tolist() == alone_distances[0].tolist()


def test_the_generation_counts_every_change_and_survives_a_save(tmp_path: Path) -> None:
    index, vectors = built_index(tmp_path / "index.bin", 50)
    seen = [index.generation]
    index.mark_deleted(labels_range(0, 2))
    seen.append(index.generation)
    index.save("stamp")
    assert index.generation == seen[-1]
    index.restore(labels_range(0, 1), vectors[:1])
    seen.append(index.generation)
    index.add(labels_range(50, 51), vectors[:1])
    seen.append(index.generation)
    index.knn_many(vectors[:3], 4)
    index.mark_deleted(labels_range(0, 1) + 100)  # unknown: no change
    assert index.generation == seen[-1]
    assert seen == sorted(set(seen))


def test_save_and_load_give_identical_answers(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "index.bin"
    index, vectors = built_index(path, 700)
    index.mark_deleted(labels_range(0, 700)[::3])
    before = index.knn_many(vectors[:80], 8)
    index.save("stamp-1")
    assert index.stamp == "stamp-1"
    assert sorted(path.parent.iterdir()) == [path, meta_path(path)]

    loaded = HnswIndex.load(path, DIM, VERSION)
    after = loaded.knn_many(vectors[:80], 8)
    assert loaded.stamp == "stamp-1"
    assert loaded.live_count == index.live_count
    assert loaded.labels() == index.labels()
    assert loaded.deleted_labels() == index.deleted_labels()
    assert loaded.capacity == index.capacity
    assert before[0].tobytes() == after[0].tobytes()
    assert before[1].tobytes() == after[1].tobytes()

    loaded.add(labels_range(700, 720), clustered_unit_vectors(20, seed=9))
    assert loaded.live_count == index.live_count + 20


def test_a_load_checks_its_live_labels_against_the_database_s(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 50)
    index.mark_deleted(np.array([7, 3]))
    index.save("s1")
    live = np.array(sorted(set(range(50)) - {3, 7}), dtype=np.int64)
    read: list[int] = []

    def database_labels(labels: np.ndarray) -> np.ndarray:
        read.append(len(labels))
        return labels

    loaded = HnswIndex.load(path, DIM, VERSION, live_labels=lambda: database_labels(live[::-1]))
    assert loaded.live_among(np.arange(50)).tolist() == live.tolist()
    assert loaded.deleted_labels() == {3, 7}
    assert read == [48]

    with pytest.raises(IndexUnusable) as raised:
        # A tombstoned label the database calls live, and a live one it lacks.
        HnswIndex.load(path, DIM, VERSION, live_labels=lambda: np.append(live[1:], 3))
    assert raised.value.kind is Unusable.LABELS
    assert "not in the database: 0;" in raised.value.reason
    assert "not in the index: 3)" in raised.value.reason


def test_a_damaged_file_is_refused_for_its_checksum_after_the_labels_are_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 60)
    index.save("s1")
    body = bytearray(path.read_bytes())
    body[-100] ^= 0xFF
    path.write_bytes(bytes(body))
    read: list[int] = []

    def database_labels() -> np.ndarray:
        read.append(60)
        return np.arange(60, dtype=np.int64)

    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(path, DIM, VERSION, live_labels=database_labels)
    assert raised.value.kind is Unusable.CHECKSUM
    assert read == [60]


def test_meta_sidecar_describes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 30)
    index.mark_deleted(np.array([4, 2]))
    index.set_cold(np.array([7]))
    identity = index.save("s")
    meta = json.loads(meta_path(path).read_text())
    assert meta == {
        "format": META_FORMAT,
        "dim": DIM,
        "index_version": VERSION,
        "count": 30,
        "stamp": "s",
        "m": 16,
        "ef_construction": 100,
        "max_elements": INITIAL_CAPACITY,
        "deleted": [2, 4, 7],
        "cold": [7],
        "size": path.stat().st_size,
        "checksum": blake3.blake3(path.read_bytes()).hexdigest(),
        "identity": identity,
    }
    assert index.identity == identity


@pytest.mark.parametrize(
    ("damage", "reason_start"),
    [
        ("garbage", "corrupt"),
        ("truncated", "corrupt"),
        ("tiny", "corrupt"),
        ("meta_garbage", "corrupt"),
        ("meta_fields", "corrupt"),
        ("meta_format", "meta format"),
        ("missing", "missing"),
        ("meta_missing", "missing meta sidecar"),
    ],
)
def test_damaged_files_are_unusable_and_rebuilt(
    tmp_path: Path, damage: str, reason_start: str
) -> None:
    path = tmp_path / "index.bin"
    index, vectors = built_index(path, 120)
    index.save("s1")
    sidecar = meta_path(path)
    if damage == "garbage":
        path.write_bytes(np.random.default_rng(3).bytes(path.stat().st_size))
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "tiny":
        path.write_bytes(b"\x00" * 10)
    elif damage == "meta_garbage":
        sidecar.write_text("{not json")
    elif damage == "meta_fields":
        sidecar.write_text(json.dumps({"format": META_FORMAT, "dim": DIM}))
    elif damage == "meta_format":
        meta = json.loads(sidecar.read_text())
        sidecar.write_text(json.dumps({**meta, "format": 99}))
    elif damage == "missing":
        path.unlink()
    elif damage == "meta_missing":
        sidecar.unlink()

    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(path, DIM, VERSION)
    assert raised.value.reason.startswith(reason_start)
    assert str(path) in str(raised.value)

    database = DatabaseState(labels_range(0, 120), vectors, np.array([], dtype=np.int64))
    rebuilt, reason = open_or_rebuild(
        path, DIM, VERSION, expected_stamp="s1", load_all=database.load_all
    )
    assert reason is not None and reason.startswith(reason_start)
    assert database.calls == 1
    assert rebuilt.live_count == 120
    assert rebuilt.knn_many(vectors[:5], 1)[0].ravel().tolist() == [0, 1, 2, 3, 4]
    assert HnswIndex.load(path, DIM, VERSION).stamp == "s1"


def test_meta_from_an_older_save_is_stale(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 100)
    index.save("s1")
    old_meta = meta_path(path).read_bytes()
    index.add(labels_range(100, 150), clustered_unit_vectors(50, seed=8))
    index.save("s2")
    meta_path(path).write_bytes(old_meta)
    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(path, DIM, VERSION)
    assert raised.value.reason.startswith("stale")


def test_another_dimension_is_unusable(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 20)
    index.save("s1")
    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(path, DIM * 2, VERSION)
    assert raised.value.reason == f"dim {DIM} != {DIM * 2}"


def test_header_of_another_dimension_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 20)
    index.save("s1")
    meta = json.loads(meta_path(path).read_text())
    meta_path(path).write_text(json.dumps({**meta, "dim": 16}))
    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(path, 16, VERSION)
    assert raised.value.reason == "corrupt: header does not describe 16-d vectors"


def test_another_index_version_is_rebuilt(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, vectors = built_index(path, 60)
    index.save("s1")
    with pytest.raises(IndexUnusable, match="index_version test-model/32 != other-model/32"):
        HnswIndex.load(path, DIM, "other-model/32")
    database = DatabaseState(labels_range(0, 60), vectors, np.array([], dtype=np.int64))
    rebuilt, reason = open_or_rebuild(
        path, DIM, "other-model/32", expected_stamp="s1", load_all=database.load_all
    )
    assert reason == "index_version test-model/32 != other-model/32"
    assert rebuilt.index_version == "other-model/32"
    assert json.loads(meta_path(path).read_text())["index_version"] == "other-model/32"


def test_matching_stamp_loads_without_touching_the_database(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, vectors = built_index(path, 60)
    index.save("s1")

    def refuse_to_load() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        raise AssertionError("a usable index must not be rebuilt")

    loaded, reason = open_or_rebuild(
        path, DIM, VERSION, expected_stamp="s1", load_all=refuse_to_load
    )
    assert reason is None
    assert (
        loaded.knn_many(vectors[:4], 2)[0].tobytes() == index.knn_many(vectors[:4], 2)[0].tobytes()
    )


def test_stale_stamp_is_rebuilt_from_the_database(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, vectors = built_index(path, 60)
    index.save("s1")
    extra = clustered_unit_vectors(10, seed=11)
    database = DatabaseState(
        labels_range(0, 70), np.concatenate([vectors, extra]), np.array([], dtype=np.int64)
    )
    rebuilt, reason = open_or_rebuild(
        path, DIM, VERSION, expected_stamp="s2", load_all=database.load_all
    )
    assert reason == "stale stamp: index has 's1', database has 's2'"
    assert rebuilt.live_count == 70
    assert rebuilt.stamp == "s2"
    _, reason_again = open_or_rebuild(
        path, DIM, VERSION, expected_stamp="s2", load_all=database.load_all
    )
    assert reason_again is None
    assert database.calls == 1


def test_rebuild_skips_tombstones_and_keeps_them_dead(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    vectors = clustered_unit_vectors(REBUILD_CHUNK_SIZE * 6 // 5, seed=12)
    labels = labels_range(0, len(vectors))
    tombstoned = labels[::10]
    keep = np.ones(len(labels), dtype=bool)
    keep[::10] = False
    shuffle = np.random.default_rng(13).permutation(int(keep.sum()))
    database = DatabaseState(labels[keep][shuffle], vectors[keep][shuffle], tombstoned)
    reports: list[tuple[int, int]] = []

    rebuilt, reason = open_or_rebuild(
        path,
        DIM,
        VERSION,
        expected_stamp="s1",
        load_all=database.load_all,
        progress=lambda done, total: reports.append((done, total)),
    )
    live_total = int(keep.sum())
    assert reason == "missing"
    assert reports == [(REBUILD_CHUNK_SIZE, live_total), (live_total, live_total)]
    assert rebuilt.live_count == live_total
    assert rebuilt.deleted_labels() == set(tombstoned.tolist())
    found_labels, _ = rebuilt.knn_many(vectors[::50], 20)
    assert not set(found_labels.ravel().tolist()) & set(tombstoned.tolist())

    rebuilt.add(tombstoned[:5], vectors[tombstoned[:5]])
    assert rebuilt.live_count == live_total
    reloaded = HnswIndex.load(path, DIM, VERSION)
    assert reloaded.deleted_labels() == set(tombstoned.tolist())
    reloaded.add(tombstoned[:5], vectors[tombstoned[:5]])
    assert reloaded.live_count == live_total


def test_rebuild_refuses_a_label_both_live_and_tombstoned(tmp_path: Path) -> None:
    vectors = clustered_unit_vectors(10)
    database = DatabaseState(labels_range(0, 10), vectors, np.array([3, 42]))
    with pytest.raises(InvalidIndexInput, match=r"both live or cold and tombstoned: 3$"):
        open_or_rebuild(
            tmp_path / "index.bin", DIM, VERSION, expected_stamp="s", load_all=database.load_all
        )


def test_same_insertion_sequence_gives_the_same_graph(tmp_path: Path) -> None:
    vectors = clustered_unit_vectors(1500, seed=14)
    queries = clustered_unit_vectors(100, seed=15)
    answers = []
    for copy in ("a", "b"):
        index = HnswIndex.create(tmp_path / f"{copy}.bin", DIM, VERSION)
        for start in range(0, 1500, 250):
            index.add(labels_range(start, start + 250), vectors[start : start + 250])
        index.mark_deleted(labels_range(0, 1500)[::7])
        answers.append(index.knn_many(queries, 6))
        index.save("s")
    assert answers[0][0].tobytes() == answers[1][0].tobytes()
    assert answers[0][1].tobytes() == answers[1][1].tobytes()
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()


def test_rebuild_does_not_depend_on_database_row_order(tmp_path: Path) -> None:
    vectors = clustered_unit_vectors(800, seed=16)
    labels = labels_range(0, 800)
    shuffle = np.random.default_rng(17).permutation(800)
    no_tombstones = np.array([], dtype=np.int64)
    in_order = DatabaseState(labels, vectors, no_tombstones)
    shuffled = DatabaseState(labels[shuffle], vectors[shuffle], no_tombstones)
    first, _ = open_or_rebuild(
        tmp_path / "a.bin", DIM, VERSION, expected_stamp="s", load_all=in_order.load_all
    )
    second, _ = open_or_rebuild(
        tmp_path / "b.bin", DIM, VERSION, expected_stamp="s", load_all=shuffled.load_all
    )
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    assert (
        first.knn_many(vectors[:30], 5)[0].tobytes()
        == second.knn_many(vectors[:30], 5)[0].tobytes()
    )


def test_queries_during_concurrent_adds_and_deletes(tmp_path: Path) -> None:
    index, _ = built_index(tmp_path / "index.bin", 200)
    extra = clustered_unit_vectors(1600, seed=18)
    queries = clustered_unit_vectors(8, seed=19)
    errors: list[BaseException] = []
    iterations = 300
    batch = len(extra) // iterations

    def query_repeatedly() -> None:
        try:
            for _ in range(iterations):
                found_labels, found_distances = index.knn_many(queries, 5)
                assert found_labels.shape == (8, 5)
                assert np.isfinite(found_distances).all()
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    def add_repeatedly() -> None:
        try:
            for step in range(iterations):
                start = 200 + step * batch
                index.add(
                    labels_range(start, start + batch), extra[step * batch : (step + 1) * batch]
                )
                index.mark_deleted(np.array([start]))
        except BaseException as error:  # surfaced by the assertion below
            errors.append(error)

    threads = [threading.Thread(target=query_repeatedly) for _ in range(2)]
    threads.append(threading.Thread(target=add_repeatedly))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert index.live_count == 200 + iterations * batch - iterations
    assert index.capacity >= 200 + iterations * batch


def test_a_reader_is_told_whether_it_would_wait(tmp_path: Path) -> None:
    index, _ = built_index(tmp_path / "i.bin", 50)
    lock = ReadersWriterLock()
    assert lock.free and index.readable_at_once
    reading, writer_waits, writer_in, release = (threading.Event() for _ in range(4))

    def read_then_release() -> None:
        with lock.reading():
            reading.set()
            release.wait(10)

    def write() -> None:
        writer_waits.set()
        with lock.writing():
            writer_in.set()
            release.wait(10)

    threads = [threading.Thread(target=read_then_release), threading.Thread(target=write)]
    threads[0].start()
    assert reading.wait(10) and lock.free  # readers side by side wait for none
    threads[1].start()
    assert writer_waits.wait(10)
    for _ in range(10_000):  # until the writer is queued behind the reader
        if not lock.free:
            break
        time.sleep(0.001)
    assert not lock.free and not writer_in.is_set()
    release.set()
    assert writer_in.wait(10)
    for thread in threads:
        thread.join()
    assert lock.free
    with index._lock.writing():
        assert not index.readable_at_once
    assert index.readable_at_once


@pytest.mark.parametrize(
    ("labels", "vectors", "complaint"),
    [
        (np.array([0, 1]), np.zeros((2, DIM + 1), dtype=np.float32), r"shape \(n, 32\)"),
        (np.array([0, 1]), np.zeros(DIM, dtype=np.float32), r"shape \(n, 32\)"),
        (np.array([0, 1]), np.full((2, DIM), np.nan, dtype=np.float32), "NaN"),
        (np.array([0, -1]), np.ones((2, DIM), dtype=np.float32), ">= 0"),
        (np.array([0.5, 1.0]), np.ones((2, DIM), dtype=np.float32), "integers"),
        (np.array([[0, 1]]), np.ones((2, DIM), dtype=np.float32), "one-dimensional"),
        (np.array([0, 1, 2]), np.ones((2, DIM), dtype=np.float32), "3 labels for 2 vectors"),
        (np.array([4, 5, 4]), np.ones((3, DIM), dtype=np.float32), "repeated.*4"),
    ],
)
def test_malformed_adds_are_refused(
    tmp_path: Path, labels: np.ndarray, vectors: np.ndarray, complaint: str
) -> None:
    index = HnswIndex.create(tmp_path / "index.bin", DIM, VERSION)
    with pytest.raises(InvalidIndexInput, match=complaint):
        index.add(labels, vectors)
    assert index.live_count == 0


def test_malformed_queries_and_settings_are_refused(tmp_path: Path) -> None:
    index, _ = built_index(tmp_path / "index.bin", 10)
    with pytest.raises(InvalidIndexInput, match="query vectors"):
        index.knn_many(np.ones((1, DIM - 1), dtype=np.float32), 3)
    with pytest.raises(InvalidIndexInput, match="k must be"):
        index.knn_many(np.ones((1, DIM), dtype=np.float32), -1)
    with pytest.raises(InvalidIndexInput, match="m must be"):
        HnswIndex.create(tmp_path / "other.bin", DIM, VERSION, m=1)
    with pytest.raises(InvalidIndexInput, match="index_version is empty"):
        HnswIndex.create(tmp_path / "other.bin", DIM, "")
    with pytest.raises(InvalidIndexInput, match="stamp must be a str"):
        index.save(7)  # type: ignore[arg-type]


def test_live_among_follows_adds_deletions_restores_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, vectors = built_index(path, 40)
    far = [MAX_MASKED_LABEL + 5, MAX_MASKED_LABEL * 3]
    index.add(np.array(far, dtype=np.int64), clustered_unit_vectors(2, seed=3))
    index.mark_deleted(labels_range(10, 20))
    index.mark_deleted(np.array(far[:1], dtype=np.int64))
    index.restore(labels_range(15, 17), vectors[15:17])
    asked = np.array([39, 12, 15, 16, 3, 40, 10_000, *far, 2_000_000], dtype=np.int64)
    expected = [39, 15, 16, 3, far[1]]
    assert index.live_among(asked).tolist() == expected
    assert index.live_among(np.zeros(0, dtype=np.int64)).tolist() == []
    index.save("stamp")
    reloaded = HnswIndex.load(path, DIM, VERSION)
    assert reloaded.live_among(asked).tolist() == expected


class ShortWritingEngine:
    """A save cut short, as hnswlib leaves one on a full disk (it reports nothing)."""

    def __init__(self, source: Path) -> None:
        self.source = source

    def save_index(self, path: str) -> None:
        Path(path).write_bytes(self.source.read_bytes()[: 2 * _HEADER.size])


def test_a_short_or_failed_write_fails_the_save_and_keeps_the_saved_index(tmp_path: Path) -> None:
    path = tmp_path / "index.bin"
    index, _ = built_index(path, 300)
    index.save("stamp-1")
    saved = path.read_bytes()
    with pytest.raises(IndexSaveFailed, match=r"less than the \d+ its 300 elements take"):
        write_engine(ShortWritingEngine(path), tmp_path / "short.bin")
    with pytest.raises(IndexSaveFailed, match="No such file or directory"):
        write_engine(index._engine, tmp_path / "missing" / "index.bin")
    index._engine = ShortWritingEngine(path)  # a full disk at the next save
    with pytest.raises(IndexSaveFailed, match="is the disk full"):
        index.save("stamp-2")
    assert path.read_bytes() == saved and sorted(tmp_path.iterdir()) == [
        path,
        meta_path(path),
        tmp_path / "short.bin",
    ]
    assert HnswIndex.load(path, DIM, VERSION).stamp == "stamp-1"
