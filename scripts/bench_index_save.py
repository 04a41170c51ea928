"""How long a save of the index stops the daemon's other threads (its API requests).

hnswlib's `save_index` holds the GIL for the whole write, so while the daemon saved its
index in process every API request of the process waited. `store.index_file.write_engine`
writes the file from a forked child instead. This script builds one hnswlib index of N
vectors (default 100,000 of 384 dimensions, as the default model makes) and saves it both
ways, taking turns for `--rounds` rounds, while a reader thread wakes every READER_TICK_S
as a request would. For each way it reports how long the save took, the reader's longest
stall (the time it could not run beyond its tick) and its 99th percentile; the in-process
save is the baseline, measured in the same run, and the two files must be byte-identical.
Results go to bench-results/index_save.json; docs/benchmarks.md has figures.

    .venv/bin/python scripts/bench_index_save.py [--chunks 100000] [--rounds 3]

One file: a benchmark that runs as one standalone script.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import hnswlib
import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.store.embedder import DEFAULT_DIM
from dreamcycle.store.index import DEFAULT_EF_CONSTRUCTION, DEFAULT_M
from dreamcycle.store.index_file import write_engine
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)

DEFAULT_CHUNKS: Final = 100_000
DEFAULT_ROUNDS: Final = 3
DEFAULT_OUT: Final = Path("bench-results/index_save.json")
#: How often the reader thread wakes, as requests arriving back to back would.
READER_TICK_S: Final = 0.0005
#: Reader time before and after each save, so a stall at either edge is seen whole.
MARGIN_S: Final = 0.2
SEED: Final = 7
KIB: Final = 1024

COLUMNS: Final = (
    Column("way"),
    Column("save_s_median", "save s", ".2f"),
    Column("stall_ms_max", "longest stall ms", ".1f"),
    Column("stall_ms_p99", "stall p99 ms", ".2f"),
    Column("stall_vs_in_process", "longest stall / in process", ".3f"),
)


class Reader:
    """A thread that sleeps READER_TICK_S at a time and records how late it woke."""

    def __init__(self) -> None:
        self.lateness_s: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            time.sleep(READER_TICK_S)
            now = time.perf_counter()
            self.lateness_s.append(max(0.0, now - last - READER_TICK_S))
            last = now

    def __enter__(self) -> Reader:
        self._thread.start()
        time.sleep(MARGIN_S)
        return self

    def __exit__(self, *_: object) -> None:
        time.sleep(MARGIN_S)
        self._stop.set()
        self._thread.join()


def timed_save(save: Callable[[], None]) -> dict[str, float]:
    with Reader() as reader:
        started = time.perf_counter()
        save()
        seconds = time.perf_counter() - started
    lateness_ms = np.array(reader.lateness_s) * 1000.0
    return {
        "save_s": seconds,
        "stall_ms_max": float(lateness_ms.max()),
        "stall_ms_p99": float(np.percentile(lateness_ms, 99)),
    }


def build(chunks: int) -> hnswlib.Index:
    rng = np.random.default_rng(SEED)
    vectors = rng.standard_normal((chunks, DEFAULT_DIM)).astype(np.float32)
    engine = hnswlib.Index(space="cosine", dim=DEFAULT_DIM)
    engine.init_index(max_elements=chunks, M=DEFAULT_M, ef_construction=DEFAULT_EF_CONSTRUCTION)
    engine.add_items(vectors, np.arange(chunks, dtype=np.int64))
    return engine


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=DEFAULT_CHUNKS)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.chunks < 1000 or args.rounds < 1:
        raise BenchmarkError("--chunks must be >= 1000 and --rounds >= 1")
    machine = describe_machine(("hnswlib",))
    started = time.perf_counter()
    engine = build(args.chunks)
    print(f"index of {args.chunks} vectors built in {time.perf_counter() - started:.0f} s")
    rounds: dict[str, list[dict[str, float]]] = {"in process": [], "forked child": []}
    with tempfile.TemporaryDirectory(prefix="bench-index-save-") as scratch:
        in_process, forked = Path(scratch) / "in-process.hnsw", Path(scratch) / "forked.hnsw"
        for _ in range(args.rounds):
            rounds["in process"].append(timed_save(lambda: engine.save_index(str(in_process))))
            rounds["forked child"].append(timed_save(lambda: write_engine(engine, forked)))
            if in_process.read_bytes() != forked.read_bytes():
                raise BenchmarkError("the forked child wrote other bytes than hnswlib in process")
        size_mib = in_process.stat().st_size / KIB / KIB
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / KIB
    baseline = max(r["stall_ms_max"] for r in rounds["in process"])
    rows: list[dict[str, Any]] = []
    for way, measured in rounds.items():
        longest = max(r["stall_ms_max"] for r in measured)
        rows.append(
            {
                "way": way,
                "save_s_median": float(np.median([r["save_s"] for r in measured])),
                "stall_ms_max": longest,
                "stall_ms_p99": float(np.median([r["stall_ms_p99"] for r in measured])),
                "stall_vs_in_process": longest / baseline,
                "rounds": measured,
            }
        )
    print(machine_summary(machine))
    print(
        f"{args.chunks} vectors of {DEFAULT_DIM} dimensions, file {size_mib:.0f} MiB, "
        f"peak RSS {rss_mib:.0f} MiB, {args.rounds} rounds (longest stall over the rounds)"
    )
    print_table(rows, COLUMNS)
    payload = {"machine": machine, "chunks": args.chunks, "file_mib": size_mib, "rows": rows}
    print(f"wrote {write_json(args.out, payload)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BenchmarkError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
