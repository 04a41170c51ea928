"""Pulse propagation throughput, as a ratio to the raw k-NN rate of the same index.

For each size (synthetic clustered unit vectors, 384-d, labelled 1..n like
observation rowids) one HNSW index is built with store.index.HnswIndex and then:

* raw k-NN: HnswIndex.knn_many with k = 4, in batches and one query at a time;
* engine: pulses.propagate.propagate, BFS rule, over the index and an in-memory
  SalienceState (pulses.memory.InMemorySalience);
* daemon path: the same over store.salience.SalienceCache on a real database, with
  what the daemon writes per pulse (journal row, applied_pulses row) and one
  transaction plus cache flush per batch of pulses; once with each pulse's hops asked
  as it propagates, once with each batch's first two hops asked at once before it, as
  the daemon does (pulses.neighbour_cache);
* literal reference: the protocol's pseudocode rule (UpdateRule.LITERAL) against a
  naive SalienceState that reads with a SELECT and writes with one SQL UPDATE per
  chunk touched, once with every statement committed on its own and once with
  one transaction per pulse.

Results are pulses/s and ratios to the batched and single-query k-NN rates
(raw rates are medians of three runs), plus k-NN queries and salience updates
per pulse. docs/benchmarks.md has figures and how to read them.

Pulses use the parameters an outcome's pulses use (k = 3, max_hops = 2,
sigma = 0.15, decay_per_hop = 0.3) and alternate Reward and Decay.

    .venv/bin/python scripts/bench_propagate.py [--sizes 10000,100000] [--pulses 2000]

One file: a benchmark that runs as one standalone script, with the naive reference it
compares against beside it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, cast

import apsw
import numpy as np

if __package__ in (None, ""):
    # Run as a file (python scripts/bench_propagate.py): make `scripts` importable.
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.cycle.salience_pulse_propagate import PULSES_PER_TRANSACTION
from dreamcycle.pulses.constants import (
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_SIGMA,
)
from dreamcycle.pulses.graph import NeighbourIndex, SalienceState
from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.neighbour_cache import NeighbourCache
from dreamcycle.pulses.propagate import UpdateRule, propagate
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.index_graph import DEFAULT_EF, DEFAULT_EF_CONSTRUCTION, DEFAULT_M
from dreamcycle.store.salience import SalienceCache
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    parse_positive_ints,
    print_table,
    stopwatch,
    write_json,
)

DEFAULT_SIZES: Final = "10000,100000"
DEFAULT_PULSES: Final = 2_000
#: The literal reference commits every statement; it gets fewer pulses to stay within minutes.
DEFAULT_LITERAL_PULSES: Final = 200
DEFAULT_OUT: Final = Path("bench-results/propagate.json")
DEFAULT_SEED: Final = 20261122
LITERAL_PER_UPDATE: Final = "literal rule, SQL UPDATE per chunk, commit per UPDATE"
DAEMON_PATH_PER_PULSE: Final = "daemon path, hops asked per pulse"
DAEMON_PATH_PER_BATCH: Final = "daemon path, hops asked per batch"
LITERAL_PER_PULSE: Final = "literal rule, SQL UPDATE per chunk, commit per pulse"

DIM: Final = 384
#: Average chunks per synthetic topic cluster.
CLUSTER_SIZE: Final = 100
#: Noise norm around each cluster centre: same-cluster cosine about 1 / (1 + 0.6^2) = 0.74.
CLUSTER_SPREAD: Final = 0.6
#: Neighbours per raw k-NN query: a pulse with k = 3 asks hop-2 nodes for k + 1.
RAW_K: Final = 4
RAW_BATCH: Final = 1_000
RAW_BATCHED_QUERIES: Final = 10_000
RAW_SINGLE_QUERIES: Final = 2_000
#: Each raw rate is the median of this many runs.
RAW_REPEATS: Final = 3
#: Salience every chunk starts from, below the cap so Reward pulses change something.
START_SALIENCE: Final = 0.5
PULSE_STRENGTH: Final = 0.5
PULSE_TTL_S: Final = 3_600.0
INDEX_VERSION: Final = "bench/synthetic-384"
ORIGIN_PEER: Final = "bench"
PERCENTILES: Final = (50, 99)
SECONDS_PER_MS: Final = 1e-3


@dataclass(frozen=True)
class PathResult:
    """One way of applying pulses, measured."""

    name: str
    rule: str
    pulses: int
    seconds: float
    knn_queries: int
    salience_updates: int

    @property
    def pulses_per_s(self) -> float:
        return self.pulses / self.seconds

    @property
    def queries_per_pulse(self) -> float:
        return self.knn_queries / self.pulses


# ---- data -----------------------------------------------------------------------------------


def clustered_unit_vectors(count: int, centres: Vectors, rng: np.random.Generator) -> Vectors:
    """`count` unit vectors scattered around randomly chosen `centres`."""
    assignment = rng.integers(0, len(centres), count)
    noise = rng.standard_normal((count, centres.shape[1]), dtype=np.float32)
    points = centres[assignment] + CLUSTER_SPREAD * noise / np.float32(np.sqrt(centres.shape[1]))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return np.ascontiguousarray(points, dtype=np.float32)


def unit_centres(count: int, rng: np.random.Generator) -> Vectors:
    centres = rng.standard_normal((count, DIM), dtype=np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return centres


def make_pulses(seeds: Vectors) -> list[SalientPulse]:
    """Outcome-style pulses at `seeds`, alternating Reward and Decay."""
    return [
        SalientPulse(
            seed_embedding=seed,
            kind=PulseKind.REWARD if i % 2 == 0 else PulseKind.DECAY,
            strength=PULSE_STRENGTH,
            sigma=OUTCOME_SIGMA,
            max_hops=OUTCOME_MAX_HOPS,
            k=OUTCOME_K,
            decay_per_hop=OUTCOME_DECAY_PER_HOP,
            ts=i,
            origin_peer=ORIGIN_PEER,
            reason="bench",
            ttl_s=PULSE_TTL_S,
            index_version=INDEX_VERSION,
        ).with_id()
        for i, seed in enumerate(seeds)
    ]


def populate_database(path: Path, count: int) -> Database:
    """A real database with `count` chunks, rowids 1..count, all at START_SALIENCE."""
    db = Database(path)
    with db.transaction():
        added = db.add_observations(
            [NewObservation(content=f"synthetic chunk {i}") for i in range(count)], now_ms=0
        )
        db.conn.execute("UPDATE observations SET salience = ?", (START_SALIENCE,))
    if [a.rowid for a in (added[0], added[-1])] != [1, count]:
        raise BenchmarkError(f"{path} was not empty: rowids do not run from 1 to {count}")
    return db


# ---- the naive literal reference ----------------------------------------------------------


class SqlPerUpdateSalience:
    """A SalienceState straight over SQL: a SELECT per read, an UPDATE per write.

    Outside `transaction()` every statement commits on its own (an fsync each, as
    synchronous = FULL asks), which is what a store written from the protocol's
    pseudocode does; inside it, the statements of one pulse commit together.
    """

    def __init__(self, path: Path) -> None:
        self._conn = apsw.Connection(str(path))
        self._conn.execute("PRAGMA synchronous = FULL")
        self.updates = 0

    def _value(self, sql: str, label: int) -> Any:
        row = self._conn.execute(sql, (label,)).fetchone()
        if row is None:
            raise BenchmarkError(f"chunk {label} is not in the benchmark database")
        return row[0]

    def salience(self, label: int) -> float:
        return float(self._value("SELECT salience FROM observations WHERE id = ?", label))

    def pin_floor(self, label: int) -> float:
        return float(self._value("SELECT pin_floor FROM observations WHERE id = ?", label))

    def is_tombstoned(self, label: int) -> bool:
        sql = "SELECT deleted_at IS NOT NULL FROM observations WHERE id = ?"
        return bool(self._value(sql, label))

    def set_salience(self, label: int, value: float) -> None:
        self._conn.execute("UPDATE observations SET salience = ? WHERE id = ?", (value, label))
        self.updates += 1

    def transaction(self) -> AbstractContextManager[Any]:
        return cast(AbstractContextManager[Any], self._conn)

    def close(self) -> None:
        self._conn.close()


# ---- measurements ---------------------------------------------------------------------------


def _batched_rate(index: HnswIndex, queries: Vectors) -> float:
    with stopwatch() as elapsed:
        for start in range(0, len(queries), RAW_BATCH):
            index.knn_many(queries[start : start + RAW_BATCH], RAW_K)
    return len(queries) / elapsed.seconds


def _single_latencies(index: HnswIndex, queries: Vectors) -> list[float]:
    latencies: list[float] = []
    for row in range(len(queries)):
        with stopwatch() as one:
            index.knn_many(queries[row : row + 1], RAW_K)
        latencies.append(one.seconds)
    return latencies


def measure_raw_knn(index: HnswIndex, queries: Vectors) -> dict[str, Any]:
    """Batched and single-query rates, each the median of RAW_REPEATS runs (noise from neighbours)."""
    batched = queries[:RAW_BATCHED_QUERIES]
    singles = queries[:RAW_SINGLE_QUERIES]
    batched_rates = [_batched_rate(index, batched) for _ in range(RAW_REPEATS)]
    single_runs = [_single_latencies(index, singles) for _ in range(RAW_REPEATS)]
    single_rates = [len(run) / sum(run) for run in single_runs]
    median_run = single_runs[int(np.argsort(single_rates)[len(single_rates) // 2])]
    p50, p99 = (float(np.percentile(median_run, p)) / SECONDS_PER_MS for p in PERCENTILES)
    return {
        "k": RAW_K,
        "batch": RAW_BATCH,
        "repeats": RAW_REPEATS,
        "batched_queries": len(batched),
        "batched_queries_per_s": float(np.median(batched_rates)),
        "batched_queries_per_s_runs": batched_rates,
        "single_queries": len(singles),
        "single_queries_per_s": float(np.median(single_rates)),
        "single_queries_per_s_runs": single_rates,
        "single_p50_ms": p50,
        "single_p99_ms": p99,
    }


def run_pulses(
    name: str,
    rule: UpdateRule,
    pulses: Sequence[SalientPulse],
    index: HnswIndex,
    state: SalienceState,
    transaction: Callable[[], AbstractContextManager[Any]] = nullcontext,
) -> PathResult:
    """Propagate each pulse in turn, each inside `transaction()`."""
    queries = updates = 0
    with stopwatch() as elapsed:
        for pulse in pulses:
            with transaction():
                result = propagate(pulse, index, state, rule)
            queries += result.knn_queries
            updates += len(result.changes)
    return PathResult(name, rule.value, len(pulses), elapsed.seconds, queries, updates)


def run_daemon_path(
    pulses: Sequence[SalientPulse], index: HnswIndex, db: Database, *, per_batch: bool
) -> PathResult:
    """What the daemon's propagate phase does per pulse, in one transaction per batch; with
    `per_batch`, each batch's first two hops asked at once before it, as the daemon does
    (pulses.neighbour_cache), else each pulse's hops asked as it propagates."""
    cache = SalienceCache(db)
    queries = updates = 0
    with stopwatch() as elapsed:
        for start in range(0, len(pulses), PULSES_PER_TRANSACTION):
            batch = pulses[start : start + PULSES_PER_TRANSACTION]
            neighbours: NeighbourIndex = index
            if per_batch:
                neighbours = NeighbourCache(index)
                neighbours.prefetch(p for p in batch if not db.pulse_seen(p.pulse_id))
            with db.transaction():
                for pulse in batch:
                    if db.pulse_seen(pulse.pulse_id):
                        continue
                    result = propagate(pulse, neighbours, cache, UpdateRule.BFS)
                    queries += result.knn_queries
                    updates += len(result.changes)
                    journal_seq = db.journal(
                        "pulse",
                        pulse.pulse_id,
                        {"pulse": pulse.to_json(), "rule": UpdateRule.BFS.value},
                        now_ms=pulse.ts,
                    )
                    db.record_pulse(
                        pulse.pulse_id,
                        status="applied",
                        origin_peer=pulse.origin_peer,
                        reason=pulse.reason,
                        changed=len(result.changes),
                        journal_seq=journal_seq,
                        now_ms=pulse.ts,
                    )
                cache.flush()
    return PathResult(
        DAEMON_PATH_PER_BATCH if per_batch else DAEMON_PATH_PER_PULSE,
        UpdateRule.BFS.value,
        len(pulses),
        elapsed.seconds,
        queries,
        updates,
    )


def bench_size(
    size: int, pulse_count: int, literal_count: int, rng: np.random.Generator, work_dir: Path
) -> dict[str, Any]:
    print(f"\n== {size:,} chunks")
    centres = unit_centres(max(1, size // CLUSTER_SIZE), rng)
    vectors = clustered_unit_vectors(size, centres, rng)
    labels = np.arange(1, size + 1, dtype=np.int64)
    index = HnswIndex.create(work_dir / f"bench-{size}.hnsw", DIM, INDEX_VERSION, capacity=size)
    with stopwatch() as build:
        index.add(labels, vectors)
    print(
        f"index built in {build.seconds:.1f} s (M {DEFAULT_M}, ef_construction "
        f"{DEFAULT_EF_CONSTRUCTION}, ef {DEFAULT_EF}, one thread)"
    )
    del vectors
    queries = clustered_unit_vectors(max(RAW_BATCHED_QUERIES, pulse_count), centres, rng)
    raw = measure_raw_knn(index, queries)
    pulses = make_pulses(queries[:pulse_count])
    later_pulses = make_pulses(clustered_unit_vectors(pulse_count, centres, rng))
    with stopwatch() as populate:
        db = populate_database(work_dir / f"bench-{size}.db", size)
    print(f"database of {size:,} chunks written in {populate.seconds:.1f} s")
    try:
        saliences = dict.fromkeys(labels.tolist(), START_SALIENCE)
        paths = [
            run_pulses(
                "engine: in-memory salience",
                UpdateRule.BFS,
                pulses,
                index,
                InMemorySalience(saliences),
            ),
            run_daemon_path(pulses, index, db, per_batch=False),
            # Fresh seeds of the same clusters: the pulses above are recorded as applied.
            run_daemon_path(later_pulses, index, db, per_batch=True),
        ]
        naive = SqlPerUpdateSalience(db.path)
        try:
            literal = pulses[:literal_count]
            paths += [
                run_pulses(LITERAL_PER_UPDATE, UpdateRule.LITERAL, literal, index, naive),
                run_pulses(
                    LITERAL_PER_PULSE, UpdateRule.LITERAL, literal, index, naive, naive.transaction
                ),
            ]
        finally:
            naive.close()
    finally:
        db.close()
    report = [_path_report(path, raw) for path in paths]
    _print_size(raw, report)
    return {"size": size, "build_s": build.seconds, "raw_knn": raw, "paths": report}


def _path_report(path: PathResult, raw: dict[str, Any]) -> dict[str, Any]:
    ceiling = raw["batched_queries_per_s"] / path.queries_per_pulse
    return {
        "path": path.name,
        "rule": path.rule,
        "pulses": path.pulses,
        "seconds": path.seconds,
        "pulses_per_s": path.pulses_per_s,
        "knn_queries_per_pulse": path.queries_per_pulse,
        "salience_updates_per_pulse": path.salience_updates / path.pulses,
        "ratio_to_batched_knn": path.pulses_per_s / raw["batched_queries_per_s"],
        "ratio_to_single_knn": path.pulses_per_s / raw["single_queries_per_s"],
        "share_of_knn_ceiling": path.pulses_per_s / ceiling,
    }


def _print_size(raw: dict[str, Any], report: list[dict[str, Any]]) -> None:
    print(
        f"raw k-NN (k={RAW_K}): batched {raw['batched_queries_per_s']:,.0f} queries/s; single "
        f"{raw['single_queries_per_s']:,.0f} queries/s (p50 {raw['single_p50_ms']:.2f} ms, "
        f"p99 {raw['single_p99_ms']:.2f} ms)"
    )
    print_table(
        report,
        [
            Column("path"),
            Column("rule"),
            Column("pulses"),
            Column("pulses_per_s", "pulses/s"),
            Column("knn_queries_per_pulse", "k-NN/pulse", ".2f"),
            Column("salience_updates_per_pulse", "updates/pulse", ".1f"),
            Column("ratio_to_batched_knn", "/ batched k-NN", ".3f"),
            Column("ratio_to_single_knn", "/ single k-NN", ".3f"),
            Column("share_of_knn_ceiling", "of ceiling", ".0%"),
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Pulses/s of the propagation engine, the daemon path and the literal "
        "seed rule, as ratios to the raw k-NN rate of the same index."
    )
    parser.add_argument(
        "--sizes",
        default=DEFAULT_SIZES,
        help=f"comma-separated chunk counts (default {DEFAULT_SIZES})",
    )
    parser.add_argument(
        "--pulses",
        type=int,
        default=DEFAULT_PULSES,
        help=f"pulses per path (default {DEFAULT_PULSES})",
    )
    parser.add_argument(
        "--literal-pulses",
        type=int,
        default=DEFAULT_LITERAL_PULSES,
        help="pulses for the literal SQL reference, at most --pulses "
        f"(default {DEFAULT_LITERAL_PULSES})",
    )
    parser.add_argument(
        "--out", type=Path, default=DEFAULT_OUT, help=f"JSON results (default {DEFAULT_OUT})"
    )
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="random seed")
    args = parser.parse_args(argv)
    try:
        sizes = parse_positive_ints(args.sizes, "--sizes")
        for option, value in (("--pulses", args.pulses), ("--literal-pulses", args.literal_pulses)):
            if value < 1:
                raise BenchmarkError(f"{option} must be >= 1, got {value}")
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    machine = describe_machine(("hnswlib", "apsw"))
    print(machine_summary(machine))
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench-propagate-") as work:
        results = [
            bench_size(size, args.pulses, min(args.literal_pulses, args.pulses), rng, Path(work))
            for size in sizes
        ]
    machine["load_average_1m_at_end"] = describe_machine()["load_average_1m"]
    payload = {
        "benchmark": "propagate",
        "machine": machine,
        "parameters": {
            "dim": DIM,
            "cluster_size": CLUSTER_SIZE,
            "cluster_spread": CLUSTER_SPREAD,
            "index": {"m": DEFAULT_M, "ef_construction": DEFAULT_EF_CONSTRUCTION, "ef": DEFAULT_EF},
            "pulse": {
                "k": OUTCOME_K,
                "max_hops": OUTCOME_MAX_HOPS,
                "sigma": OUTCOME_SIGMA,
                "decay_per_hop": OUTCOME_DECAY_PER_HOP,
                "strength": PULSE_STRENGTH,
            },
            "pulses": args.pulses,
            "literal_pulses": min(args.literal_pulses, args.pulses),
            "pulses_per_transaction": PULSES_PER_TRANSACTION,
            "seed": args.seed,
        },
        "results": results,
    }
    print(f"\nresults written to {write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
