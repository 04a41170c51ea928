"""The prior over candidates' sizes, learned from where it would have ranked cited chunks."""

from __future__ import annotations

import numpy as np
import pytest

from dreamcycle.pulses.evidence import MIN_EVIDENCE, PairedGain
from dreamcycle.pulses.intrinsic import (
    STRENGTHS,
    InvalidPrior,
    PriorEvidence,
    best_strength,
    multipliers,
    observe,
    size_percentiles,
)
from dreamcycle.pulses.ranking import CandidateColumns, RankingWeights, rank_columns


def test_sizes_as_percentiles_among_the_candidates_ties_sharing_their_rank() -> None:
    assert size_percentiles(np.array([30.0, 10.0, 20.0])).tolist() == [1.0, 0.0, 0.5]
    assert size_percentiles(np.array([5.0, 5.0, 9.0])).tolist() == [0.25, 0.25, 1.0]
    assert size_percentiles(np.array([7.0])).tolist() == [0.5]
    assert size_percentiles(np.zeros(0)).tolist() == []


def test_the_multiplier_is_bounded_by_the_strength_either_way() -> None:
    p = np.array([0.0, 0.5, 1.0])
    assert multipliers(p, 0.2).tolist() == pytest.approx([0.8, 1.0, 1.2])
    assert multipliers(p, -0.1).tolist() == pytest.approx([1.1, 1.0, 0.9])
    with pytest.raises(InvalidPrior, match="strength"):
        multipliers(p, 0.9)


LABELS = np.array([1, 2, 3], dtype=np.int64)
#: Chunk 3 is a little less relevant than 1 and much longer: a prior for size lifts it.
RELEVANCE = np.array([0.030, 0.020, 0.028])
LENGTHS = np.array([20.0, 10.0, 400.0])


def test_observe_books_each_strengths_gain_over_no_prior() -> None:
    state = observe(PriorEvidence(), [3], LABELS, RELEVANCE, LENGTHS)
    gains = dict(zip(STRENGTHS, (g.mean for g in state.gains), strict=True))
    # Without a prior chunk 3 is second; any positive strength puts it first (1 - 1/2),
    # a negative one keeps it second or lower.
    assert gains[0.1] == pytest.approx(0.5)
    assert gains[-0.1] <= 0
    assert state.evidence == 1
    assert observe(PriorEvidence(), [9], LABELS, RELEVANCE, LENGTHS) == PriorEvidence()


def test_no_prior_until_a_strength_is_clearly_better() -> None:
    state = PriorEvidence()
    for _ in range(MIN_EVIDENCE - 1):
        state = observe(state, [3], LABELS, RELEVANCE, LENGTHS)
    assert best_strength(state) == 0.0
    # Now and then the cited chunk is the short one: the gains vary, yet stay clear.
    for i in range(2 * MIN_EVIDENCE):
        cited = [2] if i % 5 == 0 else [3]
        state = observe(state, cited, LABELS, RELEVANCE, LENGTHS)
    assert best_strength(state) > 0


def test_ties_between_strengths_go_to_the_weaker() -> None:
    clear = PairedGain()
    for i in range(MIN_EVIDENCE):
        clear = clear.add(0.2 if i else 0.1)
    assert best_strength(PriorEvidence((clear,) * len(STRENGTHS))) == 0.05


def test_recall_ranks_with_the_learned_strength() -> None:
    columns = CandidateColumns(
        labels=LABELS,
        cosines=np.array([0.9, 0.8, 0.85]),
        saliences=np.full(3, 0.5),
        lexical_ranks=np.zeros(3, dtype=np.int64),
        key_similarities=np.full(3, np.nan),
        cold=np.zeros(3, dtype=np.bool_),
        learned_ranks=np.zeros(3, dtype=np.int64),
        confidences=np.full(3, 0.5),
        lengths=LENGTHS,
    )
    plain = [r.label for r in rank_columns(columns, RankingWeights(), None)]
    primed = [r.label for r in rank_columns(columns, RankingWeights(intrinsic_strength=0.3), None)]
    assert plain == [1, 3, 2]
    assert primed[0] == 3
    assert RankingWeights(intrinsic_strength=0.3).overtake_ratio == pytest.approx(0.7 / 1.3)


def test_stored_evidence_for_other_strengths_starts_again() -> None:
    state = observe(PriorEvidence(), [3], LABELS, RELEVANCE, LENGTHS)
    assert PriorEvidence.from_json(state.to_json()) == state
    assert PriorEvidence.from_json({"strengths": [0.5], "gains": []}) == PriorEvidence()
    with pytest.raises(InvalidPrior, match="gains"):
        PriorEvidence.from_json({"strengths": list(STRENGTHS), "gains": 3})
