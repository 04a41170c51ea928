"""Recall's fast path ranks exactly as the straightforward one (tests/recall_reference.py).

One store of a few hundred real chunks (the model's embeddings), with learned keys,
cold chunks, tombstones, spread salience and projects to filter on, is recalled by
text, by vector alone, with filters, with exclusions and assumed-cold chunks, through
the live index and without one; every hit, its order and every score must be equal.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dreamcycle.daemon.api import read_operations, recall_models
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import run_cycle_blocking, tombstone_hashes
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.recall.candidates import search_words
from dreamcycle.daemon.recall.retrieve import Hit, rank_query
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store import tiers
from dreamcycle.store.database import NewObservation
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.filtered_search import nearest_in_filter
from dreamcycle.store.read_paths import StoredVectors
from tests.daemon_helpers import documentation_chunks
from tests.recall_reference import exact_top, reference_rank_query

START_MS = 1_800_000_000_000
TOPICS = ("specialnames", "compound", "string-methods")
CHUNKS = 240
#: Characters of each paragraph kept: embedding whole paragraphs would take most of the run.
CONTENT_CHARS = 240
PROJECTS = 4
#: A pool smaller than the store, so each retriever's cut-off matters.
CANDIDATES = 40
TOP_K = 15
QUESTIONS = (
    "how do I compare two objects for equality",
    "what does the with statement do on exit",
    "split a string on whitespace",
    "how are exceptions caught in a try block",
    "make an object callable",
    "strip leading characters from a string",
    "iterate over a container",
    "what happens when a class is created",
)
OTHER_QUERIES = (
    "format a number with padding",
    "async for loops and awaitables",
    "the bool value of an instance",
    "replace every occurrence of a substring",
    "while loop with an else clause",
)


@dataclass
class Store:
    rt: Runtime
    peer: Peer
    cold: frozenset[int]
    tombstoned: frozenset[int]
    projects: dict[str, frozenset[int]]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    root: Path = tmp_path_factory.mktemp("equivalence")
    config = load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(root / "data"),
            "peer.id": "eq",
            "metrics.listen": "",
            "sweep.enabled": False,
            "zeitgeist.dir": str(root / "zeitgeist"),
            "recall.candidates": CANDIDATES,
            # Salience must move the order for the comparison to cover it.
            "recall.salience_bound": 0.3,
        },
    )
    rt = Runtime.open(config, clock=ManualClock(START_MS))
    chunks = documentation_chunks(TOPICS, limit=CHUNKS)
    items = [
        NewObservation(
            content=c["content"][:CONTENT_CHARS],
            title=c["title"],
            project=f"project-{i % PROJECTS}",
        )
        for i, c in enumerate(chunks)
    ]
    ingest(rt, [items])
    peer = rt.open_peer()
    run_cycle_blocking(peer)
    db = rt.db
    rowids = sorted(int(r[0]) for r in db.fetch_all("SELECT id FROM observations"))
    rng = np.random.default_rng(7)
    with db.transaction():
        db.write_salience({r: float(rng.uniform(0.0, 1.0)) for r in rowids})
        # Each question is learned by a few chunks (one of them goes cold below).
        for number, question in enumerate(QUESTIONS):
            embedding = rt.embedder.embed_one(question)
            for rowid in rowids[number * 11 : number * 11 + 3]:
                key = key_store.StoredKey(rowid, embedding, question, 1.0, START_MS)
                key_store.replace_keys(db, rowid, [key])
        cold = tiers.move_to_cold(db, rowids[1::17], reason="test", now_ms=START_MS)
    peer.index.mark_deleted(np.array(cold, dtype=np.int64))
    peer.salience.reload()
    by_rowid = {
        int(r[0]): str(r[1]) for r in db.fetch_all("SELECT id, content_hash FROM observations")
    }
    doomed = [by_rowid[r] for r in rowids[5::23]]
    tombstoned = tombstone_hashes(peer, doomed, reason="test", now_ms=START_MS)
    peer.index.mark_deleted(np.array(tombstoned, dtype=np.int64))
    projects = {
        f"project-{p}": frozenset(
            int(r[0])
            for r in db.fetch_all(
                "SELECT id FROM observations WHERE project = ?", (f"project-{p}",)
            )
        )
        for p in range(PROJECTS)
    }
    try:
        yield Store(rt, peer, frozenset(cold), frozenset(tombstoned), projects)
    finally:
        peer.close()
        rt.close()


def _same(fast: list[Hit], reference: list[Hit]) -> None:
    assert [h.rowid for h in fast] == [h.rowid for h in reference]
    assert fast == reference


def _queries(store: Store) -> list[tuple[str, np.ndarray]]:
    embed = store.rt.embedder.embed_one
    texts = [*QUESTIONS, *OTHER_QUERIES]
    by_text = [(text, embed(text)) for text in texts]
    # By vector alone: no words, so only the vector retrievers and learned keys take part.
    by_vector = [("", vector) for _, vector in by_text]
    return by_text + by_vector


def test_the_store_covers_what_ranking_reads(store: Store) -> None:
    db = store.rt.db
    assert store.cold and store.tombstoned
    assert key_store.key_count(db) > 0
    hits = rank_query(store.rt, QUESTIONS[0], store.rt.embedder.embed_one(QUESTIONS[0]),
                      TOP_K, index=store.peer.index)  # fmt: skip
    assert any(h.key_similarity is not None for h in hits)
    assert any(h.learned_rank is not None for h in hits)
    found_cold = set()
    for text, vector in _queries(store):
        found = rank_query(store.rt, text, vector, CHUNKS, index=store.peer.index)
        assert not {h.rowid for h in found} & store.tombstoned
        found_cold |= {h.rowid for h in found if h.cold}
    assert found_cold <= store.cold and found_cold


@pytest.mark.parametrize("live_index", [True, False], ids=["live index", "no index"])
def test_fast_recall_ranks_exactly_as_the_reference(store: Store, live_index: bool) -> None:
    rt = store.rt
    index = store.peer.index if live_index else None
    assume = frozenset(sorted(store.projects["project-1"])[:20])
    for text, vector in _queries(store):
        for top_k in (1, TOP_K, CHUNKS):
            fast = rank_query(rt, text, vector, top_k, index=index)
            _same(fast, reference_rank_query(rt, text, vector, top_k, index=index))
        excluded = frozenset(h.rowid for h in fast[:3])
        option_sets: list[dict[str, Any]] = [
            {"allowed": store.projects["project-2"]},
            {"allowed": store.projects["project-0"] | store.projects["project-3"]},
            {"exclude": excluded},
            {"assume_cold": assume},
            {"exclude": excluded, "assume_cold": assume, "allowed": store.projects["project-1"]},
        ]
        for options in option_sets:
            fast = rank_query(rt, text, vector, TOP_K, index=index, **options)
            reference = reference_rank_query(rt, text, vector, TOP_K, index=index, **options)
            _same(fast, reference)


def test_the_api_answers_what_the_reference_ranks(store: Store) -> None:
    ops = Operations(store.rt, embedder=store.rt.embedder)
    ops.attach(store.peer)
    try:
        for text, vector in _queries(store):
            request = (
                recall_models.RecallRequest(query=text, record=False, top_k=TOP_K, explain=True)
                if text
                else recall_models.RecallRequest(vector=vector.tolist(), record=False, top_k=TOP_K)
            )
            answer = ops.recall(request)
            reference = reference_rank_query(store.rt, text, vector, TOP_K, index=store.peer.index)
            assert [h.content_hash for h in answer.hits] == [h.content_hash for h in reference]
            assert [h.score for h in answer.hits] == [h.score for h in reference]
            filtered = ops.recall(
                recall_models.RecallRequest(
                    query=text or None,
                    vector=None if text else vector.tolist(),
                    filters=recall_models.RecallFilters(project="project-3"),
                    record=False,
                    top_k=TOP_K,
                )
            )
            expected = reference_rank_query(
                store.rt, text, vector, TOP_K, index=store.peer.index,
                allowed=store.projects["project-3"],
            )  # fmt: skip
            assert [h.content_hash for h in filtered.hits] == [h.content_hash for h in expected]
            assert [h.score for h in filtered.hits] == [h.score for h in expected]
        # One caller at a time reads through one connection, the one whose page cache is
        # warm, rather than taking the readers in turn.
        with ops._reading() as first:
            pass
        with ops._reading() as second:
            pass
        assert second is first
    finally:
        ops.close()


class _ThreadsNoted:
    """An embedder that notes which thread embeds, and can be made to fail."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.threads: list[int] = []
        self.fail = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def embed_one(self, text: str) -> np.ndarray:
        self.threads.append(threading.get_ident())
        if self.fail:
            raise RuntimeError("the model is gone")
        return self.inner.embed_one(text)


def test_a_query_is_embedded_by_its_caller_while_a_helper_searches_its_words(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The embedding is the long part of a recall by text: its caller does it, so it goes
    on as soon as it ends. The words are searched meanwhile in a helper thread, in the
    caller's snapshot, and an embedding that fails still waits for that search before
    the connection is handed to the next caller."""
    embedder = _ThreadsNoted(store.rt.embedder)
    searched: list[int] = []

    def noted_search(view: Runtime, text: str) -> Any:
        searched.append(threading.get_ident())
        time.sleep(0.05)  # still searching when the embedding fails
        return search_words(view, text)

    monkeypatch.setattr(read_operations, "search_words", noted_search)
    ops = Operations(store.rt, embedder=embedder)  # type: ignore[arg-type]
    ops.attach(store.peer)
    try:
        text = QUESTIONS[0]
        caller = threading.get_ident()
        answer = ops.recall(recall_models.RecallRequest(query=text, record=False, top_k=TOP_K))
        bundle = ops.context(recall_models.ContextRequest(task=text, record=False))
        assert embedder.threads == [caller, caller]
        assert len(searched) == 2 and caller not in searched
        reference = reference_rank_query(
            store.rt, text, store.rt.embedder.embed_one(text), TOP_K, index=store.peer.index
        )
        assert [h.content_hash for h in answer.hits] == [h.content_hash for h in reference]
        assert bundle.tiers.relevant

        embedder.fail = True
        searched.clear()
        with pytest.raises(RuntimeError, match="the model is gone"):
            ops.recall(recall_models.RecallRequest(query=text, record=False))
        assert len(searched) == 1
        embedder.fail = False
        again = ops.recall(recall_models.RecallRequest(query=text, record=False, top_k=TOP_K))
        assert [h.content_hash for h in again.hits] == [h.content_hash for h in answer.hits]
    finally:
        ops.close()


def _without_bounds(rt: Runtime) -> Runtime:
    """The store's runtime ranking with salience and confidence bounds at zero (the
    defaults), through caches of its own."""
    recall = replace(rt.config.recall, salience_bound=0.0, confidence_bound=0.0)
    return replace(
        rt,
        config=replace(rt.config, recall=recall),
    )


@pytest.mark.parametrize("preloaded", [False, True], ids=["read on demand", "preloaded"])
def test_without_bounds_salience_is_read_for_hits_only_and_ranks_the_same(
    store: Store, preloaded: bool
) -> None:
    rt = _without_bounds(store.rt)
    if preloaded:
        assert recall_state(rt).stored_vectors.load_all(rt.db, rt.embedder.index_version) > 0
    assume = frozenset(sorted(store.projects["project-1"])[:20])
    for text, vector in _queries(store):
        option_sets: list[dict[str, Any]] = [
            {},
            {"assume_cold": assume},
            {"allowed": store.projects["project-2"]},
        ]
        for options in option_sets:
            fast = rank_query(rt, text, vector, TOP_K, index=store.peer.index, **options)
            reference = reference_rank_query(rt, text, vector, TOP_K, index=store.peer.index,
                                             **options)  # fmt: skip
            _same(fast, reference)


class _Undo(Exception):
    """Rolls a test's changes back."""


def test_min_confidence_drops_the_same_chunks_as_the_reference(store: Store) -> None:
    rt = _without_bounds(store.rt)
    text = QUESTIONS[2]
    vector = rt.embedder.embed_one(text)
    with pytest.raises(_Undo), rt.db.transaction():
        rt.db.fetch_all("UPDATE observations SET confidence = 0.3 WHERE id % 3 = 0")
        everything = reference_rank_query(rt, text, vector, CHUNKS, index=store.peer.index)
        kept = {h.rowid for h in everything if h.confidence >= 0.5}
        assert 0 < len(kept) < len(everything)
        fast = rank_query(rt, text, vector, CHUNKS, index=store.peer.index, min_confidence=0.5)
        assert {h.rowid for h in fast} == kept
        raise _Undo


def test_a_narrow_filter_is_searched_exactly_over_its_live_chunks(store: Store) -> None:
    rt, index = store.rt, store.peer.index
    wide = store.projects["project-0"] | store.projects["project-3"]
    for allowed in (store.projects["project-2"], wide):
        # Each filter holds tombstoned and cold chunks, which are not live.
        assert allowed & store.tombstoned and allowed & store.cold
        live = set(index.live_among(np.array(sorted(allowed), dtype=np.int64)).tolist())
        assert live == allowed - store.tombstoned - store.cold
        for _, vector in _queries(store)[:: len(QUESTIONS)]:
            for n in (1, CANDIDATES, CHUNKS):
                found = nearest_in_filter(
                    rt.db, recall_state(rt).stored_vectors, index, vector, n, allowed
                )
                assert found == exact_top(rt, index, allowed, vector, n)
                assert len(found) == min(n, len(live))
        assert (
            nearest_in_filter(rt.db, recall_state(rt).stored_vectors, index, vector, 0, allowed)
            == []
        )


def test_exact_ties_break_by_rowid_even_at_the_cut(store: Store) -> None:
    rt, index = store.rt, store.peer.index
    allowed = store.projects["project-1"]
    twins = sorted(allowed - store.tombstoned - store.cold)[:6]
    # Six chunks with one embedding: whichever of them make the cut must be the lowest.
    shared = recall_state(rt).stored_vectors.gather(rt.db, [twins[0]], rt.embedder.index_version)[
        0
    ][0]
    with pytest.raises(_Undo), rt.db.transaction():
        rt.db.set_embeddings(
            twins, np.tile(shared, (len(twins), 1)), model_id=rt.embedder.model_id,
            index_version=rt.embedder.index_version,
        )  # fmt: skip
        fresh = replace(rt)
        assert (
            nearest_in_filter(
                fresh.db, recall_state(fresh).stored_vectors, index, shared, 3, allowed
            )
            == twins[:3]
        )
        assert (
            nearest_in_filter(
                fresh.db, recall_state(fresh).stored_vectors, index, -shared, len(allowed), allowed
            )[-6:]
            == twins
        )
        raise _Undo


def test_a_filter_searches_only_the_chunks_the_index_holds(store: Store) -> None:
    rt, index = store.rt, store.peer.index
    vector = rt.embedder.embed_one(QUESTIONS[0])
    with pytest.raises(_Undo), rt.db.transaction():
        added = rt.db.add_observations(
            [NewObservation(content=f"{name} chunk", project="project-2")
             for name in ("pending", "foreign")],
            now_ms=START_MS,
        )  # fmt: skip
        pending, foreign = (a.rowid for a in added)
        # Embedded as the query itself, but not admitted: not in the index yet.
        rt.db.set_embeddings(
            [pending], vector[None, :], model_id=rt.embedder.model_id,
            index_version=rt.embedder.index_version,
        )  # fmt: skip
        # Admitted under another model, of another dimension: never in this index.
        rt.db.set_embeddings(
            [foreign], np.full((1, 8), 8**-0.5, dtype=np.float32), model_id="other",
            index_version="other/8",
        )  # fmt: skip
        rt.db.fetch_all("UPDATE observations SET admitted_seq = 0 WHERE id = ?", (foreign,))
        fresh = replace(rt)
        allowed = store.projects["project-2"] | {pending, foreign}
        hits = rank_query(fresh, "", vector, CHUNKS, index=index, allowed=allowed)
        assert hits
        assert not {pending, foreign} & {h.rowid for h in hits}
        # Found by their words, both are ranked: the foreign one with no embedding to
        # compare (another model's cannot be), as the reference ranks it.
        for allowed_now in (None, allowed):
            fresh = replace(rt)
            found = rank_query(
                fresh, "foreign chunk", vector, CHUNKS, index=index, allowed=allowed_now
            )
            assert foreign in {h.rowid for h in found}
            assert next(h for h in found if h.rowid == foreign).similarity == -1.0
            _same(found, reference_rank_query(
                fresh, "foreign chunk", vector, CHUNKS, index=index, allowed=allowed_now,
            ))  # fmt: skip
        raise _Undo


def test_keys_of_another_model_are_left_out_of_recall(store: Store) -> None:
    """After a change of model, keys learned from queries the old model embedded are of
    another width: recall ranks as if they were not there, instead of failing."""
    rt, index = store.rt, store.peer.index
    text = QUESTIONS[0]
    vector = rt.embedder.embed_one(text)

    def ranked() -> list[Hit]:
        fresh = replace(rt)
        return rank_query(fresh, text, vector, TOP_K, index=index)

    before = ranked()
    assert any(h.key_similarity is not None for h in before)
    with pytest.raises(_Undo), rt.db.transaction():
        for hit in before[:3]:
            old = key_store.keys_of(rt.db, hit.rowid)
            foreign = key_store.StoredKey(
                hit.rowid, np.full(8, 8**-0.5, dtype=np.float32), text, 1.0, START_MS
            )
            key_store.replace_keys(rt.db, hit.rowid, [*old, foreign])
            ours = key_store.keys_of(rt.db, hit.rowid, dim=rt.embedder.dim)
            assert [(k.text, k.weight) for k in ours] == [(k.text, k.weight) for k in old]
            assert len(key_store.keys_of(rt.db, hit.rowid)) == len(old) + 1
        _same(ranked(), before)
        fresh = replace(rt)
        _same(reference_rank_query(fresh, text, vector, TOP_K, index=index), before)
        raise _Undo


@pytest.mark.parametrize("scale", [0.0, 1e12], ids=["through the index", "exact"])
def test_the_filter_size_chooses_the_path_and_both_rank_alike(
    store: Store, scale: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    recall = replace(store.rt.config.recall, exact_filter_scale=scale)
    rt = replace(store.rt, config=replace(store.rt.config, recall=recall))
    index = store.peer.index
    filtered_searches: list[frozenset[int]] = []
    search = index.knn_many

    def spy(vectors: Any, k: int, *, allowed: Any = None) -> Any:
        if allowed is not None:
            filtered_searches.append(allowed)
        return search(vectors, k, allowed=allowed)

    monkeypatch.setattr(index, "knn_many", spy)
    allowed = store.projects["project-2"]
    for text, vector in _queries(store):
        fast = rank_query(rt, text, vector, TOP_K, index=index, allowed=allowed)
        _same(fast, reference_rank_query(rt, text, vector, TOP_K, index=index, allowed=allowed))
    # The reference follows the same rule: two filtered index searches per query, or none.
    assert len(filtered_searches) == len(_queries(store)) * (2 if scale == 0.0 else 0)


def test_with_no_embedding_held_recall_ranks_through_the_index_as_the_reference(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond `recall.embeddings_held_mib`, a live candidate's cosine is the one the index's
    search measured, or its vector comes from the index: the same unit vector, rounded
    once by the index's normalization. The index is asked for no vector its search found."""
    rt = store.rt
    search = recall_state(rt).cold_search
    held = search.vectors
    search.vectors = StoredVectors(held_bytes=0)
    index = store.peer.index
    asked: list[int] = []
    live_vectors = index.live_vectors

    def spy(labels: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float32], Any]:
        asked.extend(labels.tolist())
        return live_vectors(labels)

    monkeypatch.setattr(index, "live_vectors", spy)
    try:
        for text, vector in _queries(store):
            asked.clear()
            found, _ = index.knn_many(vector[None, :], rt.config.recall.candidates)
            fast = rank_query(rt, text, vector, TOP_K, index=index)
            assert asked and not set(asked) & set(found[0].tolist())
            reference = reference_rank_query(rt, text, vector, TOP_K, index=store.peer.index)
            assert [h.rowid for h in fast] == [h.rowid for h in reference]
            assert [h.similarity for h in fast] == pytest.approx(
                [h.similarity for h in reference], abs=1e-6
            )
            assert [h.score for h in fast] == pytest.approx([h.score for h in reference], rel=1e-6)
        assert len(search.vectors) == 0
    finally:
        search.vectors = held
