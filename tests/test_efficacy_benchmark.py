"""The efficacy benchmark on the generated corpus, at CI size, with the real model.

The figures that chose the defaults are in docs/efficacy.md; this test keeps the
defaults honest with the benchmark's own targets (scripts/efficacy_targets.py): learning
must lift new questions over the hybrid without salience and over the defaults without
keys, lift questions asked again by more, and the sweep must lose at most 1 % of the
held-out evidence, each as a mean over the three splits docs/efficacy.md reports.
The targets docs/efficacy.md reports as missed (the sweep's precision, credit without an
outcome call) are measured by the benchmark, not asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest

from scripts.efficacy import VARIANTS, run
from scripts.efficacy_corpus import load_corpus
from scripts.efficacy_report import aggregate_seeds
from scripts.efficacy_targets import MAX_EVIDENCE_LOST, misses

#: Nine simulations with the real model: minutes on two busy cores, past the suite's
#: default timeout (which guards against hangs, not against work).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: The targets this corpus holds the defaults to (efficacy_targets.Miss.target).
ASSERTED_TARGETS = (
    "new questions",
    "new questions per group",
    "repeated questions",
    "forgetting loses nothing",
)


#: The splits whose means docs/efficacy.md reports and the targets are set on: one split
#: decides a held-out question's fate by a handful of answers.
SEEDS = (7, 8, 9)


@pytest.fixture(scope="module")
def results() -> dict[str, Any]:
    chosen = [v for v in VARIANTS if v.name in ("hybrid", "full", "no-keys")]
    per_seed = [
        {"seed": seed, "configs": run(load_corpus(None, "generated", seed=seed), chosen)["configs"]}
        for seed in SEEDS
    ]
    return {"seeds": per_seed, "configs": aggregate_seeds(per_seed)}


def test_the_defaults_meet_the_learning_targets(results: dict[str, Any]) -> None:
    missed = [m for m in misses(results) if m.target in ASSERTED_TARGETS]
    assert not missed, "; ".join(f"{m.target}: {m.detail}" for m in missed)


def test_the_sweep_ran_and_keeps_held_out_evidence_findable(results: dict[str, Any]) -> None:
    for split in results["seeds"]:
        by_name = {c["name"]: c["metrics"] for c in split["configs"]}
        assert by_name["full"]["swept_fraction"] > 0.3  # the sweep moved chunks to the cold tier
        assert by_name["hybrid"]["swept_fraction"] == 0.0
    mean = {c["name"]: c["metrics"] for c in results["configs"]}
    assert mean["full"]["heldout_evidence_lost"] <= MAX_EVIDENCE_LOST
