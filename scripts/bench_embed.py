"""The embedder on real paragraphs: its rate and peak memory against the model called plainly.

The reference is the model called the plain way, every text in the order given, in batches
of REFERENCE_BATCH: each batch is padded to its longest text, and attention's cost grows
with the square of that length. The embedder (`store.embedder.Embedder`) sorts a call's
texts by length and embeds them in batches of `embedding.batch_size`. Both embed the same
paragraphs of the standard library's documentation, in calls of `--per-call` texts, each
in a process of its own (peak memory is a process's), taking turns over `--rounds`.

    .venv/bin/python scripts/bench_embed.py [--texts 600] [--rounds 2]

One file: a benchmark that runs as one standalone script.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from statistics import median
from typing import Any, Final

from dreamcycle.store.embedder import Embedder
from scripts.bench_common import (
    BenchmarkError,
    Column,
    describe_machine,
    machine_summary,
    print_table,
    write_json,
)
from scripts.bench_scale import real_texts

#: Batches as the embedder made them before it sorted a call's texts by length.
REFERENCE_BATCH: Final = 32
DEFAULT_TEXTS: Final = 600
DEFAULT_PER_CALL: Final = 100
DEFAULT_ROUNDS: Final = 2
DEFAULT_OUT: Final = Path("bench-results/embed.json")
WAYS: Final = ("reference", "embedder")


def _one(way: str, count: int, per_call: int) -> dict[str, float]:
    """Embed `count` paragraphs one way in this process: its rate and peak memory."""
    texts = real_texts(count)
    embedder = Embedder()
    # The reference calls the model the embedder loaded, texts in the order given.
    model = embedder._loaded_model()
    started = time.perf_counter()
    for start in range(0, len(texts), per_call):
        part = texts[start : start + per_call]
        if way == "reference":
            list(model.embed(part, batch_size=REFERENCE_BATCH))
        else:
            embedder.embed(part)
    seconds = time.perf_counter() - started
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"texts": len(texts), "texts_per_s": len(texts) / seconds, "peak_mib": peak_kib / 1024}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--texts", type=int, default=DEFAULT_TEXTS)
    parser.add_argument("--per-call", type=int, default=DEFAULT_PER_CALL)
    parser.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--one", choices=WAYS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.texts < 1 or args.per_call < 1 or args.rounds < 1:
        raise BenchmarkError("--texts, --per-call and --rounds must be at least 1")
    if args.one:
        print(json.dumps(_one(args.one, args.texts, args.per_call)))
        return 0
    machine = describe_machine(("onnxruntime", "tokenizers"))
    runs: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    for _ in range(args.rounds):
        for way in WAYS:
            command = [sys.executable, "-m", "scripts.bench_embed", "--one", way,
                       "--texts", str(args.texts), "--per-call", str(args.per_call)]  # fmt: skip
            done = subprocess.run(command, check=True, capture_output=True, text=True)
            runs[way].append(json.loads(done.stdout.splitlines()[-1]))
    reference_rate = median(r["texts_per_s"] for r in runs["reference"])
    reference_peak = median(r["peak_mib"] for r in runs["reference"])
    rows: list[dict[str, Any]] = []
    for way in WAYS:
        rate = median(r["texts_per_s"] for r in runs[way])
        peak = median(r["peak_mib"] for r in runs[way])
        rows.append({"way": way, "texts_per_s": rate, "x_reference": rate / reference_rate,
                     "peak_mib": peak, "peak_x_reference": peak / reference_peak})  # fmt: skip
    print(machine_summary(machine))
    print(f"{runs['embedder'][0]['texts']:.0f} paragraphs, calls of {args.per_call}, "
          f"medians of {args.rounds} rounds")  # fmt: skip
    print_table(
        rows,
        [
            Column("way", "way"),
            Column("texts_per_s", "texts/s", ".1f"),
            Column("x_reference", "rate / reference", ".2f"),
            Column("peak_mib", "peak MiB", ".0f"),
            Column("peak_x_reference", "peak / reference", ".2f"),
        ],
    )
    write_json(args.out, {"machine": machine, "runs": runs, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
