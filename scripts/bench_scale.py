"""One peer at a million chunks: cycles, the sweep, start-up, recall and ingest, against targets.

Two stores are measured in one run, each in a process of its own (so each has its own
peak resident memory): the reference (default 100,000 chunks) and the large one (default
1,000,000). Each is built once (synthetic text on topic words and clustered random unit
vectors, 384-d, as scripts/bench_recall.py builds its store; the index built and saved by
the daemon's own code) and kept under `--cache`, outside the repository: the index of a
million chunks takes minutes to build on two cores. Every run copies the cached store
into a scratch directory, since cycles and the sweep change it.

Per store, in order, in the peer's process:

* start-up: `Runtime.open` and `open_peer` on the saved index (it must load, not rebuild);
* the first cycle after start, then idle cycles (no pulses, nothing new: what a quiet
  peer pays every `cycle.interval_s`; downscale's share of the store still decays);
* recall by vector in process (the API's operations, not recorded) taking turns, round by
  round, with its baseline, raw k-NN of the recall candidate pool on the live index;
* a cycle with 1,000 new pulses (reinforces of stored chunks, queued as the API queues
  them), propagated over the index and published;
* the percentile sweep over the whole store, due (its phase's seconds), twice: the first
  moves the bottom of every kind to the cold tier, the second is what a daily sweep of a
  settled store costs;
* recall again on the swept store, which searches the cold tier as well, through the
  live index's graph, which keeps the swept chunks apart: the first recall, then the
  same rounds of recall and k-NN as before;
* peak resident memory (VmHWM) of the peer's process.

Then, in a process of its own on the store the peer left, as `dreamcycle ingest` runs with
no daemon: bulk ingest of real text (paragraphs of the standard library's documentation)
through `daemon.intake.ingest.ingest`, with a progress bar, beside its baseline: the
embedder's own batched rate on the same texts, measured just before; and that process's
peak resident memory.

The store's chunks are dated 30 days back, past the sweep's grace period, so the sweep
has something to move and downscale decays its share of the store each cycle, as in a
peer that has run for a month. Results go to `--out` (default bench-results/scale.json)
with a description of the machine; docs/benchmarks.md has the figures.

    .venv/bin/python scripts/bench_scale.py [--chunks 1000000] [--reference 100000]
        [--cache ~/.cache/dreamcycle/bench-scale] [--build-only]

One file: a benchmark that runs as one standalone script, its stores and its measuring
child process set up for that run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any, Final

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import LAST_SWEEP_META_KEY, run_cycle_blocking
from dreamcycle.daemon.intake.ingest import INGEST_BATCH, ingest
from dreamcycle.daemon.memory.forgetting import sweep as run_sweep
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime, save_index
from dreamcycle.daemon.signing_keys import init_key
from dreamcycle.store.database import Database, NewObservation
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.bench_recall import INSERT_BATCH, PROJECTS, SEED, TOPICS, Corpus, percentiles

DEFAULT_CHUNKS: Final = 1_000_000
DEFAULT_REFERENCE: Final = 100_000
DEFAULT_CACHE: Final = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dreamcycle" / "bench-scale"
)
DEFAULT_OUT: Final = Path("bench-results/scale.json")
DEFAULT_PULSES: Final = 1_000
DEFAULT_CALLS: Final = 1_000
DEFAULT_ROUNDS: Final = 3
IDLE_CYCLES: Final = 3
#: How far back the store's chunks are dated: past the sweep's grace period (a week).
STORE_AGE_MS: Final = 30 * 86_400_000
#: Written last into a cached store: a build stopped half way is built again.
COMPLETE_MARKER: Final = "complete.json"
PEER_ID: Final = "bench"
#: Paragraphs shorter than this are headings or fragments, not memories.
MIN_PARAGRAPH_CHARS: Final = 80
#: How long the API's background load of stored embeddings may take.
VECTORS_LOAD_TIMEOUT_S: Final = 600.0
KIB_PER_MIB: Final = 1024

#: The targets: (key of the large store's figures, limit, what is compared).
TARGETS: Final = (
    ("cycle_with_pulses_s", 5.0, "a cycle with 1,000 new pulses, seconds"),
    ("sweep_settled_s", 1.0, "the percentile sweep over the store, seconds"),
    ("idle_cycle_s", 1.0, "an idle cycle, seconds (median)"),
    ("peak_rss_gib", 2.5, "the peer's peak resident memory, GiB"),
    ("startup_s", 10.0, "start-up on the saved index, seconds"),
    ("recall_p99_x_reference", 2.0, "recall by vector p99 / the reference store's"),
    ("recall_p99_x_knn", 4.0, "recall by vector p99 / raw k-NN p99"),
    ("recall_p99_swept_x_reference", 2.0, "the same after the sweep / the reference store's"),
    ("recall_p99_x_knn_swept", 4.0, "the same after the sweep / raw k-NN p99"),
    ("ingest_x_embedder", 0.8, "bulk ingest rate / the embedder's batched rate (at least)"),
)
#: Targets met from above rather than below.
AT_LEAST: Final = frozenset({"ingest_x_embedder"})


def bench_config(data_dir: Path) -> Config:
    """The daemon's defaults, on a local zeitgeist directory beside the store."""
    return load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(data_dir),
            "peer.id": PEER_ID,
            "metrics.listen": "",
            "zeitgeist.dir": str(data_dir / "zeitgeist"),
        },
    )


# ---- the cached stores -------------------------------------------------------------------


def cached_store(cache: Path, chunks: int) -> Path:
    """The data directory of a store of `chunks` chunks with its saved index, built once."""
    data_dir = cache / f"store-{chunks}"
    if (data_dir / COMPLETE_MARKER).exists():
        # Migrations a newer version brings apply here once, not in a measured start-up.
        Database(bench_config(data_dir).database_path).close()
        return data_dir
    if data_dir.exists():
        shutil.rmtree(data_dir)
    started = time.perf_counter()
    config = bench_config(data_dir)
    init_key(config)
    build_store(config, chunks)
    seconds = time.perf_counter() - started
    (data_dir / COMPLETE_MARKER).write_text(json.dumps({"chunks": chunks, "build_s": seconds}))
    print(f"store of {chunks:,} chunks built in {seconds:.0f} s, kept in {data_dir}")
    return data_dir


def build_store(config: Config, chunks: int) -> None:
    from tqdm import tqdm

    corpus = Corpus(np.random.default_rng(SEED))
    rt = Runtime.open(config)
    db = rt.db
    dated_ms = rt.clock.now_ms() - STORE_AGE_MS
    try:
        version = rt.embedder.index_version
        with tqdm(total=chunks, desc="stored", unit="chunk", file=sys.stderr) as bar:
            for start in range(0, chunks, INSERT_BATCH):
                serials = range(start, min(chunks, start + INSERT_BATCH))
                chunk_topics = np.array([s % TOPICS for s in serials], dtype=np.int64)
                items = [
                    NewObservation(
                        content=corpus.text(int(t), s),
                        project=f"project-{s % PROJECTS}",
                        kind="fact" if (s // PROJECTS) % 2 else "note",
                        topic_key=f"topic/{int(t)}",
                    )
                    for s, t in zip(serials, chunk_topics, strict=True)
                ]
                with db.transaction():
                    added = db.add_observations(items, now_ms=dated_ms)
                    rowids = [a.rowid for a in added]
                    db.set_embeddings(
                        rowids,
                        corpus.vectors(chunk_topics),
                        model_id=rt.embedder.model_id,
                        index_version=version,
                    )
                    # Admitted as a cycle admits them, without the journal (not measured).
                    db.conn.executemany(
                        "UPDATE observations SET admitted_seq = 0 WHERE id = ?",
                        [(r,) for r in rowids],
                    )
                bar.update(len(items))
        with tqdm(total=chunks, desc="indexed", unit="chunk", file=sys.stderr) as bar:

            def progress(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            index, _ = rt.open_index(progress=progress)
        save_index(db, index)
    finally:
        rt.close()


# ---- measuring one store (in a child process) ----------------------------------------------


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / KIB_PER_MIB / 1024
    return float("nan")


def real_texts(limit: int) -> list[str]:
    """Paragraphs of the standard library's documentation, each once."""
    seen: dict[str, None] = {}
    for text in topics.values():
        for paragraph in text.split("\n\n"):
            stripped = paragraph.strip()
            if len(stripped) >= MIN_PARAGRAPH_CHARS:
                seen.setdefault(stripped, None)
    return list(seen)[:limit]


def timed(call: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    value = call()
    return time.perf_counter() - started, value


def spread_hashes(rt: Runtime, count: int) -> list[str]:
    """`count` live chunks' hashes spread evenly over the store, picked by the database:
    a list of every hash would be the benchmark's memory, counted as the peer's."""
    live = "FROM observations WHERE deleted_at IS NULL AND cold_at IS NULL"
    total = int(rt.db.fetch_all(f"SELECT count(*) {live}")[0][0])
    step = max(1, total // max(count, 1))
    rows = rt.db.fetch_all(
        f"SELECT content_hash FROM (SELECT content_hash, row_number() OVER (ORDER BY id) - 1 "
        f"AS n {live}) WHERE n % ? = 0 LIMIT ?",
        (step, count),
    )
    return [str(row[0]) for row in rows]


def measure_store(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Every figure of one store; runs in the child process."""
    from dreamcycle.daemon.api import edit_models
    from dreamcycle.daemon.api.operations import Operations
    from dreamcycle.daemon.service.loop import set_up_the_daemon_process

    set_up_the_daemon_process()  # as the daemon's process runs
    config = bench_config(data_dir)
    figures: dict[str, Any] = {}

    def open_all() -> Any:
        rt = Runtime.open(config)
        return rt, rt.open_peer()

    figures["startup_s"], (rt, peer) = timed(open_all)
    if peer.index_rebuild_reason is not None:
        raise BenchmarkError(f"the saved index was rebuilt: {peer.index_rebuild_reason}")
    figures["live_chunks"] = peer.index.live_count
    figures["first_cycle_s"], _ = timed(lambda: run_cycle_blocking(peer))
    idle = []
    for _ in range(IDLE_CYCLES):
        seconds, state = timed(lambda: run_cycle_blocking(peer))
        idle.append({"seconds": seconds, "phases": phase_seconds(state.stats)})
    figures["idle_cycles"] = idle
    figures["idle_cycle_s"] = float(np.median([c["seconds"] for c in idle]))
    figures["peak_rss_gib_after_idle"] = peak_rss_gib()

    ops = Operations(rt)
    ops.attach(peer)
    wait_for_vectors(rt)
    figures["embeddings_held"] = len(recall_state(rt).stored_vectors)
    rng = np.random.default_rng(SEED + 1)
    corpus = Corpus(rng)
    queries = corpus.vectors(rng.integers(0, TOPICS, size=args.calls).astype(np.int64))
    figures.update(recall_rounds(rt, peer, ops, queries, args))
    figures["peak_rss_gib_after_recall"] = peak_rss_gib()

    for i, ref in enumerate(spread_hashes(rt, args.pulses)):
        ops.reinforce(edit_models.FeedbackRequest(ref=ref, reason="bench", nonce=f"scale {i}"))
    seconds, state = timed(lambda: run_cycle_blocking(peer))
    figures["cycle_with_pulses_s"] = seconds
    figures["cycle_with_pulses_phases"] = phase_seconds(state.stats)
    figures["cycle_with_pulses_stats"] = state.stats["salience_pulse_propagate"]
    figures["peak_rss_gib_after_pulses"] = peak_rss_gib()

    # The sweep's plan over the whole store (ranks, threshold, the prune gate), moving
    # nothing: what every sweep computes, whatever it then moves.
    figures["sweep_plan_s"], planned = timed(lambda: run_sweep(peer, peer.now_ms(), dry_run=True))
    figures["sweep_plan_stats"] = planned
    for label in ("sweep_first", "sweep_settled"):
        with rt.db.transaction():
            rt.db.set_meta(LAST_SWEEP_META_KEY, "0")
        seconds, state = timed(lambda: run_cycle_blocking(peer))
        sweep = state.stats["percentile_sweep"]
        figures[f"{label}_s"] = sweep["seconds"]
        figures[f"{label}_cycle_s"] = seconds
        figures[f"{label}_moved"] = sweep.get("cold", 0)
        figures[f"{label}_stats"] = sweep
    # The plan again, now that every chunk's words are kept: what a dry run costs from then on.
    figures["sweep_plan_kept_s"], _ = timed(lambda: run_sweep(peer, peer.now_ms(), dry_run=True))

    # Recall on the swept store: it searches the cold tier too, through the live index.
    figures["recall_swept_first_s"], _ = timed(lambda: ops.recall(recall_request(queries[0])))
    figures["cold_held_by_index"] = peer.index.cold_count
    swept = recall_rounds(rt, peer, ops, queries, args)
    figures.update({f"{key}_swept": value for key, value in swept.items()})
    figures["peak_rss_gib_after_swept_recall"] = peak_rss_gib()
    ops.close()
    peer.close()
    rt.close()
    figures["peak_rss_gib"] = peak_rss_gib()
    return figures


def measure_ingest(data_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    """Bulk ingest into the store, in a process of its own as `dreamcycle ingest` runs: it
    stores directly only while no daemon holds the data directory (with one, each item
    goes through the daemon's API and its one model)."""
    rt = Runtime.open(bench_config(data_dir))
    try:
        texts = real_texts(args.ingest)
        rt.embedder.embed(texts[:INGEST_BATCH])  # warm: the model's first batch is slower
        embed_s, _ = timed(
            lambda: [
                rt.embedder.embed(texts[i : i + INGEST_BATCH])
                for i in range(0, len(texts), INGEST_BATCH)
            ]
        )
        ingest_s, report = timed(lambda: ingest_with_bar(rt, texts))
    finally:
        rt.close()
    if report.created != len(texts):
        raise BenchmarkError(f"ingest stored {report.created} of {len(texts)} texts")
    embed_per_s, ingest_per_s = len(texts) / embed_s, len(texts) / ingest_s
    return {
        "ingest_texts": len(texts),
        "embed_per_s": embed_per_s,
        "ingest_per_s": ingest_per_s,
        "ingest_x_embedder": ingest_per_s / embed_per_s,
        "ingest_peak_rss_gib": peak_rss_gib(),
    }


def phase_seconds(stats: dict[str, Any]) -> dict[str, float]:
    return {name: float(phase.get("seconds", 0.0)) for name, phase in stats.items()}


def sample(calls: int, call: Callable[[int], Any]) -> dict[str, float]:
    samples = []
    for i in range(calls):
        started = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - started)
    return percentiles(samples)


def recall_request(vector: Any) -> Any:
    from dreamcycle.daemon.api import recall_models

    return recall_models.RecallRequest(vector=vector.tolist(), record=False)


def recall_rounds(
    rt: Runtime, peer: Any, ops: Any, queries: Any, args: argparse.Namespace
) -> dict[str, float]:
    """Recall by vector in process (not recorded) and its baseline, raw k-NN of the recall
    candidate pool on the live index, taking turns round by round: each figure is the
    median of its rounds'."""
    pool = rt.config.recall.candidates
    by_round: dict[str, list[dict[str, float]]] = {"knn": [], "recall": []}
    for _ in range(args.rounds):
        by_round["knn"].append(
            sample(args.calls, lambda i: peer.index.knn_many(queries[i][None, :], pool))
        )
        by_round["recall"].append(
            sample(args.calls, lambda i: ops.recall(recall_request(queries[i])))
        )
    figures: dict[str, float] = {}
    for name, rounds in by_round.items():
        figures[f"{name}_p50_ms"] = float(np.median([r["p50_ms"] for r in rounds]))
        figures[f"{name}_p99_ms"] = float(np.median([r["p99_ms"] for r in rounds]))
    figures["recall_p99_x_knn"] = figures["recall_p99_ms"] / figures["knn_p99_ms"]
    return figures


def wait_for_vectors(rt: Runtime) -> None:
    """Until the API's background load holds what it may of the stored embeddings."""
    if not recall_state(rt).stored_vectors.loaded.wait(VECTORS_LOAD_TIMEOUT_S):
        raise BenchmarkError("the stored embeddings were not loaded in time")


def ingest_with_bar(rt: Runtime, texts: list[str]) -> Any:
    from tqdm import tqdm

    items = [NewObservation(content=text, title="documentation") for text in texts]
    bars: dict[str, Any] = {}

    def progress(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=len(items), desc=stage, unit="chunk", file=sys.stderr)
        bars[stage].update(n)

    try:
        return ingest(rt, [items], progress=progress)
    finally:
        for bar in bars.values():
            bar.close()


# ---- the run ---------------------------------------------------------------------------------


def measure_in_child(cache_dir: Path, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    data_dir = scratch / cache_dir.name
    print(f"copying {cache_dir} to {data_dir}", flush=True)
    shutil.copytree(cache_dir, data_dir)
    # The copy leaves dirty pages the kernel writes back later: written out now, not
    # while start-up and the first cycles are measured.
    os.sync()
    figures: dict[str, Any] = {}
    # The peer first, then the ingest command on the store the peer left, as a user would
    # stop the daemon to ingest a large batch directly.
    for role in ("peer", "ingest"):
        out = scratch / f"{cache_dir.name}-{role}.json"
        command = [
            sys.executable, str(Path(__file__).resolve()), "--measure", str(data_dir),
            "--measure-role", role, "--measure-out", str(out), "--calls", str(args.calls),
            "--rounds", str(args.rounds), "--pulses", str(args.pulses),
            "--ingest", str(args.ingest),
        ]  # fmt: skip
        subprocess.run(command, check=True)
        figures.update(json.loads(out.read_text()))
    shutil.rmtree(data_dir)
    return figures


def judge(large: dict[str, Any], reference: dict[str, Any]) -> list[dict[str, Any]]:
    large = {
        **large,
        "recall_p99_x_reference": large["recall_p99_ms"] / reference["recall_p99_ms"],
        "recall_p99_swept_x_reference": (
            large["recall_p99_ms_swept"] / reference["recall_p99_ms_swept"]
        ),
    }
    rows = []
    for number, (key, limit, what) in enumerate(TARGETS, 1):
        value = float(large[key])
        met = value >= limit if key in AT_LEAST else value <= limit
        rows.append({"target": f"1.{number}", "what": what, "value": value, "limit": limit,
                     "met": met, "key": key})  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    parser.add_argument("--reference", type=int, default=DEFAULT_REFERENCE)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--pulses", type=int, default=DEFAULT_PULSES)
    parser.add_argument("--calls", type=int, default=DEFAULT_CALLS)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--ingest", type=int, default=len(real_texts(1 << 30)))
    parser.add_argument("--build-only", action="store_true", help="build the cached stores")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--measure-role", choices=("peer", "ingest"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure is not None:
        measure = measure_ingest if args.measure_role == "ingest" else measure_store
        write_json(args.measure_out, measure(args.measure, args))
        return 0
    if not 1000 <= args.reference < args.chunks:
        raise BenchmarkError("--reference must be >= 1000 and below --chunks")
    if args.pulses < 1 or args.calls < 10 or args.rounds < 1 or args.ingest < 1:
        raise BenchmarkError("--pulses, --ingest and --rounds must be >= 1, --calls >= 10")
    stores = {size: cached_store(args.cache, size) for size in (args.reference, args.chunks)}
    if args.build_only:
        return 0
    machine = describe_machine(("hnswlib", "onnxruntime", "apsw"))
    with tempfile.TemporaryDirectory(prefix="bench-scale-", dir=args.cache) as scratch:
        figures = {
            size: measure_in_child(path, Path(scratch), args) for size, path in stores.items()
        }
    reference, large = figures[args.reference], figures[args.chunks]
    rows = judge(large, reference)
    print(machine_summary(machine))
    per_store = [
        {"figure": key, "reference": reference.get(key), "large": large.get(key)}
        for key in ("startup_s", "first_cycle_s", "idle_cycle_s", "cycle_with_pulses_s",
                    "sweep_plan_s", "sweep_first_s", "sweep_first_moved", "sweep_settled_s",
                    "sweep_plan_kept_s",
                    "sweep_settled_moved", "knn_p50_ms",
                    "knn_p99_ms", "recall_p50_ms", "recall_p99_ms", "recall_p99_x_knn",
                    "recall_swept_first_s", "cold_held_by_index", "knn_p99_ms_swept",
                    "recall_p50_ms_swept", "recall_p99_ms_swept", "recall_p99_x_knn_swept",
                    "peak_rss_gib_after_pulses", "embed_per_s", "ingest_per_s",
                    "ingest_x_embedder", "peak_rss_gib", "ingest_peak_rss_gib")
    ]  # fmt: skip
    print(f"{args.reference:,} and {args.chunks:,} chunks")
    print_table(
        per_store,
        [Column("figure"), Column("reference", f"{args.reference:,}", ",.3f"),
         Column("large", f"{args.chunks:,}", ",.3f")],
    )  # fmt: skip
    print_table(
        rows,
        [Column("target"), Column("what"), Column("value", number_format=",.3f"),
         Column("limit", number_format=",.2f"), Column("met")],
    )  # fmt: skip
    write_json(
        args.out,
        {"machine": machine, "chunks": args.chunks, "reference": args.reference,
         "figures": {"reference": reference, "large": large}, "targets": rows},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
