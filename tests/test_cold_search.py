"""Recall's search of the cold tier through a graph (daemon/recall/cold_search.py) finds what the
exact search finds, follows the tier as it changes, and is rebuilt when it falls behind."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt
import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.recall import cold_search
from dreamcycle.daemon.recall.candidates import WordMatches
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.daemon.scheduling import cycle_thread
from dreamcycle.daemon.service.loop import Service
from dreamcycle.pulses.ranking import best_labels
from dreamcycle.store import cold_graph, read_paths, tiers
from dreamcycle.store.cold_graph import ColdGraph, build_cold_graph, build_cold_graph_reading
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.read_paths import StoredVectors
from tests.daemon_helpers import needs_reversible_idle, run_service_while, wait_until

P = ParamSpec("P")
T = TypeVar("T")

NOW_MS = 1_700_000_000_000
CHUNKS = 400
COLD = 300
POOL = 20
#: Long beside a step that only waits for an event.
WAIT_S = 10.0
#: Long beside a step that runs under SCHED_IDLE while other processes keep every core busy.
LOAD_WAIT_S = 120.0
POLL_S = 0.01


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


def _search(rt: Runtime, search: ColdSearch, vector: npt.NDArray[np.float32]) -> list[int]:
    return search.candidates(rt, rt.db.change_stamp(), _cold(rt), vector, POOL)


def _vector_of(rt: Runtime, rowid: int) -> npt.NDArray[np.float32]:
    matrix, _ = recall_state(rt).stored_vectors.gather(rt.db, [rowid], rt.embedder.index_version)
    return np.asarray(matrix[0], dtype=np.float32)


def _queries(rt: Runtime, count: int) -> npt.NDArray[np.float32]:
    return _unit(np.random.default_rng(11), count, rt.embedder.dim)


def test_the_graph_finds_the_exact_search_s_candidates_and_is_built_once(rt: Runtime) -> None:
    search = ColdSearch(graph_from=COLD)
    assert not search.quick  # nothing known of the tier yet
    for query in _queries(rt, 25):
        assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 1
    assert search.quick


class _RecordingPool(ThreadPoolExecutor):
    """A helper pool that notes the thread each task ran on."""

    def __init__(self) -> None:
        super().__init__(max_workers=2, thread_name_prefix="helper")
        self.ran_on: list[str] = []

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        def recorded() -> T:
            self.ran_on.append(threading.current_thread().name)
            return fn(*args, **kwargs)

        return super().submit(recorded)


def test_helpers_search_the_graph_and_find_what_the_caller_s_thread_finds(rt: Runtime) -> None:
    inline = ColdSearch(graph_from=COLD)
    queries = _queries(rt, 20)
    with _RecordingPool() as helpers:
        beside = ColdSearch(graph_from=COLD, helpers=helpers)
        for query in queries:
            started = beside.begin(rt, rt.db.change_stamp(), _cold(rt), query, POOL)()
            assert started.labels.tolist() == _search(rt, inline, query) == _exact(rt, query)
    assert len(helpers.ran_on) == len(queries)
    assert all(name.startswith("helper") for name in helpers.ran_on)


def test_without_a_core_to_spare_the_graph_is_searched_in_the_callers_thread(
    rt: Runtime,
) -> None:
    queries = _queries(rt, 4)
    spare = [False, True, False, False]
    with _RecordingPool() as helpers:
        search = ColdSearch(graph_from=COLD, helpers=helpers, core_to_spare=lambda: spare[0])
        found = [
            search.begin(rt, rt.db.change_stamp(), _cold(rt), q, POOL)().labels.tolist()
            for q in queries
        ]
        assert helpers.ran_on == []
        spare[0] = True
        assert search.candidates(rt, rt.db.change_stamp(), _cold(rt), queries[0], POOL) == found[0]
    assert len(helpers.ran_on) == 1
    assert found == [_exact(rt, q) for q in queries]


def test_below_graph_from_the_tier_is_searched_exactly_with_no_graph(rt: Runtime) -> None:
    search = ColdSearch(graph_from=COLD + 1)
    query = _queries(rt, 1)[0]
    assert not search.quick
    assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 0
    assert search.quick  # a tier this small is searched exactly without a graph
    assert ColdSearch().graph_from == 0  # a one-shot command's runtime: always exact


def test_chunks_that_went_cold_since_the_build_are_found_and_those_that_left_are_not(
    rt: Runtime,
) -> None:
    search = ColdSearch(graph_from=1, pending_max=10, skip_max=10)
    _search(rt, search, _queries(rt, 1)[0])
    assert search.builds == 1
    live = sorted(set(range(1, CHUNKS + 1)) - _cold(rt))
    went_cold, left = live[0], min(_cold(rt))
    with rt.db.transaction():
        tiers.move_to_cold(rt.db, [went_cold], reason="test", now_ms=NOW_MS)
        tiers.revive(rt.db, left)
    assert _search(rt, search, _vector_of(rt, went_cold))[0] == went_cold
    assert left not in _search(rt, search, _vector_of(rt, left))
    for query in _queries(rt, 10):
        assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 1  # within both bounds: the first graph still serves


@pytest.mark.parametrize("outgrown", ["pending", "skip"])
def test_a_graph_that_fell_behind_is_built_again(rt: Runtime, outgrown: str) -> None:
    search = ColdSearch(graph_from=1, pending_max=3, skip_max=3)
    _search(rt, search, _queries(rt, 1)[0])
    cold = sorted(_cold(rt))
    live = sorted(set(range(1, CHUNKS + 1)) - set(cold))
    with rt.db.transaction():
        if outgrown == "pending":
            tiers.move_to_cold(rt.db, live[:4], reason="test", now_ms=NOW_MS)
        else:
            for rowid in cold[:4]:
                tiers.revive(rt.db, rowid)
    query = _queries(rt, 1)[0]
    assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 2


def test_a_background_build_leaves_the_query_exact_until_the_graph_is_ready(
    rt: Runtime,
) -> None:
    path = rt.config.database_path
    with ThreadPoolExecutor(max_workers=1) as pool:
        search = ColdSearch(
            graph_from=1, background=pool.submit, open_db=lambda: Database(path, prepare=False)
        )
        query = _queries(rt, 1)[0]
        assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 1
    # Built, but not yet searched: what the graph misses of the tier is still to be read.
    assert not search.quick
    assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 1
    assert search.quick


def test_a_failed_build_leaves_the_tier_searched_exactly(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def failing(*args: object, **kwargs: object) -> None:
        raise MemoryError("no room for the graph")

    monkeypatch.setattr(cold_search, "build_cold_graph_reading", failing)
    search = ColdSearch(graph_from=1)
    with caplog.at_level(logging.ERROR, logger=cold_search.__name__):
        for query in _queries(rt, 3):
            assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 0
    assert not search.quick  # every search reads the whole tier now
    assert sum("cold tier's graph failed" in r.message for r in caplog.records) == 1


def test_a_background_build_that_cannot_open_its_connection_says_so_and_leaves_it_exact(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    handed_over: list[Callable[[], None]] = []
    opening: list[float | None] = []

    def no_connection() -> Database:
        opening.append(search.build_seconds())
        raise OSError(24, "Too many open files")

    search = ColdSearch(graph_from=1, background=handed_over.append, open_db=no_connection)
    with caplog.at_level(logging.ERROR, logger=cold_search.__name__):
        search.start_build(rt)
        handed_over.pop()()  # as the background thread runs it; it raises nothing
    assert opening != [None]  # timed from the start: a starved opening is raised too
    assert search.build_seconds() is None
    assert sum("opening a connection" in r.message for r in caplog.records) == 1
    search.start_build(rt)
    assert handed_over == []  # no build tried again and again
    for query in _queries(rt, 3):
        assert _search(rt, search, query) == _exact(rt, query)
    assert search.builds == 0


def test_a_build_the_background_refuses_is_tried_again_and_one_refused_after_close_is_not(
    rt: Runtime,
) -> None:
    refusals: list[str] = []
    handed_over: list[Callable[[], None]] = []

    def background(build: Callable[[], None]) -> None:
        if refusals:
            reason = refusals.pop()
            if reason == "closed":
                search.close()  # as when the owner closes between the check and the hand-over
            raise RuntimeError("cannot schedule new futures after shutdown")
        handed_over.append(build)

    path = rt.config.database_path
    search = ColdSearch(
        graph_from=1, background=background, open_db=lambda: Database(path, prepare=False)
    )
    refusals.append("full")
    with pytest.raises(RuntimeError):
        search.start_build(rt)  # the caller hears of it
    search.start_build(rt)
    assert len(handed_over) == 1  # and the next search's build is handed over
    handed_over.pop()()
    assert search.builds == 1
    refusals.append("closed")
    search.start_build(rt)  # nothing to build after close: no error for the caller
    assert handed_over == [] and search.builds == 1


def test_a_graph_is_the_same_for_the_same_tier_and_a_stopped_build_gives_none() -> None:
    rng = np.random.default_rng(3)
    vectors = _unit(rng, 500, 32)
    labels = rng.permutation(np.arange(1000, 1500)).astype(np.int64)
    shape = functools.partial(build_cold_graph, m=16, ef_construction=100, ef=64)
    first = shape(labels, vectors)
    again = shape(labels[::-1].copy(), vectors[::-1].copy())
    assert first is not None and again is not None
    for query in _unit(rng, 20, 32):
        found, cosines = first.nearest(query, 10, frozenset())
        same, _ = again.nearest(query, 10, frozenset())
        assert found.tolist() == same.tolist()
        assert np.all(np.diff(cosines) <= 1e-6)  # nearest first
        skipped, _ = first.nearest(query, 10, frozenset(found[:3].tolist()))
        assert set(skipped.tolist()).isdisjoint(found[:3].tolist())
    assert shape(labels, vectors, stop=lambda: True) is None


def test_a_build_copies_the_vectors_only_when_their_labels_are_out_of_order() -> None:
    # numpy's allocations are traced (hnswlib's own are not): a sorted tier, as the
    # database gives it, is built from the caller's array, an unsorted one from a copy.
    rng = np.random.default_rng(4)
    vectors = _unit(rng, 2_000, 256)  # 2 MB: far above what a build allocates besides
    labels = np.arange(2_000, dtype=np.int64) * 3

    def peak_while_built(labels: npt.NDArray[np.int64]) -> int:
        tracemalloc.start()
        try:
            build_cold_graph(labels, vectors, m=8, ef_construction=20, ef=16)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    assert peak_while_built(labels) < vectors.nbytes / 2
    assert peak_while_built(labels[::-1].copy()) >= vectors.nbytes


def test_a_build_that_reads_its_vectors_by_batches_gives_the_same_graph(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cold_graph, "BUILD_BATCH", 64)
    rng = np.random.default_rng(5)
    vectors = _unit(rng, 400, 32)
    labels = np.arange(400, dtype=np.int64) * 2 + 7
    # One label in ten has no vector (its chunk went since): left out of the graph.
    missing = set(labels[::10].tolist())
    asked: list[int] = []

    def vectors_of(part: npt.NDArray[np.int64]) -> tuple[np.ndarray, np.ndarray]:
        asked.append(len(part))
        present = np.array([label not in missing for label in part.tolist()], dtype=np.bool_)
        return vectors[(part - 7) // 2][present], present

    kept = np.array([label not in missing for label in labels.tolist()], dtype=np.bool_)
    whole = build_cold_graph(labels[kept], vectors[kept], m=16, ef_construction=100, ef=64)
    read = build_cold_graph_reading(
        rng.permutation(labels), vectors_of, m=16, ef_construction=100, ef=64
    )
    assert whole is not None and read is not None
    assert read.labels == whole.labels == frozenset(labels[kept].tolist())
    assert max(asked) == 64 and sum(asked) == len(labels)
    for query in _unit(rng, 20, 32):
        found, cosines = read.nearest(query, 10, frozenset())
        same, same_cosines = whole.nearest(query, 10, frozenset())
        assert found.tolist() == same.tolist()
        assert cosines.tolist() == same_cosines.tolist()
    assert (
        build_cold_graph_reading(
            labels, vectors_of, m=16, ef_construction=100, ef=64, stop=lambda: True
        )
        is None
    )


def test_how_long_a_build_has_run_is_known_while_it_runs_only(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    handed_over: list[Callable[[], None]] = []
    path = rt.config.database_path
    search = ColdSearch(
        graph_from=1, background=handed_over.append, open_db=lambda: Database(path, prepare=False)
    )
    inside, release = threading.Event(), threading.Event()
    real_build = build_cold_graph_reading

    def held(*args: Any, **kwargs: Any) -> ColdGraph | None:
        inside.set()
        release.wait(WAIT_S)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(cold_search, "build_cold_graph_reading", held)
    search.start_build(rt)
    search.start_build(rt)  # one at a time
    assert len(handed_over) == 1
    assert search.build_seconds() is None  # handed over, not started
    build = threading.Thread(target=handed_over[0])
    build.start()
    try:
        assert inside.wait(WAIT_S)
        seconds = search.build_seconds()
        assert seconds is not None and seconds >= 0
    finally:
        release.set()
        build.join(WAIT_S)
    assert search.builds == 1 and search.ready
    assert search.build_seconds() is None


def _policy_watching_build(
    monkeypatch: pytest.MonkeyPatch, until_raised: bool
) -> tuple[threading.Event, threading.Event, list[int]]:
    """Builds that note their thread's scheduling policy as they start and as they end;
    each waits for the event returned (or, `until_raised`, for normal priority) first."""
    inside, release = threading.Event(), threading.Event()
    policies: list[int] = []
    real_build = build_cold_graph_reading

    def watched(*args: Any, **kwargs: Any) -> ColdGraph | None:
        policies.append(os.sched_getscheduler(0))
        inside.set()
        if until_raised:
            deadline = time.monotonic() + WAIT_S
            while os.sched_getscheduler(0) != os.SCHED_OTHER and time.monotonic() < deadline:
                time.sleep(POLL_S)
        else:
            release.wait(WAIT_S)
        policies.append(os.sched_getscheduler(0))
        return real_build(*args, **kwargs)

    monkeypatch.setattr(cold_search, "build_cold_graph_reading", watched)
    return inside, release, policies


@needs_reversible_idle
def test_the_apis_build_runs_behind_the_requests_until_it_starves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rt = _runtime(tmp_path, **{"recall.cold_graph_from": 1, "cycle.cpu_priority": "idle"})
    inside, release, policies = _policy_watching_build(monkeypatch, until_raised=False)
    peer = rt.open_peer()
    ops = Operations(rt, embedder=rt.embedder)
    try:
        ops.attach(peer)  # builds the first graph
        assert inside.wait(WAIT_S)
        assert ops.raise_cold_build_if_starved() is None
        monkeypatch.setattr(defaults, "COLD_GRAPH_IDLE_LIMIT_S", 0.0)
        assert ops.raise_cold_build_if_starved() is not None
        release.set()
        wait_until(
            lambda: ops.recall_state.cold_search.ready, what="the cold graph", timeout_s=WAIT_S
        )
        assert policies == [os.SCHED_IDLE, os.SCHED_OTHER]
        assert ops.raise_cold_build_if_starved() is None  # none under way
    finally:
        release.set()
        ops.close()
        peer.close()
        rt.close()


@needs_reversible_idle
def test_a_stop_raises_the_apis_build_so_it_can_see_the_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under SCHED_IDLE on a machine kept busy, a build would reach its next step, where it
    sees a stop, only once the machine had time for it."""
    rt = _runtime(tmp_path, **{"recall.cold_graph_from": 1, "cycle.cpu_priority": "idle"})
    inside, _, policies = _policy_watching_build(monkeypatch, until_raised=True)
    peer = rt.open_peer()
    ops = Operations(rt, embedder=rt.embedder)
    try:
        ops.attach(peer)
        assert inside.wait(WAIT_S)
    finally:
        ops.close()
        peer.close()
        rt.close()
    assert policies == [os.SCHED_IDLE, os.SCHED_OTHER]
    assert not ops.recall_state.cold_search.ready  # stopped at its first step


@needs_reversible_idle
def test_the_running_service_raises_the_apis_build_once_it_starves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The service's own check raises it (not only a direct call): a build that waits for
    normal priority ends only if the service gave it. On a busy machine the raise may come
    before the build first looks at its priority, so what is checked is what the scheduler
    cannot reorder: its thread went behind the requests, the service raised it for
    starving, and the build finished at normal priority."""
    rt = _runtime(
        tmp_path,
        **{
            "recall.cold_graph_from": 1,
            "cycle.cpu_priority": "idle",
            "api.enabled": True,
            "api.port": 0,
        },
    )
    _, _, policies = _policy_watching_build(monkeypatch, until_raised=True)
    build_threads = _threads_building(monkeypatch)
    changes = _policy_changes(monkeypatch)
    monkeypatch.setattr(defaults, "COLD_GRAPH_IDLE_LIMIT_S", 0.0)
    service = Service(rt)
    api = service.api
    assert api is not None

    try:
        with caplog.at_level(logging.INFO, logger="dreamcycle.service"):
            run_service_while(
                service,
                lambda: wait_until(
                    lambda: api.recall_state.cold_search.ready,
                    what="the cold graph",
                    timeout_s=LOAD_WAIT_S,
                ),
            )
    finally:
        rt.close()
    assert api.recall_state.cold_search.builds >= 1
    assert policies and policies[-1] == os.SCHED_OTHER  # it waited until it was raised
    (build_thread,) = set(build_threads)
    on_build_thread = [policy for native_id, policy in changes if native_id == build_thread]
    assert os.SCHED_IDLE in on_build_thread  # it started behind the requests
    lowered = on_build_thread.index(os.SCHED_IDLE)
    assert os.SCHED_OTHER in on_build_thread[lowered:]
    reasons = {
        getattr(r, "reason", None)
        for r in caplog.records
        if r.getMessage().startswith("cold tier graph build raised")
    }
    assert reasons == {"the step has run 0 s"}


def _threads_building(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The native id of each thread a build runs on (the build as patched so far)."""
    threads: list[int] = []
    build: Callable[..., ColdGraph | None] = vars(cold_search)["build_cold_graph_reading"]

    def noted(*args: Any, **kwargs: Any) -> ColdGraph | None:
        threads.append(threading.get_native_id())
        return build(*args, **kwargs)

    monkeypatch.setattr(cold_search, "build_cold_graph_reading", noted)
    return threads


def _policy_changes(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """Each scheduling policy a CycleThread gives a thread, with the thread's native id,
    in the order given."""
    changes: list[tuple[int, int]] = []
    set_policy = cycle_thread._set_policy

    def noted(native_id: int, policy: int) -> None:
        set_policy(native_id, policy)
        changes.append((native_id, policy))

    monkeypatch.setattr(cycle_thread, "_set_policy", noted)
    return changes


def test_a_graph_search_gives_the_cosines_it_measured_and_an_exact_one_none(rt: Runtime) -> None:
    query = _queries(rt, 1)[0]
    labels, vectors = tiers.cold_vectors(rt.db, rt.embedder.index_version, rt.embedder.dim)
    exact = dict(zip(labels.tolist(), (vectors @ query).tolist(), strict=True))
    stamp = rt.db.change_stamp()
    graphed = ColdSearch(graph_from=COLD).begin(rt, stamp, _cold(rt), query, POOL)()
    assert graphed.labels.tolist() == _exact(rt, query)
    assert graphed.cosines.tolist() == pytest.approx(
        [exact[label] for label in graphed.labels.tolist()], abs=1e-6
    )
    searched = ColdSearch(graph_from=COLD + 1).begin(rt, stamp, _cold(rt), query, POOL)()
    assert searched.labels.tolist() == _exact(rt, query) and len(searched.cosines) == 0


def test_recall_takes_the_graph_s_cosines_for_cold_chunks_it_does_not_hold(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beyond the embeddings recall holds, a cold candidate's cosine is the one the cold
    tier's graph measured: its embedding is not read again, and recall ranks as it does
    with every embedding held and the tier searched exactly."""
    state = recall_state(rt)
    query = _queries(rt, 1)[0]
    no_words = WordMatches(content=[], learned=[])
    reference = rank_query(rt, "", query, POOL, words=no_words)
    state.cold_search = ColdSearch(graph_from=COLD, vectors=StoredVectors(held_bytes=0))
    state.cold_search.prepare(rt)
    assert state.cold_search.ready
    read: list[int] = []
    gather = state.cold_search.vectors.gather

    def spy(*args: Any, **kwargs: Any) -> Any:
        read.extend(np.asarray(args[1]).tolist())
        return gather(*args, **kwargs)

    monkeypatch.setattr(state.cold_search.vectors, "gather", spy)
    hits = rank_query(rt, "", query, POOL, words=no_words)
    cold = _cold(rt)
    ranked_cold = [hit.rowid for hit in hits if hit.rowid in cold]
    assert ranked_cold and not set(ranked_cold) & set(read)
    assert [hit.rowid for hit in hits] == [hit.rowid for hit in reference]
    assert [hit.similarity for hit in hits] == pytest.approx(
        [hit.similarity for hit in reference], abs=1e-6
    )
