"""The efficacy benchmark: does memory get better with use?

Drives the project's real code paths the way an agent would (scripts.efficacy_sim), one
data directory per configuration, on a generated corpus or real conversations, and
measures retrieval on held-out questions never trained on, training questions asked
again, and paraphrases of training questions. Every configuration runs on several
random train/test splits (`--seeds`), and the report gives each figure's mean and
spread over them, for the corpus as a whole and for each conversation group.

    python -m scripts.efficacy                           # generated corpus, small
    python -m scripts.efficacy --seeds 7,8,9 --jobs 2 --html report.html
    python -m scripts.efficacy --data locomo10.json --format locomo --configs all
    python -m scripts.efficacy --data longmemeval_s.json --format longmemeval

A default is chosen only when it wins on the mean and loses on no group by more than
the spread (`--assert-targets` checks the targets docs/efficacy.md states).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dreamcycle.store.embedder import Embedder
from scripts.efficacy_corpus import FORMATS, Corpus, load_corpus
from scripts.efficacy_embeddings import CachedEmbedder
from scripts.efficacy_report import (
    aggregate_seeds,
    print_groups,
    print_table,
    table_rows,
    write_html,
    write_json,
)
from scripts.efficacy_sim import DEFAULT_EPOCHS, Variant, config_for, simulate
from scripts.efficacy_targets import check_targets

DEFAULT_SEEDS: Final = (7,)
DEFAULT_EMBED_CACHE: Final = Path("bench-results/efficacy-embeddings.npz")

VARIANTS: Final = (
    Variant(
        "vector",
        "exact cosine over stored embeddings, no salience, no learning",
        {"recall.lexical_weight": 0.0, "recall.salience_bound": 0.0, "sweep.enabled": False},
        train=False,
    ),
    Variant(
        "bm25",
        "BM25 over recall_fts alone, no salience, no learning",
        {"recall.vector_weight": 0.0, "recall.salience_bound": 0.0, "sweep.enabled": False},
        train=False,
    ),
    Variant(
        "hybrid",
        "reciprocal-rank fusion of BM25 and cosine, no salience, no learning",
        {"recall.salience_bound": 0.0, "sweep.enabled": False},
        train=False,
    ),
    Variant(
        "hybrid-equal",
        "the hybrid with equal fusion weights (vector 1.0 instead of 0.7)",
        {"recall.vector_weight": 1.0, "sweep.enabled": False},
        train=False,
    ),
    Variant("full", "the defaults: hybrid, cited credit, learned keys, sweep to the cold tier"),
    Variant("full-nosweep", "defaults without the sweep", {"sweep.enabled": False}),
    Variant(
        "keys-fade",
        "defaults with learned keys halving every 60 days without reinforcement",
        {"learning.key_half_life_s": 60 * 86_400.0},
    ),
    Variant(
        "full-literal",
        "defaults with the literal update rule (no visited set)",
        {"pulses.update_rule": "literal"},
    ),
    Variant(
        "no-keys", "defaults without learned keys (salience pulses only)", {"learning.keys": False}
    ),
    Variant(
        "fixed-fusion",
        "defaults with the configured vector/word split, not learned from citations",
        {"learning.fusion": False},
    ),
    Variant("salience-0.1", "defaults with salience bound 0.1", {"recall.salience_bound": 0.1}),
    Variant(
        "confidence-0.1",
        "defaults with confidence bound 0.1",
        {"recall.confidence_bound": 0.1},
    ),
    Variant("cold-0.5", "defaults with cold chunks at half relevance", {"recall.cold_factor": 0.5}),
    # The protocol's sweep share runs from 20 % to 60 %: the default is chosen between them.
    Variant("sweep-20", "defaults sweeping the bottom 20 %", {"sweep.percentile": 20.0}),
    Variant("sweep-40", "defaults sweeping the bottom 40 %", {"sweep.percentile": 40.0}),
    Variant(
        "keys-0.9",
        "defaults, keys only for queries >= 0.9-similar",
        {"recall.key_min_similarity": 0.9},
    ),
    Variant("uncited-none", "outcomes without citations, credit rule none", agent="uncited"),
    Variant(
        "uncited-top",
        "outcomes without citations, credit rule top",
        {"learning.credit_rule": "top"},
        agent="uncited",
    ),
    Variant(
        "uncited-rank",
        "outcomes without citations, credit rule rank",
        {"learning.credit_rule": "rank"},
        agent="uncited",
    ),
    Variant(
        "notes",
        "defaults; the agent never reports an outcome: it asks again when it fails and saves "
        "a note built from what it used when it succeeds",
        agent="notes",
    ),
    Variant(
        "session",
        "defaults; the agent never reports an outcome per decision: it asks again when it "
        "fails, and each session's result is reported once",
        agent="session",
    ),
    Variant(
        "session-nosweep",
        "`session` without the sweep: what the sweep alone does where nothing is learned",
        {"sweep.enabled": False},
        agent="session",
    ),
    Variant(
        "no-prior",
        "defaults without the prior over candidates' sizes",
        {"learning.intrinsic_prior": False},
    ),
    Variant(
        "learned-cold",
        "defaults with the weight of the cold tier learned from cited successes",
        {"learning.cold_weight": True},
    ),
    Variant(
        "no-gate",
        "defaults with every key at least key_min_similarity-close used (no key gate)",
        {"learning.key_gate": False},
    ),
)
QUICK_VARIANTS: Final = ("vector", "bm25", "hybrid", "full", "full-nosweep", "no-keys")
VARIANTS_BY_NAME: Final = {v.name: v for v in VARIANTS}


@dataclass(frozen=True)
class CorpusSpec:
    """How to load a corpus again in a worker process (the split depends on the seed)."""

    data: Path | None
    fmt: str
    size: str | int

    def load(self, seed: int) -> Corpus:
        return load_corpus(self.data, self.fmt, seed=seed, size=self.size)


def cached_embedder(cache_file: Path | None) -> CachedEmbedder:
    probe = config_for(Path(tempfile.mkdtemp(prefix="dc-efficacy-")), VARIANTS[0])
    embedding = probe.embedding
    model = Embedder(embedding.model, batch_size=embedding.batch_size)
    return CachedEmbedder(
        lambda: model,
        model_id=model.model_id,
        dim=model.dim,
        index_version=model.index_version,
        cache_file=cache_file,
    )


def _corpus_texts(corpus: Corpus) -> list[str]:
    texts = [t.text for t in corpus.turns]
    texts += [q.text for q in corpus.questions] + [
        p for q in corpus.questions for p in q.paraphrases
    ]
    return texts


def run(
    corpus: Corpus,
    variants: Sequence[Variant],
    *,
    epochs: int = DEFAULT_EPOCHS,
    progress: Callable[[str], None] | None = None,
    cold_graph: bool = False,
    embed_cache: Path | None = None,
) -> dict[str, Any]:
    """Every configuration on one corpus (one split); the `results` of scripts.efficacy_report."""
    embedder = cached_embedder(embed_cache)
    started = time.perf_counter()
    embedder.warm(_corpus_texts(corpus))
    embed_s = time.perf_counter() - started
    embedder.save()
    root = Path(tempfile.mkdtemp(prefix="dc-efficacy-"))
    configs: list[dict[str, Any]] = []
    try:
        for variant in variants:
            started = time.perf_counter()
            configs.append(
                simulate(corpus, variant, embedder, root, epochs=epochs, cold_graph=cold_graph)
            )
            if progress:
                progress(f"{variant.name}: {time.perf_counter() - started:.1f} s")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"params": _params(corpus, epochs, embed_s), "configs": configs}


def _params(corpus: Corpus, epochs: int, embed_s: float) -> dict[str, Any]:
    return {
        "corpus": corpus.name,
        **corpus.stats(),
        "epochs": epochs,
        "embedding_seconds": round(embed_s, 1),
    }


def _one_job(
    spec: CorpusSpec, seed: int, name: str, epochs: int, cold_graph: bool, embed_cache: Path | None
) -> dict[str, Any]:
    """One configuration on one split, in a worker process of its own."""
    corpus = spec.load(seed)
    embedder = cached_embedder(embed_cache)
    root = Path(tempfile.mkdtemp(prefix="dc-efficacy-"))
    try:
        started = time.perf_counter()
        result = simulate(
            corpus, VARIANTS_BY_NAME[name], embedder, root, epochs=epochs, cold_graph=cold_graph
        )
        result["seconds"] = round(time.perf_counter() - started, 1)
        return result
    finally:
        shutil.rmtree(root, ignore_errors=True)


def run_seeds(
    spec: CorpusSpec,
    names: Sequence[str],
    seeds: Sequence[int],
    *,
    jobs: int = 1,
    epochs: int = DEFAULT_EPOCHS,
    cold_graph: bool = False,
    embed_cache: Path | None = DEFAULT_EMBED_CACHE,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Every configuration on every split; per-seed results and their aggregate."""
    embedder = cached_embedder(embed_cache)
    started = time.perf_counter()
    corpora = {seed: spec.load(seed) for seed in seeds}
    for corpus in corpora.values():
        embedder.warm(_corpus_texts(corpus))
    embedder.save()
    embed_s = time.perf_counter() - started
    by_seed: dict[int, list[dict[str, Any]]] = {seed: [] for seed in seeds}
    tasks = [(seed, name) for seed in seeds for name in names]
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
        futures = {
            pool.submit(_one_job, spec, seed, name, epochs, cold_graph, embed_cache): (seed, name)
            for seed, name in tasks
        }
        for future, (seed, name) in futures.items():
            result = future.result()
            by_seed[seed].append(result)
            if progress:
                progress(f"seed {seed} {name}: {result['seconds']:.1f} s")
    first = corpora[seeds[0]]
    params = _params(first, epochs, embed_s)
    params["seeds"] = list(seeds)
    seeds_results = [{"seed": seed, "configs": by_seed[seed]} for seed in seeds]
    return {
        "params": params,
        "seeds": seeds_results,
        "configs": aggregate_seeds(seeds_results),
    }


def parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"seeds must be integers, got {text!r}") from None
    if not seeds or len(set(seeds)) != len(seeds):
        raise argparse.ArgumentTypeError(f"seeds must be distinct integers, got {text!r}")
    return seeds


def optional_path(text: str) -> Path | None:
    """An option's path, or None for '' (Path('') would be the working directory)."""
    return Path(text) if text else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.efficacy",
        description="Measure whether outcomes make recall better (see the module docstring).",
    )
    parser.add_argument("--data", type=Path, help="corpus file (LoCoMo or LongMemEval JSON)")
    parser.add_argument("--format", choices=FORMATS, default="generated")
    parser.add_argument("--size", default="small", help="generated corpus: small, large or N")
    parser.add_argument(
        "--seeds",
        type=parse_seeds,
        default=list(DEFAULT_SEEDS),
        help="comma-separated split seeds (the generated corpus is generated from each too)",
    )
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds N)")
    parser.add_argument("--jobs", type=int, default=1, help="configurations run at once")
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument(
        "--configs",
        default=",".join(QUICK_VARIANTS),
        help=f"comma-separated, or 'all' ({', '.join(v.name for v in VARIANTS)})",
    )
    parser.add_argument(
        "--cold-graph",
        action="store_true",
        help="search the cold tier through the index's graph at every size (recall does "
        "from recall.cold_graph_from cold chunks on; otherwise exactly)",
    )
    parser.add_argument(
        "--embed-cache",
        type=optional_path,
        default=DEFAULT_EMBED_CACHE,
        help="file keeping embeddings between runs ('' for none)",
    )
    parser.add_argument("--json", type=Path, default=Path("bench-results/efficacy.json"))
    parser.add_argument("--html", type=Path, help="also write the HTML report here")
    parser.add_argument(
        "--assert-targets",
        action="store_true",
        help="exit 1 unless the targets of docs/efficacy.md hold (scripts.efficacy_targets)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    seeds = [args.seed] if args.seed is not None else args.seeds
    size: str | int = int(args.size) if args.size.isdigit() else args.size
    names = [v.name for v in VARIANTS] if args.configs == "all" else args.configs.split(",")
    unknown = sorted(set(names) - set(VARIANTS_BY_NAME))
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    spec = CorpusSpec(args.data, args.format, size)
    results = run_seeds(
        spec,
        names,
        seeds,
        jobs=args.jobs,
        epochs=args.epochs,
        cold_graph=args.cold_graph,
        embed_cache=args.embed_cache,
        progress=print,
    )
    results["params"].update(
        format=args.format,
        size=str(args.size),
        data=str(args.data or ""),
        cold_search="graph" if args.cold_graph else "exact",
    )
    print_table(table_rows(results))
    print_groups(results)
    write_json(args.json, results)
    print(f"wrote {args.json}")
    if args.html:
        write_html(args.html, results)
        print(f"wrote {args.html}")
    if args.assert_targets:
        return check_targets(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
