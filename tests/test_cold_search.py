"""Recall's search of the cold tier (daemon/recall/cold_search.py): through the live
index's cold labels once the tier is large, it finds what the exact search finds, follows
the tier where the index has not caught up, and measures the cosines it returns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.recall.candidates import WordMatches
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime, save_index
from dreamcycle.pulses.ranking import best_labels
from dreamcycle.store import read_paths, tiers
from dreamcycle.store.database import NewObservation
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.index_file import meta_path
from dreamcycle.store.read_paths import StoredVectors

NOW_MS = 1_700_000_000_000
CHUNKS = 400
COLD = 300
POOL = 20


def _unit(rng: np.random.Generator, rows: int, dim: int) -> npt.NDArray[np.float32]:
    raw = rng.standard_normal((rows, dim)).astype(np.float32)
    unit: npt.NDArray[np.float32] = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    return unit


def _runtime(tmp_path: Path, **overrides: object) -> Runtime:
    """A store of CHUNKS chunks with random embeddings, the first COLD of them cold."""
    config = load_config(
        None,
        environ={},
        overrides={"peer.data_dir": str(tmp_path / "data"), "peer.id": "p1", "metrics.listen": ""}
        | overrides,
    )
    runtime = Runtime.open(config, clock=ManualClock(NOW_MS))
    vectors = _unit(np.random.default_rng(7), CHUNKS, runtime.embedder.dim)
    with runtime.db.transaction():
        added = runtime.db.add_observations(
            [NewObservation(content=f"chunk {i}") for i in range(CHUNKS)], now_ms=NOW_MS
        )
        runtime.db.set_embeddings(
            [a.rowid for a in added],
            vectors,
            model_id=runtime.embedder.model_id,
            index_version=runtime.embedder.index_version,
        )
        for seq, added_one in enumerate(added, 1):
            runtime.db.mark_admitted(added_one.rowid, seq)
        tiers.move_to_cold(
            runtime.db, [a.rowid for a in added[:COLD]], reason="test", now_ms=NOW_MS
        )
    return runtime


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = _runtime(tmp_path)
    try:
        yield runtime
    finally:
        runtime.close()


def _cold(rt: Runtime) -> frozenset[int]:
    return read_paths.tier_sets(rt.db).cold


def _exact(rt: Runtime, vector: npt.NDArray[np.float32]) -> list[int]:
    labels, vectors = tiers.cold_vectors(rt.db, rt.embedder.index_version, rt.embedder.dim)
    return best_labels(labels, vectors @ vector, POOL)


def _index(rt: Runtime) -> HnswIndex:
    """The store's index, rebuilt from the database (the cold tier held apart), as a
    daemon opens it."""
    index, _ = rt.open_index()
    return index


def _search(
    rt: Runtime, search: ColdSearch, vector: npt.NDArray[np.float32], index: HnswIndex | None
) -> list[int]:
    return search.candidates(rt, rt.db.change_stamp(), _cold(rt), vector, POOL, index)


def _vector_of(rt: Runtime, rowid: int) -> npt.NDArray[np.float32]:
    matrix, _ = recall_state(rt).stored_vectors.gather(rt.db, [rowid], rt.embedder.index_version)
    return np.asarray(matrix[0], dtype=np.float32)


def _queries(rt: Runtime, count: int) -> npt.NDArray[np.float32]:
    return _unit(np.random.default_rng(11), count, rt.embedder.dim)


@pytest.mark.parametrize("why", ["small", "no index", "other model", "always exact"])
def test_the_tier_is_searched_exactly_when_small_or_without_a_usable_index(
    rt: Runtime, why: str
) -> None:
    index: HnswIndex | None = _index(rt)
    graph_from = COLD + 1 if why == "small" else 0 if why == "always exact" else COLD
    if why == "no index":
        index = None
    elif why == "other model":
        index = HnswIndex.create(rt.config.index_path, rt.embedder.dim, "another-model/384")
    search = ColdSearch(graph_from=graph_from)
    query = _queries(rt, 1)[0]
    found = search.start(rt, rt.db.change_stamp(), _cold(rt), query, POOL, index).finish()
    assert found.labels.tolist() == _exact(rt, query)
    assert len(found.cosines) == 0  # exact: ranking computes the cosines itself
    assert search.cache.entries  # the tier's embeddings, read whole
    assert search.quick is (why in ("small", "always exact"))


def test_chunks_the_index_has_not_caught_up_with_are_found_and_those_that_left_are_not(
    rt: Runtime,
) -> None:
    """The database moved a chunk to the cold tier and revived another, the index not yet:
    the first is searched exactly beside the index, the second dropped from its answer."""
    index = _index(rt)
    search = ColdSearch(graph_from=1)
    live = sorted(set(range(1, CHUNKS + 1)) - _cold(rt))
    went_cold, left = live[0], min(_cold(rt))
    with rt.db.transaction():
        tiers.move_to_cold(rt.db, [went_cold], reason="test", now_ms=NOW_MS)
        tiers.revive(rt.db, left)
    assert _search(rt, search, _vector_of(rt, went_cold), index)[0] == went_cold
    assert left not in _search(rt, search, _vector_of(rt, left), index)
    # Approximate, as any search of the index: what it finds, beside exactly what it missed.
    shares = [
        len(set(_search(rt, search, query, index)) & set(_exact(rt, query))) / POOL
        for query in _queries(rt, 10)
    ]
    assert np.mean(shares) >= 0.95
    # Once the index follows, nothing is left to search beside it.
    index.set_cold(np.array([went_cold]))
    index.restore(np.array([left]), _vector_of(rt, left)[None, :])
    found = search.start(
        rt, rt.db.change_stamp(), _cold(rt), _vector_of(rt, went_cold), POOL, index
    )
    assert found.finish().labels.tolist()[0] == went_cold
    assert search._remainder is not None and len(search._remainder.pending_labels) == 0


def test_an_index_search_gives_the_cosines_it_measured(rt: Runtime) -> None:
    index = _index(rt)
    query = _queries(rt, 1)[0]
    labels, vectors = tiers.cold_vectors(rt.db, rt.embedder.index_version, rt.embedder.dim)
    exact = dict(zip(labels.tolist(), (vectors @ query).tolist(), strict=True))
    stamp = rt.db.change_stamp()
    found = ColdSearch(graph_from=COLD).start(rt, stamp, _cold(rt), query, POOL, index).finish()
    assert found.labels.tolist() == _exact(rt, query)
    assert found.cosines.tolist() == pytest.approx(
        [exact[label] for label in found.labels.tolist()], abs=1e-6
    )


def test_recall_takes_the_index_s_cosines_for_cold_chunks_it_does_not_hold(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond the embeddings recall holds, a cold candidate's cosine is the one the index's
    search measured: its embedding is not read again, and recall ranks as it does with
    every embedding held and the tier searched exactly."""
    index = _index(rt)
    state = recall_state(rt)
    query = _queries(rt, 1)[0]
    no_words = WordMatches(content=[], learned=[])
    state.cold_search = ColdSearch(graph_from=0)
    reference = rank_query(rt, "", query, POOL, words=no_words, index=index)
    state.cold_search = ColdSearch(graph_from=COLD, vectors=StoredVectors(held_bytes=0))
    read: list[int] = []
    gather = state.cold_search.vectors.gather

    def spy(*args: Any, **kwargs: Any) -> Any:
        read.extend(np.asarray(args[1]).tolist())
        return gather(*args, **kwargs)

    monkeypatch.setattr(state.cold_search.vectors, "gather", spy)
    hits = rank_query(rt, "", query, POOL, words=no_words, index=index)
    cold = _cold(rt)
    ranked_cold = [hit.rowid for hit in hits if hit.rowid in cold]
    assert ranked_cold and not set(ranked_cold) & set(read)
    assert [hit.rowid for hit in hits] == [hit.rowid for hit in reference]
    assert [hit.similarity for hit in hits] == pytest.approx(
        [hit.similarity for hit in reference], abs=1e-6
    )


def test_an_index_saved_with_its_cold_chunks_marked_deleted_holds_them_apart_once_opened(
    rt: Runtime,
) -> None:
    """An index file saved before the index kept cold chunks (marked deleted there, no cold
    list in its meta) is opened as saved, not rebuilt, and its cold chunks are unmarked
    into the cold tier, where the search finds them."""
    index = _index(rt)
    cold = np.array(sorted(_cold(rt)), dtype=np.int64)
    index.mark_deleted(cold)  # as a sweep left them before
    save_index(rt.db, index)
    sidecar = meta_path(rt.config.index_path)
    fields = json.loads(sidecar.read_text())
    assert fields.pop("cold") == []
    sidecar.write_text(json.dumps(fields))
    opened, rebuilt_because = rt.open_index()
    assert rebuilt_because is None
    assert opened.cold_labels() == set(cold.tolist())
    query = _vector_of(rt, int(cold[0]))
    assert opened.knn_many(query[None, :], 1, cold=True)[0][0, 0] == cold[0]
