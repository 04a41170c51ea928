"""Recall latency of the daemon's API, in process and over HTTP, idle and during cycles.

One store of N chunks (default 100,000) is built quickly: synthetic text (topic
words, so full-text search has real work) with clustered random unit vectors
as embeddings (the figures are latencies, not recall quality; text queries are
embedded by the real model), all live, or with `--cold-share` that share of them in the
cold tier, as a sweep leaves a store (recall also searches the cold tier: exactly while
it is small, from `recall.cold_graph_from` chunks on through the live index's graph,
whose answers are then first compared with the exact search's). Then, in one run:

* baselines: raw hnswlib single-query k-NN (HnswIndex.knn_many, k = the recall
  candidate pool) and one text embedding, back to back and each after an untimed recall
  by vector (as recall by text embeds its query: between other work, its caches colder),
  and the k-NN again, and recall by vector in process, each after an untimed pause of
  PAUSE_S (as a server meets each request: its core idle while it waited);
* in process (daemon.api.operations over the live index): recall by vector, by
  text, by text with filters, a context bundle (not recorded), and save-then-recall (a new chunk saved, then
  recalled by its text: the pair is timed, and the chunk must come first);
* the same through a real `dreamcycle run` daemon over its Unix socket, with the blocking
  client agents import (daemon/api/client.py, over urllib3), beside an HTTP floor: the
  daemon's server stack alone (scripts/http_floor.py: Hypercorn's trio worker, a bare ASGI
  app, one worker-thread hop) answering a recorded recall by vector through the same
  client, so the HTTP figures can be read as floor + the rest; and the floor again
  through httpx's client, which the blocking client used before (the client's own share);
* both again while dream cycles run back to back beside them, with Reward pulses to
  propagate (one per cycle: in process before each cycle, to the daemon from a process
  of its own, each sent once the daemon's log shows a cycle ended since the last); by
  default each pulse is a reinforce of a stored chunk, or with `--pulses-from text` a
  pulse seeded at a query text, which the daemon embeds beside the measured calls.

Each figure is measured in `--rounds` rounds (default 3) of `--calls` calls (default
500), the figures of one path taking turns round by round, so that a slow minute of a
shared machine lands in one round of every figure rather than in all of one; the
baselines take turns with the idle in-process figures, the HTTP floor with the idle HTTP
figures, and each path (idle or with
cycles, in process or over HTTP) is a batch of its own, so ratios between paths compare
different minutes. A figure's p50 and p99 are the medians of its rounds', and its rounds'
lowest and highest p99 are kept beside them. Ratios to the baselines
measured in the same run, and resident memory. Results go to
bench-results/recall.json; docs/benchmarks.md has figures and targets.

    .venv/bin/python scripts/bench_recall.py [--chunks 100000] [--calls 500] [--rounds 3]
        [--cold-share 0.6]

One file: a benchmark that runs as one standalone script, its store, workload and daemon set
up for that one run.
"""

from __future__ import annotations

import argparse
import dataclasses
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import numpy as np
import numpy.typing as npt

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.api import edit_models, recall_models
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import ApiError
from dreamcycle.daemon.api.client_wire import Route
from dreamcycle.daemon.api.contract import CONTEXT, PULSE, RECALL, REINFORCE, SAVE
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import CYCLE_MAX_GIVE_WAY_S
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.recall.state import RecallState, share
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.daemon.scheduling.cycle_thread import CPU_PRIORITIES, CycleThread
from dreamcycle.daemon.service.loop import set_up_the_daemon_process
from dreamcycle.daemon.signing_keys import init_key
from dreamcycle.daemon.statuses import CycleStatus
from dreamcycle.pulses.ranking import best_labels
from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store import read_paths, tiers
from dreamcycle.store.database import NewObservation
from dreamcycle.store.embedder import DEFAULT_DIM
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.local_servers import ServerStartError, stop_process, wait_until_ready

DEFAULT_CHUNKS: Final = 100_000
#: Most of the store --cold-share may put in the cold tier (some must stay live to find).
MAX_COLD_SHARE: Final = 0.9
DEFAULT_CALLS: Final = 500
DEFAULT_ROUNDS: Final = 3
DEFAULT_OUT: Final = Path("bench-results/recall.json")
SEED: Final = 20261123
TOPICS: Final = 500
WORDS_PER_TOPIC: Final = 12
WORDS_PER_CHUNK: Final = 24
#: Same-cluster cosine about 1 / (1 + 0.6^2), as in bench_propagate.
CLUSTER_NOISE: Final = 0.6
INSERT_BATCH: Final = 5_000
PROJECTS: Final = 20
READY_TIMEOUT_S: Final = 600.0
STOP_TIMEOUT_S: Final = 120.0
#: A request to the daemon or the floor: long enough for a call queued behind a cycle's write.
CLIENT_TIMEOUT_S: Final = 60.0
PERCENTILES: Final = (50, 99)
#: Pulse texts (or reinforced chunks) the cycles-running figures cycle through.
PULSE_TEXTS: Final = 50
#: Where the cycles' pulses come from: a reinforce of a stored chunk (seeded at its stored
#: embedding), or a pulse seeded at a text, which is embedded as it is sent.
PULSE_SOURCES: Final = ("feedback", "text")
#: How the daemon logs the end of a cycle, however it ended: the pulse sender sends the
#: next pulse once it reads one (checking every PULSE_POLL_S), so each cycle has about
#: one to apply, as in process.
CYCLE_ENDED: Final = re.compile(
    '"msg": "cycle (?:{})"'.format(
        "|".join(status.value for status in CycleStatus if status is not CycleStatus.RUNNING)
    ).encode()
)
PULSE_POLL_S: Final = 0.01
#: How the paths measured beside cycles end; without it, the idle path.
CYCLES_RUNNING: Final = ", cycles running"
#: How a baseline's figure name ends: the targets are ratios to these, measured alone.
BASELINE_MARK: Final = "(baseline)"
FLOOR_FIGURE: Final = f"HTTP floor {BASELINE_MARK}"
FLOOR_HTTPX_FIGURE: Final = f"HTTP floor through httpx {BASELINE_MARK}"
EMBED_AFTER_RECALL: Final = f"embed one text, after a recall {BASELINE_MARK}"
KNN_AFTER_PAUSE: Final = f"raw k-NN, after a pause {BASELINE_MARK}"
#: The untimed pause before each call of the "after a pause" figures: about a recall's
#: round trip over HTTP, for which a server's core waits idle between two requests.
PAUSE_S: Final = 0.002
FLOOR_PATH: Final = "Hypercorn, bare ASGI app"


@dataclasses.dataclass(frozen=True)
class Pulses:
    """The Reward pulse each cycle beside the figures gets: `source` is one of
    PULSE_SOURCES. A text pulse is embedded as it is sent: beside the measured calls in the
    daemon (another client's work on the same two cores, not the cycle's), in the cycle's
    own thread in process; a reinforce is seeded at a stored embedding, so the cycles have
    the same work to propagate and nothing else runs beside the calls."""

    source: str
    texts: list[str]
    hashes: list[str]

    def send(self, ops: Operations, i: int) -> None:
        request = self._request(i, f"bench {i}")
        if isinstance(request, edit_models.PulseRequest):
            ops.pulse(request)
        else:
            ops.reinforce(request)

    def post(self, client: MemoryClient, i: int) -> None:
        # Nonces of their own: a request repeating one sent in process would queue nothing.
        request = self._request(i, f"bench http {i}")
        if isinstance(request, edit_models.PulseRequest):
            client.send(PULSE, request)
        else:
            client.send(REINFORCE, request)

    def _request(
        self, i: int, nonce: str
    ) -> edit_models.PulseRequest | edit_models.FeedbackRequest:
        """The `i`th pulse: a text pulse, or a reinforce of a stored chunk."""
        if self.source == "text":
            return edit_models.PulseRequest(text=self.texts[i % len(self.texts)], nonce=nonce)
        ref = self.hashes[i % len(self.hashes)]
        return edit_models.FeedbackRequest(ref=ref, reason="bench", nonce=nonce)


def live_hashes(rt: Runtime, count: int) -> list[str]:
    """Hashes of `count` live chunks, spread over the store."""
    rows = rt.db.fetch_all(
        "SELECT content_hash FROM observations WHERE cold_at IS NULL AND deleted_at IS NULL "
        "ORDER BY id"
    )
    step = max(1, len(rows) // count)
    return [str(row[0]) for row in rows[::step][:count]]


def _syllable_words(rng: np.random.Generator, count: int) -> list[str]:
    consonants, vowels = "bcdfghklmnprstvz", "aeiou"
    words: set[str] = set()
    while len(words) < count:
        length = int(rng.integers(2, 4))
        words.add(
            "".join(
                consonants[int(rng.integers(len(consonants)))] + vowels[int(rng.integers(5))]
                for _ in range(length)
            )
        )
    return sorted(words)


class Corpus:
    """Topic vocabularies and centres: chunk i belongs to topic i % TOPICS."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        words = _syllable_words(rng, TOPICS * WORDS_PER_TOPIC)
        self.vocab = [words[t * WORDS_PER_TOPIC : (t + 1) * WORDS_PER_TOPIC] for t in range(TOPICS)]
        centres = rng.standard_normal((TOPICS, DEFAULT_DIM)).astype(np.float32)
        self.centres = centres / np.linalg.norm(centres, axis=1, keepdims=True)

    def text(self, topic: int, serial: int) -> str:
        picked = self.rng.choice(self.vocab[topic], size=WORDS_PER_CHUNK)
        return f"note {serial}: " + " ".join(str(w) for w in picked)

    def vectors(self, topics: npt.NDArray[np.int64]) -> Vectors:
        noise = self.rng.standard_normal((len(topics), DEFAULT_DIM)).astype(np.float32)
        raw = self.centres[topics] + CLUSTER_NOISE * noise / np.sqrt(DEFAULT_DIM)
        unit: Vectors = (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)
        return unit

    def query(self) -> str:
        topic = int(self.rng.integers(TOPICS))
        return " ".join(str(w) for w in self.rng.choice(self.vocab[topic], size=5))


def build_store(
    config: Config, corpus: Corpus, chunks: int, cold_share: float = 0.0, seed: int = SEED
) -> None:
    """`chunks` admitted chunks; `cold_share` of them, drawn at random, in the cold tier as
    a sweep leaves them (it keeps the bottom 60 % there by default)."""
    rt = Runtime.open(config)
    db = rt.db
    try:
        version = rt.embedder.index_version
        for start in range(0, chunks, INSERT_BATCH):
            serials = range(start, min(chunks, start + INSERT_BATCH))
            topics = np.array([s % TOPICS for s in serials], dtype=np.int64)
            items = [
                NewObservation(
                    content=corpus.text(int(t), s),
                    project=f"project-{s % PROJECTS}",
                    # Half of each project's chunks are facts: a filter on both matches
                    # 1 / (2 * PROJECTS) of the store, never none.
                    kind="fact" if (s // PROJECTS) % 2 else "note",
                    topic_key=f"topic/{int(t)}",
                )
                for s, t in zip(serials, topics, strict=True)
            ]
            with db.transaction():
                added = db.add_observations(items, now_ms=rt.clock.now_ms())
                rowids = [a.rowid for a in added]
                db.set_embeddings(
                    rowids, corpus.vectors(topics), model_id=rt.embedder.model_id,
                    index_version=version,
                )  # fmt: skip
                # Admitted as the cycle would; the journal is not needed to measure recall.
                db.conn.executemany(
                    "UPDATE observations SET admitted_seq = 0 WHERE id = ?", [(r,) for r in rowids]
                )
        if cold_share > 0:
            every = [int(r[0]) for r in db.fetch_all("SELECT id FROM observations ORDER BY id")]
            picked = np.random.default_rng(seed).permutation(every)[: int(len(every) * cold_share)]
            with db.transaction():
                tiers.move_to_cold(
                    db, sorted(picked.tolist()), reason="benchmark", now_ms=rt.clock.now_ms()
                )
        rt.open_index()
    finally:
        rt.close()


def idle_path(path: str) -> str:
    """The path measured with nothing beside it that `path` is compared with."""
    return path.removesuffix(CYCLES_RUNNING)


def percentiles(samples: list[float]) -> dict[str, float]:
    values = np.array(samples) * 1000.0
    return {f"p{p}_ms": float(np.percentile(values, p)) for p in PERCENTILES}


@dataclasses.dataclass(frozen=True)
class After:
    """A call timed alone, each time after an untimed one: what it costs in the state the
    first leaves the machine's caches in."""

    untimed: Callable[[int], Any]
    timed: Callable[[int], Any]


def pause(_: int) -> None:
    time.sleep(PAUSE_S)


def knn_call(peer: Peer, vectors: Vectors, pool: int) -> Callable[[int], Any]:
    """The raw k-NN baseline: one query of the recall candidate pool on the live index."""
    return lambda i: peer.index.knn_many(vectors[i][None, :], pool)


def measure(calls: int, action: Callable[[int], Any] | After) -> dict[str, float]:
    samples: list[float] = []
    for i in range(calls):
        if isinstance(action, After):
            action.untimed(i)
            call = action.timed
        else:
            call = action
        started = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


#: One figure to measure: its name, the path it takes, and one call (given its number).
Figure = tuple[str, str, Callable[[int], Any] | After]


def measure_rounds(figures: list[Figure], calls: int, rounds: int) -> list[dict[str, Any]]:
    """Every figure `rounds` times, taking turns; each row the medians of its rounds'
    p50 and p99, and the lowest and highest of its rounds' p99."""
    by_round: list[list[dict[str, float]]] = [[] for _ in figures]
    for _ in range(rounds):
        for results, (_, _, action) in zip(by_round, figures, strict=True):
            results.append(measure(calls, action))
    return [
        {
            "figure": name,
            "path": path,
            **{key: float(np.median([r[key] for r in results])) for key in results[0]},
            "p99_min_ms": min(r["p99_ms"] for r in results),
            "p99_max_ms": max(r["p99_ms"] for r in results),
            "rounds": results,
        }
        for (name, path, _), results in zip(figures, by_round, strict=True)
    ]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class Workload:
    """The four API figures, through either a transport or the operations themselves."""

    def __init__(self, corpus: Corpus, vectors: Vectors, call: Callable[[str, Any], Any]) -> None:
        self.corpus = corpus
        self.vectors = vectors
        self.call = call
        self.queries = [corpus.query() for _ in range(len(vectors))]
        self.saved = 0

    def by_vector(self, i: int) -> None:
        self.call(
            "recall", recall_models.RecallRequest(vector=self.vectors[i].tolist(), record=False)
        )

    def by_text(self, i: int) -> None:
        self.call("recall", recall_models.RecallRequest(query=self.queries[i], record=False))

    def filtered(self, i: int) -> None:
        filters = recall_models.RecallFilters(project=f"project-{i % PROJECTS}", kind="fact")
        self.call(
            "recall",
            recall_models.RecallRequest(query=self.queries[i], filters=filters, record=False),
        )

    def context(self, i: int) -> None:
        self.call("context", recall_models.ContextRequest(task=self.queries[i], record=False))

    def save_then_recall(self, i: int) -> None:
        self.saved += 1
        text = f"fresh {os.getpid()} {time.monotonic_ns()} " + self.queries[i]
        saved = self.call("save", edit_models.SaveRequest(content=text))
        found = self.call("recall", recall_models.RecallRequest(query=text, record=False, top_k=1))
        if found.hits[0].content_hash != saved.content_hash:
            raise BenchmarkError("a saved chunk was not recalled first at once")

    def figures(self, path: str) -> list[Figure]:
        return [
            ("recall by vector", path, self.by_vector),
            ("recall by text", path, self.by_text),
            ("recall by text, filtered", path, self.filtered),
            ("context bundle", path, self.context),
            ("save, then recall", path, self.save_then_recall),
        ]


def graph_agreement(
    rt: Runtime, peer: Peer, ops: Operations, vectors: Vectors, pool: int
) -> dict[str, float]:
    """How close the index's cold search comes to the exact search of the cold tier, beside
    how close the live index comes to the live tier's: the share of each exact search's
    `pool` nearest that the approximate one finds, and the share of queries whose top hits
    are the same both ways (the cold tier searched exactly or through the index, the live
    tier through the index both ways)."""
    # Views of their own: a runtime keeps the recall state it was first given, and `rt`'s
    # is neither exact at this size nor the API's (which searches on its helper threads).
    exact = dataclasses.replace(rt)
    exact_search = ColdSearch(0)
    share(exact, RecallState(exact_search))
    through_index = dataclasses.replace(rt)
    share(through_index, ops.recall_state)
    index_search = ops.recall_state.cold_search
    stamp = rt.db.change_stamp()
    cold = read_paths.tier_sets(rt.db).cold
    live, live_vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
    live_found, cold_found, same_hits = [], [], []
    for vector in vectors:
        exact_live = set(best_labels(live, live_vectors @ vector, pool))
        labels, _ = peer.index.knn_many(vector[None, :], pool)
        live_found.append(len(exact_live & set(labels[0].tolist())) / len(exact_live))
        exact_cold = set(exact_search.candidates(exact, stamp, cold, vector, pool, None))
        index_cold = set(
            index_search.candidates(through_index, stamp, cold, vector, pool, peer.index)
        )
        cold_found.append(len(exact_cold & index_cold) / max(len(exact_cold), 1))
        hits = [
            [
                hit.rowid
                for hit in rank_query(view, "", vector, rt.config.recall.top_k, index=peer.index)
            ]
            for view in (exact, through_index)
        ]
        same_hits.append(float(hits[0] == hits[1]))
    return {
        "live_index_found": float(np.mean(live_found)),
        "cold_index_found": float(np.mean(cold_found)),
        "same_top_hits": float(np.mean(same_hits)),
    }


def in_process_call(ops: Operations) -> Callable[[str, Any], Any]:
    return lambda name, request: getattr(ops, name)(request)


def http_call(client: MemoryClient) -> Callable[[str, Any], Any]:
    routes: dict[str, Route[Any, Any]] = {"recall": RECALL, "save": SAVE, "context": CONTEXT}
    return lambda name, request: client.send(routes[name], request)


def httpx_recall_by_vector(client: httpx.Client, vectors: Vectors) -> Callable[[int], Any]:
    """A recall by vector as the blocking client sent it over httpx (FLOOR_HTTPX_FIGURE)."""

    def call(i: int) -> Any:
        request = recall_models.RecallRequest(vector=vectors[i].tolist(), record=False)
        response = client.post("/v1/recall", content=request.model_dump_json(exclude_none=True))
        response.raise_for_status()
        return recall_models.RecallResponse.model_validate_json(response.content)

    return call


@contextmanager
def repeated_beside(step: Callable[[], None]) -> Iterator[None]:
    """`step()` again and again in a thread of its own while the block runs; on leaving,
    the step under way ends first, and what a step raised is raised here."""
    stop = threading.Event()
    failed: list[BaseException] = []

    def loop() -> None:
        try:
            while not stop.is_set():
                step()
        except BaseException as exc:
            failed.append(exc)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    if failed:
        raise failed[0]


@contextmanager
def cycles_beside(
    peer: Peer, ops: Operations, pulses: Pulses, cpu_priority: str
) -> Iterator[list[int]]:
    """Dream cycles back to back in the daemon's cycle thread, at `cpu_priority`, each
    with a Reward pulse of its own to propagate (a store where nothing happens has
    cycles that cost almost nothing), sent from another thread as a request would be."""
    done = [0]
    cycle_thread = CycleThread("cycle", cpu_priority)
    peer.embedder.load_within(cycle_thread.at_normal_priority)  # as the daemon does

    def cycle() -> None:
        pulses.send(ops, done[0])
        cycle_thread.submit(run_cycle_blocking, peer).result()
        done[0] += 1

    try:
        with repeated_beside(cycle):
            yield done
    finally:
        cycle_thread.close()


@contextmanager
def pulses_beside(
    data_dir: Path, log_path: Path, pulses: Pulses, every_s: float | None = None
) -> Iterator[Any]:
    """A Reward pulse for each of the daemon's cycles, so they have work, as in process;
    from a process of its own, so that sending one never holds up a measured call in
    this one (`.value` of the two it yields: pulses sent, cycles ended meanwhile).

    One per cycle rather than at a fixed rate: a pulse every 0.05 s gave each cycle of a
    large store several, whose texts the daemon embeds: load beside the cycles that the
    in-process figures never had. `every_s` sends them at that fixed rate instead, to
    compare."""
    spawned = multiprocessing.get_context("spawn")
    stop, started = spawned.Event(), spawned.Event()
    sent, cycles = spawned.Value("i", 0), spawned.Value("i", 0)
    sender = spawned.Process(
        target=send_pulses,
        args=(data_dir / "api.sock", log_path, pulses, every_s, stop, started, (sent, cycles)),
        daemon=True,
    )
    sender.start()
    if not started.wait(READY_TIMEOUT_S):
        sender.kill()
        raise BenchmarkError("the pulse sender did not start")
    try:
        yield sent, cycles
    finally:
        stop.set()
        sender.join(STOP_TIMEOUT_S)
        if sender.exitcode != 0:
            raise BenchmarkError(f"the pulse sender failed (exit code {sender.exitcode})")


def send_pulses(
    socket_path: Path,
    log_path: Path,
    pulses: Pulses,
    every_s: float | None,
    stop: Any,
    started: Any,
    counts: tuple[Any, Any],
) -> None:
    """`pulses_beside`'s process: a pulse, then wait for a cycle to end (or `every_s`),
    and again."""
    sent, cycles = counts
    with _socket_client(socket_path) as client, log_path.open("rb") as log:
        log.seek(0, os.SEEK_END)
        started.set()
        pending = b""
        while not stop.is_set():
            pulses.post(client, sent.value)
            sent.value += 1
            # At a fixed rate, the next is due at a time; otherwise once a cycle ended.
            due_at = None if every_s is None else time.monotonic() + every_s
            ended = 0
            while not stop.wait(PULSE_POLL_S):
                lines = (pending + log.read()).split(b"\n")
                pending = lines.pop()
                ended += sum(1 for line in lines if CYCLE_ENDED.search(line))
                if (ended > 0) if due_at is None else time.monotonic() >= due_at:
                    break
            cycles.value += ended


def recorded_answer(client: MemoryClient, vector: npt.NDArray[np.float32]) -> bytes:
    """The daemon's answer to one recall by vector: what the HTTP floor answers with."""
    request = recall_models.RecallRequest(vector=vector.tolist(), record=False)
    return client.send(RECALL, request).model_dump_json().encode()


@contextmanager
def http_floor(socket_path: Path, answer: Path) -> Iterator[MemoryClient]:
    """scripts/http_floor.py in its own process, as the daemon runs in its own."""
    command = [sys.executable, str(Path(__file__).with_name("http_floor.py")),
               str(socket_path), str(answer)]  # fmt: skip
    log_path = socket_path.with_suffix(".log")
    # It answers any request, /healthz too, with the recorded answer.
    with _served(
        command, None, log_path, socket_path, MemoryClient.ping, "the HTTP floor server"
    ) as served:
        yield served[0]


@contextmanager
def _served(
    command: list[str],
    env: dict[str, str] | None,
    log_path: Path,
    socket_path: Path,
    ready: Callable[[MemoryClient], object],
    what: str,
) -> Iterator[tuple[MemoryClient, subprocess.Popen[bytes]]]:
    """`command` running, and a client of its socket once `ready(client)` succeeds (its
    socket file can exist before it listens); its log's tail printed if the run fails."""
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(command, env=env, stdout=log_file, stderr=subprocess.STDOUT)
    client = _socket_client(socket_path)

    def answers() -> bool:
        try:
            ready(client)
        except ApiError:
            return False
        return True

    try:
        try:
            wait_until_ready(process, what, log_path, answers, READY_TIMEOUT_S)
        except ServerStartError as exc:  # its log's tail is printed below
            raise BenchmarkError(str(exc).splitlines()[0]) from None
        yield client, process
    except (BenchmarkError, ApiError):
        print(log_path.read_text(encoding="utf-8", errors="replace")[-4000:], file=sys.stderr)
        raise
    finally:
        client.close()
        stop_process(process, STOP_TIMEOUT_S)


def _socket_client(socket_path: Path) -> MemoryClient:
    return MemoryClient(socket_path, timeout_s=CLIENT_TIMEOUT_S)


def _httpx_socket_client(socket_path: Path) -> httpx.Client:
    return httpx.Client(
        transport=httpx.HTTPTransport(uds=str(socket_path)),
        base_url="http://dreamcycle",
        headers={"content-type": "application/json"},
        timeout=CLIENT_TIMEOUT_S,
    )


@contextmanager
def daemon(
    data_dir: Path,
    interval_s: float,
    *,
    give_way_s: float,
    cpu_priority: str,
) -> Iterator[tuple[MemoryClient, int, Path]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    env.update({"DREAMCYCLE_API_ENABLED": "1", "DREAMCYCLE_API_PORT": "0",
                "DREAMCYCLE_METRICS_LISTEN": "", "DREAMCYCLE_SWEEP_ENABLED": "0",
                "DREAMCYCLE_CYCLE_GIVE_WAY_S": repr(give_way_s),
                "DREAMCYCLE_CYCLE_CPU_PRIORITY": cpu_priority})  # fmt: skip
    command = [str(Path(sys.executable).parent / "dreamcycle"), "run", "--data-dir",
               str(data_dir), "--peer-id", "bench", "--interval", str(interval_s)]  # fmt: skip
    log_path = data_dir.parent / f"daemon-{time.monotonic_ns()}.log"
    socket_path = data_dir / "api.sock"
    # Its status answers once the index is loaded.
    with _served(command, env, log_path, socket_path, MemoryClient.status, "the daemon") as served:
        client, process = served
        yield client, process.pid, log_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="calls per figure in each round"
    )
    parser.add_argument(
        "--rounds", type=int, default=DEFAULT_ROUNDS, help="rounds per figure, taking turns"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        help="GIL switch interval in seconds for the in-process figures (default: the "
        "daemon's); to compare settings, with --in-process-only",
    )
    parser.add_argument(
        "--give-way",
        type=float,
        default=None,
        help="cycle.give_way_s for the cycles beside the figures, in process and in the "
        "daemon (default: the configured default; 0: cycles never wait); to compare settings",
    )
    parser.add_argument(
        "--pulse-every",
        type=float,
        default=None,
        help="send the daemon a pulse every this many seconds while its cycles run "
        "(default: one per cycle, as in process); runs up to run Z in docs/benchmarks-history.md "
        "sent one every 0.05 s",
    )
    parser.add_argument(
        "--pulses-from",
        choices=PULSE_SOURCES,
        default=PULSE_SOURCES[0],
        help="each cycle's Reward pulse: a reinforce of a stored chunk (default), or a pulse "
        "seeded at a text, which the daemon embeds beside the measured calls (runs up to "
        "AD in docs/benchmarks.md)",
    )
    parser.add_argument(
        "--in-process-only", action="store_true", help="skip the daemon's (HTTP) figures"
    )
    parser.add_argument(
        "--cold-share",
        type=float,
        default=0.0,
        help="share of the chunks in the cold tier, as a sweep leaves them (0-0.9; the "
        "sweep's default keeps 0.6 there)",
    )
    parser.add_argument(
        "--cpu-priority",
        choices=CPU_PRIORITIES,
        default=None,
        help="cycle.cpu_priority for the cycles beside the figures, in process and in the "
        "daemon (default: the configured default); to compare settings",
    )
    args = parser.parse_args(argv)
    if args.chunks < 1000 or args.calls < 10 or args.rounds < 1:
        raise BenchmarkError("--chunks must be >= 1000, --calls >= 10 and --rounds >= 1")
    if not 0 <= args.cold_share <= MAX_COLD_SHARE:
        raise BenchmarkError(f"--cold-share must be in [0, {MAX_COLD_SHARE}]")
    if args.switch_interval is not None and not 0 < args.switch_interval <= 1:
        raise BenchmarkError("--switch-interval must be in (0, 1] seconds")
    if args.pulse_every is not None and not 0.01 <= args.pulse_every <= 60:
        raise BenchmarkError("--pulse-every must be in [0.01, 60] seconds")
    if args.give_way is not None and not 0 <= args.give_way <= CYCLE_MAX_GIVE_WAY_S:
        raise BenchmarkError(f"--give-way must be in [0, {CYCLE_MAX_GIVE_WAY_S:g}] seconds")
    machine = describe_machine(("hnswlib", "onnxruntime", "fastapi", "hypercorn", "apsw"))
    set_up_the_daemon_process()  # the in-process figures run as the daemon's process does
    if args.switch_interval is not None:
        sys.setswitchinterval(args.switch_interval)
    rng = np.random.default_rng(SEED)
    corpus = Corpus(rng)
    query_vectors = corpus.vectors(rng.integers(0, TOPICS, size=args.calls).astype(np.int64))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-recall-") as scratch:
        data_dir = Path(scratch) / "data"
        config = load_config(
            None,
            environ={},
            overrides={"peer.data_dir": str(data_dir), "peer.id": "bench", "metrics.listen": "",
                       "sweep.enabled": False}
            | ({} if args.give_way is None else {"cycle.give_way_s": args.give_way})
            | ({} if args.cpu_priority is None else {"cycle.cpu_priority": args.cpu_priority}),
        )  # fmt: skip
        started = time.perf_counter()
        init_key(config)  # the daemon below signs what it publishes
        build_store(config, corpus, args.chunks, args.cold_share)
        print(f"store of {args.chunks} chunks built in {time.perf_counter() - started:.0f} s")
        give_way_s = config.cycle.give_way_s
        cpu_priority = config.cycle.cpu_priority
        rt = Runtime.open(config)
        peer = rt.open_peer()
        ops = Operations(rt)
        ops.attach(peer)
        # Below `recall.cold_graph_from` cold chunks recall searches them exactly: nothing
        # to compare.
        cold_through_index = 0 < config.recall.cold_graph_from <= int(args.chunks * args.cold_share)
        agreement = (
            graph_agreement(rt, peer, ops, query_vectors, config.recall.candidates)
            if cold_through_index
            else None
        )
        if agreement is not None:
            print(
                f"of the exact {config.recall.candidates} nearest: the live index finds "
                f"{agreement['live_index_found']:.1%}, the index's cold search "
                f"{agreement['cold_index_found']:.1%}; top {config.recall.top_k} hits the "
                f"same as with the exact cold search: {agreement['same_top_hits']:.1%} of "
                f"{len(query_vectors)} queries"
            )
        pool = config.recall.candidates
        texts = [corpus.query() for _ in range(args.calls)]
        workload = Workload(corpus, query_vectors, in_process_call(ops))
        baselines: list[Figure] = [
            (f"raw k-NN {BASELINE_MARK}", "hnswlib", knn_call(peer, query_vectors, pool)),
            (f"embed one text {BASELINE_MARK}", "onnxruntime",
             lambda i: ops._embedder.embed_one(texts[i])),
            # As recall by text embeds its query: after a recall's work, not back to back.
            (EMBED_AFTER_RECALL, "onnxruntime",
             After(workload.by_vector, lambda i: ops._embedder.embed_one(texts[i]))),
            # As a server meets each request: after waiting for it, its core idle.
            (KNN_AFTER_PAUSE, "hnswlib", After(pause, knn_call(peer, query_vectors, pool))),
        ]  # fmt: skip
        paused: list[Figure] = [
            ("recall by vector, after a pause", "in process", After(pause, workload.by_vector))
        ]
        rows += measure_rounds(
            baselines + workload.figures("in process") + paused, args.calls, args.rounds
        )
        pulses = Pulses(
            args.pulses_from, [corpus.query() for _ in range(PULSE_TEXTS)],
            live_hashes(rt, PULSE_TEXTS),
        )  # fmt: skip
        with cycles_beside(peer, ops, pulses, cpu_priority) as cycles:
            # The baselines again beside the cycles: what the machine's two cores leave
            # to any caller while a cycle takes one, before the API adds its part.
            beside = [(name, path + CYCLES_RUNNING, call) for name, path, call in baselines]
            rows += measure_rounds(
                beside + workload.figures("in process" + CYCLES_RUNNING), args.calls, args.rounds
            )
        print(f"{cycles[0]} cycles, each with a pulse, ran beside the in-process figures")
        beside_counts: dict[str, int | None] = {
            "in_process_cycles": cycles[0], "daemon_cycles": None, "daemon_pulses": None
        }  # fmt: skip
        in_process_rss = rss_mib(os.getpid())
        ops.close()
        peer.save_index()
        peer.close()
        rt.close()
        daemon_rss: float | None = None
        if not args.in_process_only:
            with daemon(
                data_dir,
                3600.0,
                give_way_s=give_way_s,
                cpu_priority=cpu_priority,
            ) as (
                client,
                pid,
                _,
            ):
                time.sleep(2.0)  # the first cycle runs at start
                http = Workload(corpus, query_vectors, http_call(client))
                answer = Path(scratch) / "answer.json"
                answer.write_bytes(recorded_answer(client, query_vectors[0]))
                floor_socket = Path(scratch) / "floor.sock"
                with (
                    http_floor(floor_socket, answer) as floor_client,
                    _httpx_socket_client(floor_socket) as floor_httpx,
                ):
                    floor = Workload(corpus, query_vectors, http_call(floor_client))
                    floors: list[Figure] = [
                        (FLOOR_FIGURE, FLOOR_PATH, floor.by_vector),
                        (FLOOR_HTTPX_FIGURE, FLOOR_PATH,
                         httpx_recall_by_vector(floor_httpx, query_vectors)),
                    ]  # fmt: skip
                    rows += measure_rounds(
                        [*floors, *http.figures("HTTP, Unix socket")], args.calls, args.rounds
                    )
                daemon_rss = rss_mib(pid)
            with (
                daemon(
                    data_dir,
                    0.01,
                    give_way_s=give_way_s,
                    cpu_priority=cpu_priority,
                ) as (
                    client,
                    pid,
                    log_path,
                ),
                pulses_beside(data_dir, log_path, pulses, args.pulse_every) as (sent, cycles_ended),
            ):
                http = Workload(corpus, query_vectors, http_call(client))
                rows += measure_rounds(
                    http.figures("HTTP, Unix socket" + CYCLES_RUNNING), args.calls, args.rounds
                )
            print(
                f"{sent.value} pulses sent to the daemon while {cycles_ended.value} of its "
                "cycles ran back to back"
            )
            beside_counts |= {"daemon_cycles": cycles_ended.value, "daemon_pulses": sent.value}
    knn_p99 = rows[0]["p99_ms"]
    embed_p99 = rows[1]["p99_ms"]
    # Each figure's idle row is measured before the same figure beside cycles.
    first_p99: dict[str, float] = {}
    for row in rows:
        first_p99.setdefault(row["figure"], row["p99_ms"])
    embed_after_p99 = first_p99[EMBED_AFTER_RECALL]
    knn_paused_p99 = first_p99[KNN_AFTER_PAUSE]
    floor_p99 = first_p99.get(FLOOR_FIGURE)
    idle = {(r["figure"], r["path"]): r for r in rows if idle_path(r["path"]) == r["path"]}
    for row in rows:
        base = idle.get((row["figure"], idle_path(row["path"])))
        row["x_idle_p99"] = row["p99_ms"] / base["p99_ms"] if base else None
    measured = [r for r in rows if not r["figure"].endswith(BASELINE_MARK)]
    for row in measured:
        row["x_knn_p99"] = row["p99_ms"] / knn_p99
        row["x_paused_knn_p99"] = row["p99_ms"] / knn_paused_p99
        row["minus_embed_p99_ms"] = row["p99_ms"] - embed_p99
        row["minus_embed_after_recall_p99_ms"] = row["p99_ms"] - embed_after_p99
        over_http = row["path"].startswith("HTTP")
        row["minus_floor_p99_ms"] = (
            row["p99_ms"] - floor_p99 if over_http and floor_p99 is not None else None
        )
    print(machine_summary(machine))
    print(f"{args.chunks} chunks ({args.cold_share:.0%} cold), {args.rounds} rounds of "
          f"{args.calls} calls per figure "
          "(medians of the rounds), GIL switch interval "
          f"{sys.getswitchinterval() * 1000:g} ms in process, cycles give way for "
          f"{give_way_s * 1000:g} ms at CPU priority {cpu_priority}; RSS in process "
          f"{in_process_rss:.0f} MiB, daemon "
          f"{'not run' if daemon_rss is None else f'{daemon_rss:.0f} MiB'}")  # fmt: skip
    print_table(
        rows,
        [
            Column("figure"),
            Column("path"),
            Column("p50_ms", "p50 ms", ".2f"),
            Column("p99_ms", "p99 ms", ".2f"),
            Column("p99_min_ms", "p99 low", ".2f"),
            Column("p99_max_ms", "p99 high", ".2f"),
            Column("x_knn_p99", "p99 / k-NN p99", ".1f"),
            Column("x_paused_knn_p99", "p99 / paused k-NN p99", ".1f"),
            Column("minus_embed_p99_ms", "p99 - embed p99 (ms)", ".2f"),
            Column("minus_embed_after_recall_p99_ms", "p99 - embed after recall p99", ".2f"),
            Column("minus_floor_p99_ms", "p99 - HTTP floor p99 (ms)", ".2f"),
            Column("x_idle_p99", "p99 / idle p99", ".2f"),
        ],
    )
    write_json(
        args.out,
        {"machine": machine, "chunks": args.chunks, "calls": args.calls, "rounds": args.rounds,
         "cold_share": args.cold_share, "cold_index_agreement": agreement,
         "switch_interval_s": sys.getswitchinterval(), "give_way_s": give_way_s,
         "cpu_priority": cpu_priority,
         "rss_mib": {"in_process": in_process_rss, "daemon": daemon_rss},
         "cycles_beside": beside_counts,
         "pulse_every_s": args.pulse_every,
         "pulses_from": args.pulses_from, "rows": rows},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
