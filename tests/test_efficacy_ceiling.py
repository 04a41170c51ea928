"""The bound on what session-level results can teach, on the generated corpus.

docs/efficacy.md gives the bound's figures as the reason the session mode's target is
out of reach; this test keeps the measurement honest: every training question is
watched once, the bound never falls below where the unlearned store starts, and a
question neither ask answered is ranked again without anything either ask showed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scripts import efficacy_ceiling
from scripts.efficacy import CorpusSpec, cached_embedder
from scripts.efficacy_corpus import load_corpus

pytestmark = pytest.mark.slow

SEED = 7


def test_every_training_question_is_watched_and_the_bound_is_ordered(tmp_path: Path) -> None:
    spec = CorpusSpec(None, "generated", "small")
    watched = efficacy_ceiling.measure(spec, SEED, cached_embedder(None))
    training = load_corpus(None, "generated", seed=SEED).train()
    assert len(watched) == len([q for q in training if q.evidence])
    for asked in watched:
        assert 0.0 <= asked.base_recall <= asked.ceiling_recall <= 1.0
        if asked.first_found:
            assert not asked.again_found
            assert asked.ceiling_recall == asked.base_recall
        elif asked.again_found:
            assert asked.ceiling_recall == 1.0
        else:
            assert asked.base_recall == 0.0  # nothing shown answered
    out = tmp_path / "ceiling.json"
    assert (
        efficacy_ceiling.main(["--seeds", str(SEED), "--json", str(out), "--embed-cache", ""]) == 0
    )
    row = json.loads(out.read_text())["seeds"][0]
    assert row["questions"] == len(watched)
    assert row["hybrid"] <= row["ceiling"] <= 100.0
    assert row["first_found"] + row["again_found"] <= 100.0
