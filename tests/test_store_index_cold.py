"""The live index's cold tier: one graph for both tiers, each search kept to its own.

Cold chunks stay in the graph, unmarked, and are searched only when asked for: a live
search never returns one, finds what brute force finds among live chunks, and answers a
row the same in any batch (what propagation's answers on every peer rest on).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamcycle.store import index_graph, index_tiers
from dreamcycle.store.index import HnswIndex, IndexUnusable, Unusable, open_or_rebuild
from dreamcycle.store.index_file import meta_path
from dreamcycle.store.index_search import search_engine
from tests.test_store_index import (
    DIM,
    VERSION,
    DatabaseState,
    brute_force_knn,
    built_index,
    clustered_unit_vectors,
    labels_range,
)

CHUNKS = 400
#: Every third chunk cold: a share large enough that a filtered search visits many.
COLD = labels_range(0, CHUNKS)[::3]
K = 10


def _twins(tmp_path: Path) -> tuple[HnswIndex, HnswIndex, np.ndarray]:
    """The same saved graph loaded twice: one with the cold chunks marked deleted, one
    with them set apart."""
    index, vectors = built_index(tmp_path / "index.bin", CHUNKS)
    index.save("s")
    marked = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    apart = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    marked.mark_deleted(COLD)
    apart.set_cold(COLD)
    return marked, apart, vectors


def test_a_live_search_finds_what_brute_force_finds_among_live_chunks_alone(
    tmp_path: Path,
) -> None:
    _, apart, vectors = _twins(tmp_path)
    live = np.setdiff1d(labels_range(0, CHUNKS), COLD)
    queries = clustered_unit_vectors(80, seed=3)
    for k in (1, 3, K, 64):
        labels, distances = apart.knn_many(queries, k)
        assert labels.shape == (len(queries), k)
        assert not set(labels.ravel().tolist()) & set(COLD.tolist())
        exact, _ = brute_force_knn(live, vectors[live], queries, k)
        found = np.mean([len(set(a) & set(b)) / k for a, b in zip(labels, exact, strict=True)])
        assert found >= 0.95, (k, found)
        expected = 1.0 - np.sum(vectors[labels[:, 0]] * queries, axis=1)
        assert np.allclose(distances[:, 0], expected, atol=1e-5)
    assert apart.live_count == CHUNKS - len(COLD)


def test_a_batch_answers_each_row_as_it_would_be_answered_alone(tmp_path: Path) -> None:
    """Peers batch the same queries differently (propagation asks a batch's seeds at once):
    with cold chunks set apart, each row's answer must not depend on its batch."""
    _, apart, _ = _twins(tmp_path)
    queries = clustered_unit_vectors(40, seed=6)
    for cold in (False, True):
        labels, distances = apart.knn_many(queries, K, cold=cold)
        for i, query in enumerate(queries):
            alone = apart.knn_many(query[None, :], K, cold=cold)
            assert np.array_equal(alone[0][0], labels[i])
            assert np.array_equal(alone[1][0], distances[i])


def test_a_row_whose_neighbours_are_cold_is_asked_again_through_the_filter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query among cold chunks only: the wider search finds too few live ones, and that
    row alone is searched again through hnswlib's filter, which answers as the deletion
    marks did."""
    index, vectors = built_index(tmp_path / "index.bin", CHUNKS)
    index.save("s")
    marked = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    apart = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    query = vectors[0]
    # Its nearest 150 cold: more than a search of K live neighbours widens to.
    nearest_first = np.argsort(vectors @ query)[::-1]
    cold = nearest_first[:150].astype(np.int64)
    marked.mark_deleted(cold)
    apart.set_cold(cold)
    filters: list[object] = []

    def counted(engine: Any, queries: np.ndarray, width: int, admit: Any) -> Any:
        filters.append(admit)
        return search_engine(engine, queries, width, admit)

    for module in (index_graph, index_tiers):
        monkeypatch.setattr(module, "search_engine", counted)
    rows = np.stack([vectors[nearest_first[-1]], query])
    labels, distances = apart.knn_many(rows, K)
    assert [admit is not None for admit in filters] == [False, True]
    expected = marked.knn_many(query[None, :], K)
    assert np.array_equal(labels[1], expected[0][0])
    assert np.array_equal(distances[1], expected[1][0])


def test_a_cold_search_finds_the_cold_chunks_nearest_a_query(tmp_path: Path) -> None:
    _, apart, vectors = _twins(tmp_path)
    queries = clustered_unit_vectors(60, seed=4)
    labels, distances = apart.knn_many(queries, K, cold=True)
    exact_labels, _ = brute_force_knn(COLD, vectors[COLD], queries, K)
    assert set(labels.ravel().tolist()) <= set(COLD.tolist())
    found = np.mean([len(set(a) & set(b)) / K for a, b in zip(labels, exact_labels, strict=True)])
    assert found >= 0.95
    expected = 1.0 - np.sum(vectors[labels[0]] * queries[0], axis=1)
    assert np.allclose(distances[0], expected, atol=1e-5)
    assert apart.cold_count == len(COLD)
    assert apart.cold_labels() == set(COLD.tolist())
    assert apart.deleted_labels() == set(COLD.tolist())


def test_revived_and_tombstoned_cold_chunks_leave_the_cold_search(tmp_path: Path) -> None:
    _, apart, vectors = _twins(tmp_path)
    revived, tombstoned = int(COLD[0]), int(COLD[1])
    changes = apart.cold_changes
    apart.restore(np.array([revived]), vectors[[revived]])
    apart.mark_deleted(np.array([tombstoned]))
    assert apart.cold_changes == changes + 2
    assert apart.is_live(revived)
    assert not apart.is_live(tombstoned)
    assert apart.contains(tombstoned)
    # Each by its own vector: found first where it is searched, nowhere else.
    assert apart.knn_many(vectors[[revived]], 1)[0][0, 0] == revived
    cold_hits = apart.knn_many(vectors[[revived, tombstoned]], K, cold=True)[0]
    assert revived not in cold_hits and tombstoned not in cold_hits
    assert tombstoned not in apart.knn_many(vectors[[tombstoned]], K)[0]
    # Revived without a new element: the graph keeps the one it had.
    assert len(apart.labels()) == CHUNKS


def test_the_cold_tier_is_saved_and_loaded_apart(tmp_path: Path) -> None:
    _, apart, _ = _twins(tmp_path)
    apart.save("s2")
    loaded = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION, expected_stamp="s2")
    assert loaded.cold_labels() == set(COLD.tolist())
    assert loaded.live_count == CHUNKS - len(COLD)
    queries = clustered_unit_vectors(20, seed=5)
    for cold in (False, True):
        assert np.array_equal(
            loaded.knn_many(queries, K, cold=cold)[0], apart.knn_many(queries, K, cold=cold)[0]
        )


def test_a_file_that_marked_cold_chunks_deleted_has_them_unmarked_into_the_cold_tier(
    tmp_path: Path,
) -> None:
    """A file saved before the index kept cold chunks: they are marked deleted there and its
    meta lists none as cold. `set_cold` brings them back into the graph, apart."""
    marked, _, vectors = _twins(tmp_path)
    marked.save("old")
    sidecar = meta_path(tmp_path / "index.bin")
    fields = json.loads(sidecar.read_text())
    assert fields.pop("cold") == []
    sidecar.write_text(json.dumps(fields))
    loaded = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    assert loaded.cold_count == 0
    assert loaded.knn_many(vectors[COLD[:3]], K, cold=True)[0].size == 0
    loaded.set_cold(COLD)
    assert loaded.cold_labels() == set(COLD.tolist())
    nearest = loaded.knn_many(vectors[COLD[:3]], 1, cold=True)[0][:, 0]
    assert nearest.tolist() == COLD[:3].tolist()


@pytest.mark.parametrize("cold", [[CHUNKS + 5], [1]])
def test_a_meta_listing_cold_labels_the_file_does_not_hold_apart_is_corrupt(
    tmp_path: Path, cold: list[int]
) -> None:
    """A cold label the file does not hold, or one that is not among the file's non-live
    labels: the meta does not describe this file."""
    index, _ = built_index(tmp_path / "index.bin", 30)
    index.mark_deleted(np.array([CHUNKS + 5]))
    index.adopt_tombstones(np.array([CHUNKS + 5]))
    index.save("s")
    sidecar = meta_path(tmp_path / "index.bin")
    fields = json.loads(sidecar.read_text())
    fields["cold"] = cold
    sidecar.write_text(json.dumps(fields))
    with pytest.raises(IndexUnusable) as raised:
        HnswIndex.load(tmp_path / "index.bin", DIM, VERSION)
    assert raised.value.kind is Unusable.CORRUPT
    assert "cold labels" in str(raised.value)


def test_a_rebuild_holds_the_cold_chunks_apart(tmp_path: Path) -> None:
    vectors = clustered_unit_vectors(CHUNKS)
    database = DatabaseState(labels_range(0, CHUNKS), vectors, np.array([CHUNKS + 1]), COLD)
    rebuilt, reason = open_or_rebuild(
        tmp_path / "index.bin", DIM, VERSION, expected_stamp="s", load_all=database.load_all
    )
    assert reason is not None
    assert rebuilt.cold_labels() == set(COLD.tolist())
    assert rebuilt.live_count == CHUNKS - len(COLD)
    nearest = rebuilt.knn_many(vectors[COLD[:5]], 1, cold=True)[0][:, 0]
    assert nearest.tolist() == COLD[:5].tolist()
    assert not set(rebuilt.knn_many(vectors[COLD[:5]], K)[0].ravel().tolist()) & set(COLD.tolist())
    loaded = HnswIndex.load(tmp_path / "index.bin", DIM, VERSION, expected_stamp="s")
    assert loaded.cold_labels() == set(COLD.tolist())


def test_a_rebuild_refuses_cold_labels_without_a_vector(tmp_path: Path) -> None:
    vectors = clustered_unit_vectors(10)
    database = DatabaseState(labels_range(0, 10), vectors, np.zeros(0, np.int64), np.array([42]))
    with pytest.raises(ValueError, match=r"cold labels without a vector: 42$"):
        open_or_rebuild(
            tmp_path / "index.bin", DIM, VERSION, expected_stamp="s", load_all=database.load_all
        )


def test_one_search_answers_both_tiers_as_each_alone_would(tmp_path: Path) -> None:
    """`knn_tiers`, recall's search of both tiers at once: each tier's answer holds that
    tier's chunks only and finds what brute force finds among them."""
    _, apart, vectors = _twins(tmp_path)
    live = np.setdiff1d(labels_range(0, CHUNKS), COLD)
    queries = clustered_unit_vectors(60, seed=7)
    (live_labels, live_distances), (cold_labels, _) = apart.knn_tiers(queries, K, 2 * K)
    assert live_labels.shape == (len(queries), K)
    assert cold_labels.shape == (len(queries), 2 * K)
    assert set(live_labels.ravel().tolist()) <= set(live.tolist())
    assert set(cold_labels.ravel().tolist()) <= set(COLD.tolist())
    for found, pool, k in ((live_labels, live, K), (cold_labels, COLD, 2 * K)):
        exact, _ = brute_force_knn(pool, vectors[pool], queries, k)
        share = np.mean([len(set(a) & set(b)) / k for a, b in zip(found, exact, strict=True)])
        assert share >= 0.95
    expected = 1.0 - np.sum(vectors[live_labels[:, 0]] * queries, axis=1)
    assert np.allclose(live_distances[:, 0], expected, atol=1e-5)
    # With no cold chunk, the live tier as knn_many answers it, and no cold one.
    index, _ = built_index(tmp_path / "plain.bin", 50)
    (plain, _), (none, _) = index.knn_tiers(queries, K, K)
    assert np.array_equal(plain, index.knn_many(queries, K)[0]) and none.shape == (60, 0)
