"""The efficacy benchmark: does memory get better with use?

Drives the project's real code paths the way an agent would: `ingest` of each
session on its simulated day, `recall` with attribution, `pulse-emit outcome`
(with the chunks the agent used cited), one dream cycle per simulated day on an
injected clock (sweeps included), then measures retrieval on three question
sets: held-out questions never trained on, training questions asked again, and
paraphrases of training questions (generated corpus). Configurations run side
by side in one process, each in its own data directory; embeddings are
computed once by the real model and shared between them.

    python -m scripts.efficacy                           # generated corpus, small
    python -m scripts.efficacy --size large --html report.html
    python -m scripts.efficacy --data locomo10.json --format locomo
    python -m scripts.efficacy --data longmemeval_s.json --format longmemeval

One cycle stands for a whole simulated day, so the configurations let a cycle account
for a day (`clock.max_step_s`): a daemon accounts for at most an hour per cycle by
default, which is a day's worth of its 30 s cycles but would hold one cycle a day back.

The simulated agent: a training question is recalled (top 10); if an evidence
chunk is among the results the outcome is +1 citing the evidence chunks found
(a success); otherwise -1 citing the top result (it relied on it and failed).
The "uncited" configurations report the same outcomes without citations.

One file: the benchmark's driver, run as one module (`python -m scripts.efficacy`), whose
simulation and measurements share one Simulation state.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cold_search import ColdSearch, GraphShape
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.emit import emit_outcome
from dreamcycle.daemon.ingest import ingest
from dreamcycle.daemon.keys import init_key
from dreamcycle.daemon.learning import fusion_weights
from dreamcycle.daemon.recall import rank_query, recall
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.store.database import NewObservation
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import SupersedeEntry, encode_entry
from scripts.efficacy_corpus import FORMATS, Corpus, Question, load_corpus
from scripts.efficacy_report import (
    Ranking,
    distinct_in_top,
    latency_summary,
    print_table,
    retrieval_metrics,
    table_rows,
    write_html,
    write_json,
)

DAY_MS: Final = 86_400_000
#: The simulation starts here (2026-01-01), so dates and ISO times stay readable.
START_MS: Final = 1_767_225_600_000
#: Results recalled per training question: the agent cites what it used from these.
TRAIN_TOP_K: Final = 10
EVAL_TOP_K: Final = 10
#: Days between learning-curve points, and questions per set sampled at each point.
CURVE_EVERY_DAYS: Final = 10
CURVE_SAMPLE: Final = 60
#: Training passes over the training questions (agents repeat their tasks).
DEFAULT_EPOCHS: Final = 1


@dataclass(frozen=True)
class Variant:
    """One configuration: config overrides and how the simulated agent reports outcomes."""

    name: str
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    train: bool = True
    cite: bool = True


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
    Variant(
        "keys-0.9",
        "defaults, keys only for queries >= 0.9-similar",
        {"recall.key_min_similarity": 0.9},
    ),
    Variant("uncited-none", "outcomes without citations, credit rule none", cite=False),
    Variant(
        "uncited-top",
        "outcomes without citations, credit rule top",
        {"learning.credit_rule": "top"},
        cite=False,
    ),
    Variant(
        "uncited-rank",
        "outcomes without citations, credit rule rank",
        {"learning.credit_rule": "rank"},
        cite=False,
    ),
)
QUICK_VARIANTS: Final = ("vector", "bm25", "hybrid", "full", "full-nosweep", "uncited-none")


class CachedEmbedder:
    """The real embedder, asked once per distinct text across every configuration."""

    def __init__(self, inner: Embedder) -> None:
        self._inner = inner
        self._cache: dict[str, npt.NDArray[np.float32]] = {}
        self.model_id = inner.model_id
        self.dim = inner.dim
        self.index_version = inner.index_version

    def warm(self, texts: Sequence[str]) -> None:
        missing = sorted({t for t in texts if t not in self._cache})
        for start in range(0, len(missing), 256):
            batch = missing[start : start + 256]
            self._cache.update(zip(batch, self._inner.embed(batch), strict=True))

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        self.warm(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        stacked: npt.NDArray[np.float32] = np.stack([self._cache[t] for t in texts])
        return stacked

    def embed_one(self, text: str) -> npt.NDArray[np.float32]:
        one: npt.NDArray[np.float32] = self.embed([text])[0]
        return one


@dataclass
class Simulation:
    corpus: Corpus
    variant: Variant
    rt: Runtime
    peer: Peer
    clock: ManualClock
    chunk_of_hash: dict[str, str]
    hash_of_chunk: dict[str, str]
    latencies_ms: list[float] = field(default_factory=list)
    salience_before: list[float] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)


def _config(data_dir: Path, variant: Variant) -> Config:
    overrides = {
        "peer.data_dir": str(data_dir),
        "peer.id": "bench",
        "metrics.listen": "",
        "log.level": "warning",
        "sweep.interval_s": 86_400.0,
        # One cycle per simulated day (module docstring).
        "clock.max_step_s": DAY_MS / 1000,
        **variant.overrides,
    }
    return load_config(None, environ={}, overrides=overrides)


def _observation(turn: Any) -> NewObservation:
    return NewObservation(
        content=turn.text,
        title=turn.title,
        kind=turn.kind,
        importance=turn.importance,
        session_id=turn.session,
    )


def _ranking(sim: Simulation, question: Question, text: str) -> Ranking:
    started = time.perf_counter()
    vector = sim.rt.embedder.embed_one(text)
    hits = rank_query(sim.rt, text, vector, EVAL_TOP_K, index=sim.peer.index)
    sim.latencies_ms.append((time.perf_counter() - started) * 1000)
    return Ranking(
        question.qid,
        question.evidence,
        [sim.chunk_of_hash.get(h.content_hash, "?") for h in hits],
    )


def _train_one(sim: Simulation, question: Question) -> None:
    result = recall(sim.rt, question.text, top_k=TRAIN_TOP_K, index=sim.peer.index)
    if result.decision_hash is None:
        return
    wanted = {sim.hash_of_chunk[c] for c in question.evidence if c in sim.hash_of_chunk}
    found = [h.content_hash for h in result.hits if h.content_hash in wanted]
    success = bool(found)
    cited = (found if success else [result.hits[0].content_hash]) if sim.variant.cite else []
    emit_outcome(
        sim.rt,
        decision=result.decision_hash,
        reward=1.0 if success else -1.0,
        reason="efficacy/train",
        cited=cited,
    )


def _supersede(sim: Simulation, old: str, new: str) -> None:
    db = sim.rt.db
    entry = SupersedeEntry(
        hlc=sim.peer.clock.now(),
        origin=sim.rt.peer_id,
        old_hash=sim.hash_of_chunk[old],
        new_hash=sim.hash_of_chunk[new],
        reason="efficacy: fact changed",
    )
    with db.transaction():
        db.outbox_add(
            entry.id, entry.KIND, entry.hlc, encode_entry(entry), now_ms=sim.clock.now_ms()
        )


def _saliences(sim: Simulation) -> list[float]:
    return [float(v) for v in sim.rt.db.live_saliences()]


def _curve_point(sim: Simulation, day: int, asked: Sequence[Question]) -> None:
    test = sim.corpus.test()[:CURVE_SAMPLE]
    again = list(asked)[:CURVE_SAMPLE]
    point: dict[str, Any] = {"day": day, "swept_fraction": _swept_fraction(sim)}
    if test:
        point["heldout_recall@5"] = retrieval_metrics([_ranking(sim, q, q.text) for q in test])[
            "recall@5"
        ]  # type: ignore[index]
    if again:
        point["repeated_recall@5"] = retrieval_metrics([_ranking(sim, q, q.text) for q in again])[
            "recall@5"
        ]  # type: ignore[index]
    sim.curve.append(point)


def _swept_fraction(sim: Simulation) -> float:
    counts = sim.rt.db.counts()
    return counts["cold"] / max(1, counts["observations"])


def simulate(
    corpus: Corpus,
    variant: Variant,
    embedder: CachedEmbedder,
    root: Path,
    *,
    epochs: int,
    cold_graph: bool = False,
) -> dict[str, Any]:
    clock = ManualClock(START_MS)
    data_dir = root / variant.name
    config = _config(data_dir, variant)
    data_dir.mkdir(parents=True, exist_ok=True)
    init_key(config)  # a peer signs what it publishes, snapshots included
    rt = Runtime.open(config, clock=clock)
    rt.embedder = embedder  # type: ignore[assignment]
    if cold_graph:
        index = config.index
        rt.cold_search = ColdSearch(
            graph_from=1,
            pending_max=0,
            skip_max=0,
            shape=GraphShape(index.m, index.ef_construction, index.ef),
        )
    peer = rt.open_peer()
    hashes = {t.chunk_id: content_hash(t.text) for t in corpus.turns}
    sim = Simulation(corpus, variant, rt, peer, clock, {h: c for c, h in hashes.items()}, hashes)
    try:
        _run_days(sim, epochs)
        return _measure(sim)
    finally:
        peer.close()
        rt.close()


def _run_days(sim: Simulation, epochs: int) -> None:
    corpus = sim.corpus
    last_day = max([t.day for t in corpus.turns] + [q.day for q in corpus.questions])
    turns_by_day: dict[int, list[Any]] = {}
    for turn in corpus.turns:
        turns_by_day.setdefault(turn.day, []).append(turn)
    supersede_on: dict[int, list[tuple[str, str]]] = {}
    day_of = {t.chunk_id: t.day for t in corpus.turns}
    for old, new in corpus.supersedes:
        supersede_on.setdefault(day_of[new], []).append((old, new))
    training = corpus.train() if sim.variant.train else []
    asked: list[Question] = []
    schedule: dict[int, list[Question]] = {}
    for epoch in range(epochs):
        for question in training:
            schedule.setdefault(question.day + epoch * (last_day + 1), []).append(question)
    total_days = (last_day + 1) * epochs
    for day in range(total_days + 1):
        if day in turns_by_day:
            ingest(sim.rt, [[_observation(t) for t in turns_by_day[day]]])
            run_cycle_blocking(sim.peer)  # admit before anything is asked
        for old, new in supersede_on.get(day, []):
            _supersede(sim, old, new)
        for question in schedule.get(day, []):
            _train_one(sim, question)
            asked.append(question)
        if day == 0:
            sim.salience_before = _saliences(sim)
        run_cycle_blocking(sim.peer)
        if day % CURVE_EVERY_DAYS == 0 or day == total_days:
            _curve_point(sim, day, asked)
        sim.clock.advance(DAY_MS)


def _measure(sim: Simulation) -> dict[str, Any]:
    corpus = sim.corpus
    sim.latencies_ms.clear()
    test = corpus.test()
    train = corpus.train()
    heldout = [_ranking(sim, q, q.text) for q in test]
    repeated = [_ranking(sim, q, q.text) for q in train]
    paraphrased = [_ranking(sim, q, p) for q in train for p in q.paraphrases]
    metrics: dict[str, Any] = {
        "heldout": retrieval_metrics(heldout),
        "repeated": retrieval_metrics(repeated),
        "paraphrased": retrieval_metrics(paraphrased),
        "distinct_top5": distinct_in_top(heldout, 5),
        "latency_ms": latency_summary(sim.latencies_ms),
        "swept_fraction": _swept_fraction(sim),
    }
    metrics.update(_evidence_lost(sim, test, heldout))
    counts = sim.rt.db.counts()
    metrics["learned_keys"] = counts["learned_keys"]
    vector_weight, lexical_weight = fusion_weights(sim.rt.db, sim.rt.config)
    metrics["vector_share"] = round(vector_weight / (vector_weight + lexical_weight), 3)
    return {
        "name": sim.variant.name,
        "description": sim.variant.description,
        "metrics": metrics,
        "curve": sim.curve,
        "salience": {"before": sim.salience_before, "after": _saliences(sim)},
    }


def _evidence_lost(
    sim: Simulation, test: Sequence[Question], heldout: Sequence[Ranking]
) -> dict[str, float]:
    """Held-out evidence in the cold tier, and the part of it the sweep cost.

    Lost = cold evidence that recall finds in the top 10 when cold chunks count
    fully (as if nothing had been swept) but not with the configured cold factor:
    evidence that nobody would have found anyway is not lost to the sweep.
    """
    db = sim.rt.db
    recall_config = sim.rt.config.recall
    configured = recall_config.cold_factor
    recall_config.cold_factor = 1.0
    try:
        unswept = [_ranking(sim, q, q.text) for q in test]
    finally:
        recall_config.cold_factor = configured
    swept = lost = total = 0
    for question, ranking, baseline in zip(test, heldout, unswept, strict=True):
        for chunk in question.evidence:
            obs = db.observation_by_hash(sim.hash_of_chunk[chunk])
            total += 1
            if obs is None or obs.cold_at is None:
                continue
            swept += 1
            found = chunk in ranking.returned[:EVAL_TOP_K]
            lost += chunk in baseline.returned[:EVAL_TOP_K] and not found
    return {
        "heldout_evidence_swept": swept / max(1, total),
        "heldout_evidence_lost": lost / max(1, total),
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scripts.efficacy",
        description="Measure whether outcomes make recall better (see the module docstring).",
    )
    parser.add_argument("--data", type=Path, help="corpus file (LoCoMo or LongMemEval JSON)")
    parser.add_argument("--format", choices=FORMATS, default="generated")
    parser.add_argument("--size", default="small", help="generated corpus: small, large or N")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--epochs", type=int, default=DEFAULT_EPOCHS)
    parser.add_argument(
        "--configs",
        default=",".join(QUICK_VARIANTS),
        help=f"comma-separated, or 'all' ({', '.join(v.name for v in VARIANTS)})",
    )
    parser.add_argument(
        "--cold-graph",
        action="store_true",
        help="search the cold tier through a graph of it at every size, built again at "
        "every change of the tier (the daemon's API does from recall.cold_graph_from cold "
        "chunks on; otherwise exactly)",
    )
    parser.add_argument("--json", type=Path, default=Path("bench-results/efficacy.json"))
    parser.add_argument("--html", type=Path, help="also write the HTML report here")
    parser.add_argument(
        "--assert-targets",
        action="store_true",
        help="exit 1 unless full >= hybrid on held-out recall@5 and no held-out evidence is lost",
    )
    args = parser.parse_args(argv)
    size: str | int = int(args.size) if args.size.isdigit() else args.size
    corpus = load_corpus(args.data, args.format, seed=args.seed, size=size)
    names = [v.name for v in VARIANTS] if args.configs == "all" else args.configs.split(",")
    unknown = sorted(set(names) - {v.name for v in VARIANTS})
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}")
    variants = [v for v in VARIANTS if v.name in names]
    results = run(corpus, variants, epochs=args.epochs, progress=print, cold_graph=args.cold_graph)
    results["params"].update(
        format=args.format,
        size=str(args.size),
        seed=args.seed,
        data=str(args.data or ""),
        cold_search="graph" if args.cold_graph else "exact",
    )
    print_table(table_rows(results))
    write_json(args.json, results)
    print(f"wrote {args.json}")
    if args.html:
        write_html(args.html, results)
        print(f"wrote {args.html}")
    if args.assert_targets:
        return check_targets(results)
    return 0


def run(
    corpus: Corpus,
    variants: Sequence[Variant],
    *,
    epochs: int = DEFAULT_EPOCHS,
    progress: Callable[[str], None] | None = None,
    cold_graph: bool = False,
) -> dict[str, Any]:
    """Every configuration on `corpus`; the `results` dict of scripts.efficacy_report."""
    probe = Runtime.open(_config(Path(tempfile.mkdtemp(prefix="dc-efficacy-")), VARIANTS[0]))
    embedder = CachedEmbedder(probe.embedder)
    probe.close()
    texts = [t.text for t in corpus.turns]
    texts += [q.text for q in corpus.questions] + [
        p for q in corpus.questions for p in q.paraphrases
    ]
    started = time.perf_counter()
    embedder.warm(texts)
    embed_s = time.perf_counter() - started
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
    return {
        "params": {
            "corpus": corpus.name,
            **corpus.stats(),
            "epochs": epochs,
            "train_top_k": TRAIN_TOP_K,
            "embedding_seconds": round(embed_s, 1),
        },
        "configs": configs,
    }


def check_targets(results: dict[str, Any]) -> int:
    by_name = {c["name"]: c["metrics"] for c in results["configs"]}
    failures: list[str] = []
    if "full" in by_name and "hybrid" in by_name:
        full = by_name["full"]["heldout"]["recall@5"]
        hybrid = by_name["hybrid"]["heldout"]["recall@5"]
        if full < hybrid:
            failures.append(f"full held-out recall@5 {full:.1f} < hybrid {hybrid:.1f}")
        lost = by_name["full"]["heldout_evidence_lost"]
        if lost > 0:
            failures.append(f"the default sweep lost {lost:.1%} of held-out evidence")
    for failure in failures:
        print(f"target missed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
