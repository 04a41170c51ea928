"""One configuration of the efficacy benchmark, simulated day by day on a corpus.

Drives the project's real code paths the way an agent would: `ingest` of each session on
its simulated day, recall with attribution, what the simulated agent does with the answer
(scripts.efficacy_agent), one dream cycle per simulated day on an injected clock (sweeps
included), then retrieval measured on three question sets: held-out questions never
trained on, training questions asked again, and paraphrases of training questions.

One cycle stands for a whole simulated day, so the configurations let a cycle account
for a day (`clock.max_step_s`): a daemon accounts for at most an hour per cycle by
default, which is a day's worth of its 30 s cycles but would hold one cycle a day back.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.recall.learned_ranking import (
    cold_factor,
    fusion_weights,
    intrinsic_strength,
    key_gate,
    split_evidence,
)
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.recall.state import RecallState, share
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.daemon.signing_keys import init_key
from dreamcycle.pulses.key_gate import BAND_EDGES
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import SupersedeEntry, encode_entry
from scripts.efficacy_agent import AGENTS, Agent, Simulation, observation
from scripts.efficacy_corpus import Corpus, Question
from scripts.efficacy_embeddings import CachedEmbedder
from scripts.efficacy_report import Ranking, distinct_in_top, latency_summary, retrieval_metrics

DAY_MS: Final = 86_400_000
#: The simulation starts here (2026-01-01), so dates and ISO times stay readable.
START_MS: Final = 1_767_225_600_000
EVAL_TOP_K: Final = 10
#: Days between learning-curve points, and questions per set sampled at each point.
CURVE_EVERY_DAYS: Final = 10
CURVE_SAMPLE: Final = 60
#: Training passes over the training questions (agents repeat their tasks).
DEFAULT_EPOCHS: Final = 1
#: The log is never compacted in a simulation: compaction reads and rewrites the whole
#: history it folds, teaches recall nothing, and took most of a long run's time.
NO_COMPACTION_S: Final = 10 * 365 * 86_400.0


@dataclass(frozen=True)
class Variant:
    """One configuration: config overrides and the simulated agent's behaviour."""

    name: str
    description: str
    overrides: dict[str, Any] = field(default_factory=dict)
    train: bool = True
    agent: str = "cited"


def config_for(data_dir: Path, variant: Variant) -> Config:
    overrides = {
        "peer.data_dir": str(data_dir),
        "peer.id": "bench",
        "metrics.listen": "",
        "log.level": "warning",
        "sweep.interval_s": 86_400.0,
        # One cycle per simulated day (module docstring).
        "clock.max_step_s": DAY_MS / 1000,
        "zeitgeist.compaction_interval_s": NO_COMPACTION_S,
        # The store's own efficacy gauges replay decisions every simulated day; they
        # measure the store for its operator and change no ranking.
        "efficacy.enabled": False,
        **variant.overrides,
    }
    return load_config(None, environ={}, overrides=overrides)


def ranking(
    sim: Simulation, question: Question, text: str, exclude: frozenset[int] = frozenset()
) -> Ranking:
    """What recall answers `text` with, as the measurements count it (`exclude`: rowids
    left out)."""
    started = time.perf_counter()
    vector = sim.rt.embedder.embed_one(text)
    hits = rank_query(
        sim.rt,
        text,
        vector,
        EVAL_TOP_K + len(sim.agent_notes),
        index=sim.peer.index,
        exclude=exclude,
    )
    sim.latencies_ms.append((time.perf_counter() - started) * 1000)
    # The agent's own notes are not the corpus's chunks: measured without them, so a
    # configuration is judged by how it ranks the memory it was given.
    returned = [
        sim.chunk_of_hash.get(h.content_hash, "?")
        for h in hits
        if h.content_hash not in sim.agent_notes
    ]
    return Ranking(question.qid, question.evidence, returned[:EVAL_TOP_K])


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
    for key, questions in (("heldout_recall@5", test), ("repeated_recall@5", again)):
        measured = retrieval_metrics([ranking(sim, q, q.text) for q in questions])
        if measured is not None:
            point[key] = measured["recall@5"]
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
    epochs: int = DEFAULT_EPOCHS,
    cold_graph: bool = False,
    agent: Agent | None = None,
    after: Callable[[Simulation], Any] | None = None,
) -> dict[str, Any]:
    """Run one configuration on `corpus` in a data directory under `root`; its results.

    `agent` replaces the variant's simulated agent (a measurement that watches each
    question as it is asked); `after` measures the store once every day has run (its
    answer is the results' "after").
    """
    clock = ManualClock(START_MS)
    data_dir = root / variant.name
    config = config_for(data_dir, variant)
    data_dir.mkdir(parents=True, exist_ok=True)
    init_key(config)  # a peer signs what it publishes, snapshots included
    rt = Runtime.open(config, clock=clock)
    rt.embedder = embedder  # type: ignore[assignment]
    if cold_graph:
        share(rt, RecallState(ColdSearch(graph_from=1)))
    peer = rt.open_peer()
    hashes = {t.chunk_id: content_hash(t.text) for t in corpus.turns}
    sim = Simulation(
        corpus, variant.name, rt, peer, clock, {h: c for c, h in hashes.items()}, hashes
    )
    try:
        _run_days(sim, agent or AGENTS[variant.agent], epochs, train=variant.train)
        results = _measure(sim, variant)
        if after is not None:
            results["after"] = after(sim)
        return results
    finally:
        peer.close()
        rt.close()


def _run_days(sim: Simulation, agent: Agent, epochs: int, *, train: bool) -> None:
    corpus = sim.corpus
    last_day = max([t.day for t in corpus.turns] + [q.day for q in corpus.questions])
    turns_by_day: dict[int, list[Any]] = {}
    for turn in corpus.turns:
        turns_by_day.setdefault(turn.day, []).append(turn)
    supersede_on: dict[int, list[tuple[str, str]]] = {}
    day_of = {t.chunk_id: t.day for t in corpus.turns}
    for old, new in corpus.supersedes:
        supersede_on.setdefault(day_of[new], []).append((old, new))
    training = corpus.train() if train else []
    asked: list[Question] = []
    schedule: dict[int, list[Question]] = {}
    for epoch in range(epochs):
        for question in training:
            schedule.setdefault(question.day + epoch * (last_day + 1), []).append(question)
    total_days = (last_day + 1) * epochs
    for day in range(total_days + 1):
        if day in turns_by_day:
            ingest(sim.rt, [[observation(t) for t in turns_by_day[day]]])
            run_cycle_blocking(sim.peer)  # admit before anything is asked
        for old, new in supersede_on.get(day, []):
            _supersede(sim, old, new)
        todays = schedule.get(day, [])
        if todays:
            agent(sim, day, todays)
            asked.extend(todays)
        if day == 0:
            sim.salience_before = _saliences(sim)
        run_cycle_blocking(sim.peer)
        if day % CURVE_EVERY_DAYS == 0 or day == total_days:
            _curve_point(sim, day, asked)
        sim.clock.advance(DAY_MS)


def _by_group(
    questions: Sequence[Question], rankings: Sequence[Ranking]
) -> dict[str, list[Ranking]]:
    groups: dict[str, list[Ranking]] = {}
    for question, ranking in zip(questions, rankings, strict=True):
        groups.setdefault(question.group, []).append(ranking)
    return groups


def _measure(sim: Simulation, variant: Variant) -> dict[str, Any]:
    corpus = sim.corpus
    sim.latencies_ms.clear()
    test = corpus.test()
    train = corpus.train()
    heldout = [ranking(sim, q, q.text) for q in test]
    repeated = [ranking(sim, q, q.text) for q in train]
    paraphrased = [ranking(sim, q, p) for q in train for p in q.paraphrases]
    metrics: dict[str, Any] = {
        "heldout": retrieval_metrics(heldout),
        "repeated": retrieval_metrics(repeated),
        "paraphrased": retrieval_metrics(paraphrased),
        "distinct_top5": distinct_in_top(heldout, 5),
        "latency_ms": latency_summary(sim.latencies_ms),
        "swept_fraction": _swept_fraction(sim),
    }
    held_groups, repeated_groups = _by_group(test, heldout), _by_group(train, repeated)
    metrics["groups"] = {
        group: {
            "heldout": retrieval_metrics(held_groups.get(group, [])),
            "repeated": retrieval_metrics(repeated_groups.get(group, [])),
        }
        for group in sorted(set(held_groups) | set(repeated_groups))
    }
    metrics.update(_evidence_lost(sim, test, heldout))
    counts = sim.rt.db.counts()
    metrics["learned_keys"] = counts["learned_keys"]
    vector_weight, lexical_weight = fusion_weights(sim.rt.db, sim.rt.config)
    metrics["vector_share"] = round(vector_weight / (vector_weight + lexical_weight), 3)
    metrics["agent"] = dict(sim.agent_counts)
    gate = key_gate(sim.rt.db)
    metrics["key_bands"] = {
        f"{edge:.2f}": {"n": stats.n, "mean": stats.mean, "open": opened}
        for edge, stats, opened in zip(BAND_EDGES, gate.bands, gate.open_bands(), strict=True)
    }
    metrics["split_evidence"] = split_evidence(sim.rt.db, sim.rt.config).evidence
    metrics["intrinsic_strength"] = intrinsic_strength(sim.rt.db, sim.rt.config)
    metrics["cold_factor"] = cold_factor(sim.rt.db, sim.rt.config)
    return {
        "name": variant.name,
        "description": variant.description,
        "metrics": metrics,
        "curve": sim.curve,
        "salience": {"before": sim.salience_before, "after": _saliences(sim)},
    }


def _evidence_lost(
    sim: Simulation, test: Sequence[Question], heldout: Sequence[Ranking]
) -> dict[str, float]:
    """Held-out evidence in the cold tier, and the part of it the sweep cost.

    Lost = cold evidence that recall finds in the top 10 when cold chunks count
    fully (as if nothing had been swept) but not with the cold weight recall uses
    (configured or learned): evidence that nobody would have found anyway is not lost
    to the sweep.
    """
    db = sim.rt.db
    recall_config, learning = sim.rt.config.recall, sim.rt.config.learning
    configured, learned = recall_config.cold_factor, learning.cold_weight
    # Both: a learned weight replaces the configured one whatever it is.
    recall_config.cold_factor, learning.cold_weight = 1.0, False
    try:
        unswept = [ranking(sim, q, q.text) for q in test]
    finally:
        recall_config.cold_factor, learning.cold_weight = configured, learned
    swept = lost = total = 0
    for question, as_ranked, baseline in zip(test, heldout, unswept, strict=True):
        for chunk in question.evidence:
            obs = db.observation_by_hash(sim.hash_of_chunk[chunk])
            total += 1
            if obs is None or obs.cold_at is None:
                continue
            swept += 1
            found = chunk in as_ranked.returned[:EVAL_TOP_K]
            lost += chunk in baseline.returned[:EVAL_TOP_K] and not found
    return {
        "heldout_evidence_swept": swept / max(1, total),
        "heldout_evidence_lost": lost / max(1, total),
    }
