"""Requests beside a build of the cold tier's graph, against the same requests just before.

`scripts/bench_recall.py` measures its paths (idle, cycles running, cold graph building)
in batches of minutes of their own, so a ratio between paths also compares two stretches
of a shared machine. Here each build is paired with the seconds just before it: a segment
of calls with nothing beside them, then the API's own thread starts a build of the cold
tier's graph (`ColdSearch.start_build`, at `cycle.cpu_priority`, as after a sweep that
moved many chunks to the cold tier) and the same calls run again while it does (the
script fails if no build is running when they end). Each pair gives a ratio beside /
alone for every figure, and the figures are:

* raw k-NN (the baseline): `HnswIndex.knn_many(1 query, k=the recall candidate pool)` on
  the live index;
* recall by vector and recall by text in process (`Operations.recall`, not recorded).

The store is bench_recall's (synthetic text, clustered random unit vectors, `--cold-share`
of it in the cold tier). The table gives each figure's p50 and p99 alone and beside a build
(medians over the pairs) and the paired ratios of the p99 (lowest, median, highest), with
how many pairs had the tail longer beside a build than alone: on a quiet machine a build
that costs the requests nothing leaves that near half.

    .venv/bin/python scripts/bench_cold_build.py [--chunks 100000] [--cold-share 0.6]
        [--pairs 6] [--calls 500]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.daemon.service.loop import set_up_the_daemon_process
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.bench_recall import (
    BASELINE_MARK,
    MAX_COLD_SHARE,
    SEED,
    TOPICS,
    Corpus,
    Workload,
    build_store,
    in_process_call,
    knn_call,
    measure,
    rss_mib,
    wait_for_build,
)

DEFAULT_CHUNKS: Final = 100_000
DEFAULT_COLD_SHARE: Final = 0.6
DEFAULT_PAIRS: Final = 6
DEFAULT_CALLS: Final = 500
DEFAULT_OUT: Final = Path("bench-results/cold_build.json")
#: Before the first pair: the stored embeddings are read into memory in the background
#: after start, and the calls beside that read would count as "alone".
SETTLE_S: Final = 15.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    parser.add_argument(
        "--cold-share",
        type=float,
        default=DEFAULT_COLD_SHARE,
        help="share of the chunks in the cold tier (its graph is what is built)",
    )
    parser.add_argument(
        "--pairs", type=int, default=DEFAULT_PAIRS, help="segments alone, each then beside a build"
    )
    parser.add_argument(
        "--calls", type=int, default=DEFAULT_CALLS, help="calls per figure in each segment"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.chunks < 1000 or args.calls < 10 or args.pairs < 1:
        raise BenchmarkError("--chunks must be >= 1000, --calls >= 10 and --pairs >= 1")
    if not 0 < args.cold_share <= MAX_COLD_SHARE:
        raise BenchmarkError(f"--cold-share must be in (0, {MAX_COLD_SHARE}]")
    machine = describe_machine(("hnswlib", "onnxruntime", "apsw"))
    set_up_the_daemon_process()  # the calls run as the daemon's process runs them
    rng = np.random.default_rng(SEED)
    corpus = Corpus(rng)
    vectors = corpus.vectors(rng.integers(0, TOPICS, size=args.calls).astype(np.int64))
    with tempfile.TemporaryDirectory(prefix="bench-cold-build-") as scratch:
        config = load_config(
            None,
            environ={},
            overrides={"peer.data_dir": str(Path(scratch) / "data"), "peer.id": "bench",
                       "metrics.listen": "", "sweep.enabled": False},
        )  # fmt: skip
        cold = int(args.chunks * args.cold_share)
        if not 0 < config.recall.cold_graph_from <= cold:
            raise BenchmarkError(
                f"{cold} cold chunks: the cold tier is searched through a graph from "
                f"recall.cold_graph_from = {config.recall.cold_graph_from} on"
            )
        build_store(config, corpus, args.chunks, args.cold_share)
        rt = Runtime.open(config)
        peer = rt.open_peer()
        ops = Operations(rt)
        ops.attach(peer)
        try:
            first_build_s = wait_for_build(ops.recall_state.cold_search, 0)
            print(f"store of {args.chunks} chunks; cold tier graph built in {first_build_s:.1f} s")
            time.sleep(SETTLE_S)
            workload = Workload(corpus, vectors, in_process_call(ops))
            figures: list[tuple[str, Callable[[int], Any]]] = [
                (f"raw k-NN {BASELINE_MARK}", knn_call(peer, vectors, config.recall.candidates)),
                ("recall by vector", workload.by_vector),
                ("recall by text", workload.by_text),
            ]
            alone: list[list[dict[str, float]]] = [[] for _ in figures]
            beside: list[list[dict[str, float]]] = [[] for _ in figures]
            build_seconds: list[float] = []
            for pair in range(args.pairs):
                for results, (_, action) in zip(alone, figures, strict=True):
                    results.append(measure(args.calls, action))
                builds_before = ops.recall_state.cold_search.builds
                started = time.perf_counter()
                ops.recall_state.cold_search.start_build(rt)
                for results, (_, action) in zip(beside, figures, strict=True):
                    results.append(measure(args.calls, action))
                if ops.recall_state.cold_search.build_seconds() is None:
                    # Ended early, failed, or never started (the daemon's log says which).
                    raise BenchmarkError(
                        f"pair {pair + 1}: no build was running when the calls beside it "
                        "ended; if builds ran, give fewer --calls"
                    )
                wait_for_build(ops.recall_state.cold_search, builds_before)
                build_seconds.append(time.perf_counter() - started)
            in_process_rss = rss_mib(os.getpid())
        finally:
            ops.close()
            peer.close()
            rt.close()
    rows = [_row(name, a, b) for (name, _), a, b in zip(figures, alone, beside, strict=True)]
    print(machine_summary(machine))
    print(
        f"{args.chunks} chunks ({args.cold_share:.0%} cold), {args.pairs} pairs of segments of "
        f"{args.calls} calls per figure; builds at CPU priority {config.cycle.cpu_priority}, "
        f"{float(np.median(build_seconds)):.1f} s each at the median; RSS {in_process_rss:.0f} MiB"
    )
    print_table(
        rows,
        [
            Column("figure"),
            Column("alone_p50_ms", "p50 alone", ".2f"),
            Column("beside_p50_ms", "p50 beside", ".2f"),
            Column("alone_p99_ms", "p99 alone", ".2f"),
            Column("beside_p99_ms", "p99 beside", ".2f"),
            Column("p50_ratio_median", "p50 ratio", ".2f"),
            Column("p99_ratio_low", "p99 ratio low", ".2f"),
            Column("p99_ratio_median", "p99 ratio", ".2f"),
            Column("p99_ratio_high", "p99 ratio high", ".2f"),
            Column("pairs_slower_p99", "pairs slower at p99", "d"),
        ],
    )
    write_json(
        args.out,
        {"machine": machine, "chunks": args.chunks, "cold_share": args.cold_share,
         "pairs": args.pairs, "calls": args.calls, "cpu_priority": config.cycle.cpu_priority,
         "switch_interval_s": sys.getswitchinterval(), "rss_mib": in_process_rss,
         "cold_graph_build_s": {"at_start": first_build_s, "paired": build_seconds},
         "rows": rows},
    )  # fmt: skip
    return 0


def _row(
    figure: str, alone: list[dict[str, float]], beside: list[dict[str, float]]
) -> dict[str, Any]:
    """One figure's pairs: medians of each side, and the ratios pair by pair."""
    p50_ratios = [b["p50_ms"] / a["p50_ms"] for a, b in zip(alone, beside, strict=True)]
    p99_ratios = [b["p99_ms"] / a["p99_ms"] for a, b in zip(alone, beside, strict=True)]
    return {
        "figure": figure,
        "alone_p50_ms": float(np.median([a["p50_ms"] for a in alone])),
        "beside_p50_ms": float(np.median([b["p50_ms"] for b in beside])),
        "alone_p99_ms": float(np.median([a["p99_ms"] for a in alone])),
        "beside_p99_ms": float(np.median([b["p99_ms"] for b in beside])),
        "p50_ratio_median": float(np.median(p50_ratios)),
        "p99_ratio_low": min(p99_ratios),
        "p99_ratio_median": float(np.median(p99_ratios)),
        "p99_ratio_high": max(p99_ratios),
        "pairs_slower_p99": sum(r > 1 for r in p99_ratios),
        "pairs": [{"alone": a, "beside": b} for a, b in zip(alone, beside, strict=True)],
    }


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
