"""The prior over candidates' sizes, learned from where it would have ranked cited chunks."""

from __future__ import annotations

import numpy as np
import pytest

from dreamcycle.pulses.cold_weight import WEIGHTS, gains_of_weights
from dreamcycle.pulses.evidence import MIN_EVIDENCE, GridEvidence, InvalidEvidence, PairedGain
from dreamcycle.pulses.intrinsic import (
    STRENGTHS,
    InvalidPrior,
    gains_of_strengths,
    multipliers,
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


def _observed(state: GridEvidence, cited: list[int]) -> GridEvidence:
    gains = gains_of_strengths(cited, LABELS, RELEVANCE, LENGTHS)
    return state if gains is None else state.observe(gains)


def test_each_strength_is_scored_against_no_prior() -> None:
    gains = dict(
        zip(STRENGTHS, gains_of_strengths([3], LABELS, RELEVANCE, LENGTHS) or [], strict=True)
    )
    # Without a prior chunk 3 is second; a positive strength puts it first (1 - 1/2), a
    # negative one keeps it second or lower.
    assert gains[0.1] == pytest.approx(0.5)
    assert gains[-0.1] <= 0
    assert gains_of_strengths([9], LABELS, RELEVANCE, LENGTHS) is None


def test_no_prior_until_a_strength_is_clearly_better() -> None:
    state = GridEvidence(STRENGTHS)
    for _ in range(MIN_EVIDENCE - 1):
        state = _observed(state, [3])
    assert state.best(0.0) == 0.0
    # Now and then the cited chunk is the short one: the gains vary, yet stay clear.
    for i in range(2 * MIN_EVIDENCE):
        state = _observed(state, [2] if i % 5 == 0 else [3])
    assert state.best(0.0) > 0


def test_ties_between_values_go_to_the_one_closest_to_the_unlearned() -> None:
    clear = PairedGain()
    for i in range(MIN_EVIDENCE):
        clear = clear.add(0.2 if i else 0.1)
    assert GridEvidence(STRENGTHS, (clear,) * len(STRENGTHS)).best(0.0) == 0.05


def test_each_cold_weight_is_scored_against_the_configured_one() -> None:
    # Chunk 1 is cold and most relevant; chunk 3 is live and cited.
    cold = np.array([True, False, False])
    gains = dict(
        zip(WEIGHTS, gains_of_weights([3], LABELS, RELEVANCE, cold, 0.98) or [], strict=True)
    )
    # At 0.98 and 0.95 the cold chunk still leads (0.0285 > 0.028); below, the cited one
    # is first.
    assert gains == pytest.approx({0.5: 0.5, 0.7: 0.5, 0.85: 0.5, 0.95: 0.0})
    # A cited cold chunk loses by every weight that buries it.
    buried = gains_of_weights([1], LABELS, RELEVANCE, cold, 0.98) or []
    assert buried == pytest.approx([1 / 3 - 1, 1 / 2 - 1, 1 / 2 - 1, 0.0])


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


def test_stored_evidence_for_another_grid_starts_again() -> None:
    state = _observed(GridEvidence(STRENGTHS), [3])
    assert GridEvidence.from_json(state.to_json(), STRENGTHS) == state
    assert GridEvidence.from_json({"grid": [0.5], "gains": []}, STRENGTHS) == GridEvidence(
        STRENGTHS
    )
    with pytest.raises(InvalidEvidence, match="gains"):
        GridEvidence.from_json({"grid": list(STRENGTHS), "gains": 3}, STRENGTHS)
    with pytest.raises(InvalidEvidence, match="gains"):
        GridEvidence(STRENGTHS).observe([0.1])
