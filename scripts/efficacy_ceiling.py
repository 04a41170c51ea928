"""Two ceilings of the efficacy benchmark's targets, measured on the store itself.

`--bound session` (the default): how much can a session-level result teach a question
asked again, at the most? In `session` mode the simulated agent reports no outcome per
recall: it asks, asks again in other words when nothing it got answers, and an
orchestrator reports once whether the session succeeded. Such a result can only tell the daemon which of the chunks shown were
useful or not; it names no chunk that was never shown. This script measures, on the
unlearned `hybrid` store, the best that any learning from those signals could do for a
training question when it comes back:

- a question answered at the first ask keeps its first answer (its recall@5 then);
- a question answered by the rephrasing counts as fully found (the best case);
- a question neither ask answered is ranked again with every chunk either ask showed
  removed, since all of those are known not to help; what that ranking finds is the
  most demoting them can give.

The `ceiling` column is that bound on recall@5 of repeated questions, beside the
`hybrid` figure it starts from.

`--bound sweep`: how much can forgetting sharpen new questions, at the most? The sweep
decides what goes to the cold tier without knowing the questions to come. Once `full`
has run every day, its held-out questions are ranked again with every cold chunk that
answers none of them left out (an oracle: a sweep that buried only what no new question
needs, and entirely), beside `full` as it ranks and `full-nosweep`. It also counts the
chunks that crowd new questions' answers out (ranked above the first answer in the top
5), how many of them are cold, and how often they and the answers had been among earlier
recalls' top results without answering (what the daemon could tell them apart by).

docs/efficacy.md compares both with the targets they bound.

    python -m scripts.efficacy_ceiling
    python -m scripts.efficacy_ceiling --data locomo10.json --format locomo --seeds 7,8,9
    python -m scripts.efficacy_ceiling --bound sweep --seeds 7,8,9
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.store.observations import COLD_ROWS
from scripts.bench_common import BenchmarkError, Column, describe_machine, format_table, write_json
from scripts.efficacy import (
    DEFAULT_EMBED_CACHE,
    DEFAULT_SEEDS,
    VARIANTS_BY_NAME,
    CorpusSpec,
    cached_embedder,
    optional_path,
    parse_seeds,
)
from scripts.efficacy_agent import Simulation, ask, found_evidence, rephrased
from scripts.efficacy_corpus import FORMATS, Question
from scripts.efficacy_embeddings import CachedEmbedder
from scripts.efficacy_report import retrieval_metrics
from scripts.efficacy_sim import ranking, simulate

RECALL_AT: Final = 5
BASE_CONFIG: Final = "hybrid"
SWEPT_CONFIG: Final = "full"
UNSWEPT_CONFIG: Final = "full-nosweep"
SHARPNESS: Final = ("precision@5", "mrr@10")


@dataclass(frozen=True)
class Asked:
    """What one training question met when it was asked."""

    first_found: bool
    again_found: bool
    base_recall: float
    ceiling_recall: float


def _recall(hashes: Sequence[str], wanted: set[str]) -> float:
    return len(set(hashes[:RECALL_AT]) & wanted) / len(wanted)


def _watch(sim: Simulation, question: Question) -> Asked | None:
    wanted = {sim.hash_of_chunk[c] for c in question.evidence if c in sim.hash_of_chunk}
    if not wanted:
        return None
    first = ask(sim, question.text)
    base = _recall([h.content_hash for h in first.hits], wanted)
    if found_evidence(sim, question, first):
        return Asked(True, False, base, base)
    again = ask(sim, rephrased(question))
    if found_evidence(sim, question, again):
        return Asked(False, True, base, 1.0)
    shown = frozenset(h.rowid for h in [*first.hits, *again.hits])
    vector = sim.rt.embedder.embed_one(question.text)
    rest = rank_query(sim.rt, question.text, vector, RECALL_AT, index=sim.peer.index, exclude=shown)
    return Asked(False, False, base, _recall([h.content_hash for h in rest], wanted))


def measure_session(spec: CorpusSpec, seed: int, embedder: CachedEmbedder) -> list[Asked]:
    """Every training question of one split, as the unlearned store answers it."""
    corpus = spec.load(seed)
    watched: list[Asked] = []

    def agent(sim: Simulation, day: int, questions: Sequence[Question]) -> None:
        for question in questions:
            asked = _watch(sim, question)
            if asked is not None:
                watched.append(asked)

    variant = replace(VARIANTS_BY_NAME[BASE_CONFIG], train=True)
    with tempfile.TemporaryDirectory(prefix="dc-ceiling-") as root:
        simulate(corpus, variant, embedder, Path(root), agent=agent)
    return watched


def summarize(seed: int, watched: Sequence[Asked]) -> dict[str, Any]:
    count = len(watched)
    row = {
        "seed": seed,
        "questions": count,
        "first_found": 100 * sum(a.first_found for a in watched) / count,
        "again_found": 100 * sum(a.again_found for a in watched) / count,
        "hybrid": 100 * statistics.fmean(a.base_recall for a in watched),
        "ceiling": 100 * statistics.fmean(a.ceiling_recall for a in watched),
    }
    row["gain"] = row["ceiling"] - row["hybrid"]
    return row


def _sharpness(metrics: dict[str, float] | None) -> dict[str, float]:
    if metrics is None:
        raise BenchmarkError("the split has no held-out question")
    return {name: metrics[name] for name in SHARPNESS}


def _rowids(sim: Simulation) -> dict[str, int]:
    """The store's rowid of each corpus chunk present, in one read."""
    rowid_of_hash = dict(sim.rt.db.fetch_all("SELECT content_hash, id FROM observations"))
    return {
        chunk: int(rowid_of_hash[digest])
        for chunk, digest in sim.hash_of_chunk.items()
        if digest in rowid_of_hash
    }


def _shown_unanswering(sim: Simulation) -> Counter[str]:
    """How often each chunk was among a recall's top results, less the training questions it
    answers: what the daemon could know of a chunk that crowds answers out."""
    shown: Counter[str] = Counter()
    for (hashes,) in sim.rt.db.fetch_all("SELECT chunk_hashes_json FROM attributions"):
        shown.update(json.loads(hashes)[:RECALL_AT])
    for question in sim.corpus.train():
        for chunk in question.evidence:
            if chunk in sim.hash_of_chunk and shown[sim.hash_of_chunk[chunk]] > 0:
                shown[sim.hash_of_chunk[chunk]] -= 1
    return shown


def _oracle(sim: Simulation) -> dict[str, Any]:
    """Held-out questions ranked with every cold chunk but their evidence left out, and the
    chunks that crowd their answers out (ranked above the first answer, in the top 5)."""
    db = sim.rt.db
    cold = {int(row[0]) for row in db.fetch_all(f"SELECT id {COLD_ROWS}")}
    test = sim.corpus.test()
    answers = {c for q in test for c in q.evidence if c in sim.hash_of_chunk}
    rowid_of = _rowids(sim)
    buried = frozenset(cold - {rowid_of[c] for c in answers if c in rowid_of})
    rankings = [ranking(sim, q, q.text, exclude=buried) for q in test]
    crowding: set[str] = set()
    for question in test:
        for chunk in ranking(sim, question, question.text).returned[:RECALL_AT]:
            if chunk in question.evidence:
                break
            crowding.add(chunk)
    crowding -= answers
    shown = _shown_unanswering(sim)

    def shown_mean(chunks: set[str]) -> float:
        hashes = [sim.hash_of_chunk[c] for c in chunks if c in sim.hash_of_chunk]
        return statistics.fmean(shown[h] for h in hashes) if hashes else 0.0

    return {
        "cold": len(cold),
        "oracle": _sharpness(retrieval_metrics(rankings)),
        "crowding": len(crowding),
        "crowding_cold": 100
        * sum(rowid_of.get(c) in cold for c in crowding)
        / max(1, len(crowding)),
        "crowding_shown": shown_mean(crowding),
        "answers_shown": shown_mean(answers),
    }


def measure_sweep(spec: CorpusSpec, seed: int, embedder: CachedEmbedder) -> dict[str, Any]:
    """`full` as it ranks new questions, the oracle over its cold tier, and `full-nosweep`."""
    corpus = spec.load(seed)
    with tempfile.TemporaryDirectory(prefix="dc-ceiling-") as root:
        swept = simulate(
            corpus, VARIANTS_BY_NAME[SWEPT_CONFIG], embedder, Path(root), after=_oracle
        )
        unswept = simulate(corpus, VARIANTS_BY_NAME[UNSWEPT_CONFIG], embedder, Path(root))
    after = swept["after"]
    row: dict[str, Any] = {"seed": seed, "swept": after["cold"]}
    row.update({key: after[key] for key in CROWDING})
    for label, metrics in (
        ("full", _sharpness(swept["metrics"]["heldout"])),
        ("nosweep", _sharpness(unswept["metrics"]["heldout"])),
        ("oracle", after["oracle"]),
    ):
        row.update({f"{label} {name}": value for name, value in metrics.items()})
    for name in SHARPNESS:
        row[f"gain {name}"] = row[f"oracle {name}"] - row[f"nosweep {name}"]
    return row


#: What `_oracle` says of the chunks that crowd new questions' answers out.
CROWDING: Final = ("crowding", "crowding_cold", "crowding_shown", "answers_shown")

SWEEP_COLUMNS: Final = (
    Column("seed"),
    Column("swept", "cold chunks"),
    *(
        Column(f"{label} {name}", number_format=".2f")
        for label in ("full", "nosweep", "oracle", "gain")
        for name in SHARPNESS
    ),
    Column("crowding", "crowding chunks"),
    Column("crowding_cold", "of them cold %", ".1f"),
    Column("crowding_shown", "shown unanswering: crowding", ".2f"),
    Column("answers_shown", "new answers", ".2f"),
)

SESSION_COLUMNS: Final = (
    Column("seed"),
    Column("questions"),
    Column("first_found", "found at first ask %", ".1f"),
    Column("again_found", "found asking again %", ".1f"),
    Column("hybrid", f"hybrid R@{RECALL_AT}", ".2f"),
    Column("ceiling", f"ceiling R@{RECALL_AT}", ".2f"),
    Column("gain", "ceiling - hybrid", ".2f"),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.efficacy_ceiling",
        description="Bound what session-level results can teach repeated questions, or "
        "what a sweep can sharpen (see the module docstring).",
    )
    parser.add_argument("--bound", choices=("session", "sweep"), default="session")
    parser.add_argument("--data", type=Path, help="corpus file (LoCoMo or LongMemEval JSON)")
    parser.add_argument("--format", choices=FORMATS, default="generated")
    parser.add_argument("--size", default="small", help="generated corpus: small, large or N")
    parser.add_argument("--seeds", type=parse_seeds, default=list(DEFAULT_SEEDS))
    parser.add_argument(
        "--embed-cache",
        type=optional_path,
        default=DEFAULT_EMBED_CACHE,
        help="file keeping embeddings between runs ('' for none)",
    )
    parser.add_argument(
        "--json", type=Path, help="default: bench-results/efficacy-ceiling-BOUND.json"
    )
    args = parser.parse_args(argv)
    size: str | int = int(args.size) if args.size.isdigit() else args.size
    spec = CorpusSpec(args.data, args.format, size)
    embedder = cached_embedder(args.embed_cache)
    rows = []
    for seed in args.seeds:
        if args.bound == "sweep":
            rows.append(measure_sweep(spec, seed, embedder))
            continue
        watched = measure_session(spec, seed, embedder)
        if not watched:
            parser.error(f"seed {seed}: the split has no training question with evidence")
        rows.append(summarize(seed, watched))
    embedder.save()
    print(format_table(rows, SWEEP_COLUMNS if args.bound == "sweep" else SESSION_COLUMNS))
    out = args.json or Path(f"bench-results/efficacy-ceiling-{args.bound}.json")
    write_json(
        out,
        {
            "machine": describe_machine(["hnswlib", "onnxruntime"]),
            "params": {
                "bound": args.bound,
                "format": args.format,
                "size": str(args.size),
                "data": str(args.data or ""),
                "recall_at": RECALL_AT,
            },
            "seeds": rows,
        },
    )
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
