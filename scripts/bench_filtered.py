"""Filtered vector search: the index with a filter against an exact search of the matches.

A recall filter (project, kind, session, ...) restricts the vector retriever to the
chunks it matches. The index can search with a filter (hnswlib calls back for every
chunk it visits and skips those the filter rejects), or the matching chunks' stored
embeddings can be compared with the query one by one. The first costs more the fewer
chunks match (it visits about k / (matching fraction) chunks) and misses some of the
true nearest; the second costs in proportion to the matches and misses none. This
script measures both on one store of N chunks (the recall benchmark's synthetic
corpus) for filters of several sizes, beside raw unfiltered k-NN in the same run, and
prints which path `recall.exact_filter_scale` chooses for each.

Filters are random sets of live chunks (metadata such as a session says nothing about
where a chunk lies in embedding space), or with `--filters topics` whole topics, each
query asking about one of its filter's topics (a project asked about its own work).
Each size gets FILTERS_PER_SIZE filters, and each query takes the next; k is the recall candidate pool. Figures are
taken in `--rounds` rounds that take turns, medians of the rounds' p50 and p99. The
share of the exact top k that the index returns is its recall.

    .venv/bin/python scripts/bench_filtered.py [--chunks 100000] [--queries 200]

One file: a benchmark that runs as one standalone script.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store.filtered_search import nearest_in_filter
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.bench_recall import SEED, TOPICS, Corpus, Figure, build_store, measure_rounds

DEFAULT_CHUNKS: Final = 100_000
DEFAULT_QUERIES: Final = 200
DEFAULT_ROUNDS: Final = 3
DEFAULT_SIZES: Final = (500, 2_000, 5_000, 10_000, 20_000, 50_000)
DEFAULT_OUT: Final = Path("bench-results/filtered.json")
FILTERS_PER_SIZE: Final = 5
#: Queries whose top k are compared between the two paths, per size.
RECALL_QUERIES: Final = 50


def _chunks_by_topic(rt: Runtime) -> list[list[int]]:
    """Each topic's chunks (the store's topic keys are "topic/<number>")."""
    by_topic: list[list[int]] = [[] for _ in range(TOPICS)]
    for rowid, topic_key in rt.db.fetch_all("SELECT id, topic_key FROM observations"):
        by_topic[int(str(topic_key).removeprefix("topic/"))].append(int(rowid))
    return by_topic


def _topic_filters(
    rng: np.random.Generator, corpus: Corpus, by_topic: list[list[int]], size: int, queries: int
) -> tuple[list[frozenset[int]], Vectors]:
    """Filters made of whole topics (the first `size` chunks of enough random topics),
    and for query i a vector of one of filter i's topics: a project asked about its own
    work."""
    filters: list[frozenset[int]] = []
    topics_of: list[npt.NDArray[np.int64]] = []
    for _ in range(FILTERS_PER_SIZE):
        topics = rng.permutation(TOPICS)
        chunks: list[int] = []
        taken = 0
        while len(chunks) < size:
            chunks += by_topic[int(topics[taken])]
            taken += 1
        filters.append(frozenset(chunks[:size]))
        topics_of.append(topics[:taken].astype(np.int64))
    asked = np.stack(
        [
            corpus.vectors(rng.choice(topics_of[i % FILTERS_PER_SIZE], size=1))[0]
            for i in range(queries)
        ]
    )
    return filters, asked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    parser.add_argument(
        "--queries", type=int, default=DEFAULT_QUERIES, help="queries per figure in each round"
    )
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument(
        "--sizes",
        default=",".join(str(s) for s in DEFAULT_SIZES),
        help="chunks each filter matches, comma-separated",
    )
    parser.add_argument(
        "--filters",
        choices=("random", "topics"),
        default="random",
        help="random sets of chunks, or whole topics with queries about those topics",
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        sizes = [int(s) for s in args.sizes.split(",")]
    except ValueError:
        raise BenchmarkError(
            f"--sizes must be integers separated by commas: {args.sizes!r}"
        ) from None
    if args.chunks < 1000 or args.queries < 10 or args.rounds < 1:
        raise BenchmarkError("--chunks must be >= 1000, --queries >= 10 and --rounds >= 1")
    if any(not 0 < s <= args.chunks for s in sizes):
        raise BenchmarkError(f"every --sizes value must be in 1..{args.chunks}")
    machine = describe_machine(("hnswlib", "numpy"))
    rng = np.random.default_rng(SEED)
    corpus = Corpus(rng)
    queries = corpus.vectors(rng.integers(0, TOPICS, size=args.queries).astype(np.int64))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-filtered-") as scratch:
        config = load_config(
            None,
            environ={},
            overrides={"peer.data_dir": str(Path(scratch) / "data"), "peer.id": "bench",
                       "metrics.listen": "", "sweep.enabled": False},
        )  # fmt: skip
        started = time.perf_counter()
        build_store(config, corpus, args.chunks)
        print(f"store of {args.chunks} chunks built in {time.perf_counter() - started:.0f} s")
        rt = Runtime.open(config)
        try:
            index = rt.open_peer().index
            recall_state(rt).stored_vectors.load_all(rt.db, rt.embedder.index_version)
            live = np.array(sorted(index.labels() - index.deleted_labels()), dtype=np.int64)
            k = config.recall.candidates
            scale = config.recall.exact_filter_scale

            def raw(i: int) -> Any:
                return index.knn_many(queries[i][None, :], k)

            rows += measure_rounds(
                [("raw k-NN (baseline)", "no filter", raw)], args.queries, args.rounds
            )
            by_topic = _chunks_by_topic(rt) if args.filters == "topics" else []
            for size in sizes:
                if args.filters == "random":
                    filters = [
                        frozenset(rng.choice(live, size, replace=False).tolist())
                        for _ in range(FILTERS_PER_SIZE)
                    ]
                    asked = queries
                else:
                    filters, asked = _topic_filters(rng, corpus, by_topic, size, args.queries)

                def through_index(
                    i: int, filters: list[frozenset[int]] = filters, asked: Vectors = asked
                ) -> list[int]:
                    labels, _ = index.knn_many(
                        asked[i][None, :], k, allowed=filters[i % FILTERS_PER_SIZE]
                    )
                    found: list[int] = labels[0].tolist()
                    return found

                def exact(
                    i: int, filters: list[frozenset[int]] = filters, asked: Vectors = asked
                ) -> list[int]:
                    return nearest_in_filter(
                        rt.db,
                        recall_state(rt).stored_vectors,
                        index,
                        asked[i],
                        k,
                        filters[i % FILTERS_PER_SIZE],
                    )

                figures: list[Figure] = [
                    (f"{size} matching", "index, filtered", through_index),
                    (f"{size} matching", "exact, matches only", exact),
                ]
                measured = measure_rounds(figures, args.queries, args.rounds)
                shared = [
                    len(set(through_index(i)) & set(exact(i))) / max(1, len(exact(i)))
                    for i in range(min(RECALL_QUERIES, args.queries))
                ]
                for row in measured:
                    row["matching"] = size
                    row["chosen"] = row["path"].startswith("exact") == (
                        size**2 <= scale * len(live)
                    )
                measured[0]["recall_vs_exact"] = float(np.mean(shared))
                rows += measured
        finally:
            rt.close()
    knn_p99 = rows[0]["p99_ms"]
    for row in rows:
        row["x_knn_p99"] = row["p99_ms"] / knn_p99
        row["shown_recall"] = f"{row['recall_vs_exact']:.3f}" if "recall_vs_exact" in row else "-"
        row["shown_chosen"] = "-" if "chosen" not in row else ("yes" if row["chosen"] else "")
    print(machine_summary(machine))
    print(f"{args.chunks} chunks, k = {k}, {args.rounds} rounds of {args.queries} queries per "
          f"figure (medians of the rounds); {args.filters} filters; "
          f"recall.exact_filter_scale = {scale:g}")  # fmt: skip
    print_table(
        rows,
        [
            Column("figure", "filter"),
            Column("path"),
            Column("p50_ms", "p50 ms", ".2f"),
            Column("p99_ms", "p99 ms", ".2f"),
            Column("x_knn_p99", "p99 / k-NN p99", ".1f"),
            Column("shown_recall", "share of exact top k"),
            Column("shown_chosen", "chosen"),
        ],
    )
    for row in rows:
        del row["shown_recall"], row["shown_chosen"]
    write_json(
        args.out,
        {"machine": machine, "chunks": args.chunks, "k": k, "queries": args.queries,
         "rounds": args.rounds, "filters": args.filters, "exact_filter_scale": scale,
         "rows": rows},
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
