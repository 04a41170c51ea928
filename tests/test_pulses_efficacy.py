"""The three efficacy checks of the learning loop, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from dreamcycle.pulses.efficacy import (
    ATTRIBUTION_CORRELATION,
    COUNTERFACTUAL_REPLAY,
    METRICS,
    RECALL_HIT_RATE,
    attribution_correlation,
    counterfactual_replay,
    recall_hit_rate,
    spearman,
)


def test_metric_names() -> None:
    assert METRICS == (RECALL_HIT_RATE, ATTRIBUTION_CORRELATION, COUNTERFACTUAL_REPLAY)
    assert METRICS == (
        "recall_hit_rate",
        "attribution_salience_correlation",
        "counterfactual_replay",
    )


# ---- recall hit rate ----------------------------------------------------------------


def test_recall_hit_rate_odd_population() -> None:
    salience = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5}
    # Median 0.3. Counted: 1, 3, 5, 4 (9 is not held); above: 5 and 4; 3 equals it.
    assert recall_hit_rate([[1, 3, 5], [4, 9]], salience) == 0.5


def test_recall_hit_rate_even_population_uses_the_midpoint() -> None:
    salience = {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4}
    # Median 0.25: 2 is below, 3 above.
    assert recall_hit_rate([[2, 3]], salience) == 0.5
    assert recall_hit_rate([[3], [4]], salience) == 1.0
    assert recall_hit_rate([[1], [2]], salience) == 0.0


def test_recall_hit_rate_median_is_over_all_held_chunks() -> None:
    # The median comes from every held salience, not only the context's: 0.9 and 0.8 are
    # the top of their context but below the median 0.955 of the whole store.
    salience = {1: 0.9, 2: 0.8, 3: 0.95, 4: 0.96, 5: 0.97, 6: 0.98}
    assert recall_hit_rate([[1, 2]], salience) == 0.0
    assert recall_hit_rate([[1, 2, 6]], salience) == pytest.approx(1 / 3)


def test_recall_hit_rate_is_strict_above_the_median() -> None:
    salience = {1: 0.5, 2: 0.5, 3: 0.5}
    assert recall_hit_rate([[1, 2, 3]], salience) == 0.0


def test_recall_hit_rate_counts_repeats() -> None:
    salience = {1: 0.1, 2: 0.9, 3: 0.5}
    # 2 appears in two contexts and counts twice: 2 above of 3 counted.
    assert recall_hit_rate([[2, 1], [2]], salience) == pytest.approx(2 / 3)


def test_recall_hit_rate_none_cases() -> None:
    assert recall_hit_rate([[1, 2]], {}) is None
    assert recall_hit_rate([], {1: 0.5}) is None
    assert recall_hit_rate([[], []], {1: 0.5}) is None
    assert recall_hit_rate([[7, 8]], {1: 0.5}) is None


# ---- spearman -----------------------------------------------------------------------


def test_spearman_without_ties() -> None:
    # d = [-1, 1, -1, 1, 0]: 1 - 6 * 4 / (5 * 24) = 0.8.
    assert spearman([1, 2, 3, 4, 5], [2, 1, 4, 3, 5]) == pytest.approx(0.8)
    # d = [-2, 0, 2]: 1 - 6 * 8 / (3 * 8) = -1.
    assert spearman([10.0, 20.0, 30.0], [0.3, 0.2, 0.1]) == pytest.approx(-1.0)


def test_spearman_with_ties_averages_ranks() -> None:
    # Ranks x: [0, 1.5, 1.5, 3]; y: [0, 2, 1, 3]; Pearson of ranks = sqrt(1.125 / 1.25).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    # Ranks x: [0.5, 0.5, 2]; y: [0, 1, 2]: cov 0.5, var 0.5 and 2/3.
    assert spearman([5, 5, 9], [1, 2, 3]) == pytest.approx(0.5 / math.sqrt(0.5 * 2 / 3))


def test_spearman_perfect_agreement_and_disagreement() -> None:
    assert spearman([0.1, 0.5, 0.2, 0.9], [1, 50, 2, 1000]) == pytest.approx(1.0)
    assert spearman([0.1, 0.5, 0.2, 0.9], [9, 1, 5, -3]) == pytest.approx(-1.0)
    value = spearman([3, 1, 2], [30, 10, 20])
    assert value is not None and -1.0 <= value <= 1.0


def test_spearman_none_cases() -> None:
    assert spearman([], []) is None
    assert spearman([1.0], [2.0]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None
    assert spearman([1, 2, 3], [4, 4, 4]) is None


def test_spearman_length_mismatch_raises() -> None:
    with pytest.raises(ValueError, match="equal lengths, got 3 and 2"):
        spearman([1, 2, 3], [1, 2])


# ---- attribution correlation -----------------------------------------------------------


def test_attribution_correlation_over_credited_held_chunks() -> None:
    credit = {1: 0.5, 2: -0.2, 3: 0.1, 99: -5.0}
    salience = {1: 0.5, 2: 0.1, 3: 0.9, 4: 0.0}
    # Labels 1, 2, 3 only (99 is not held, 4 was never credited).
    # Credit ranks [2, 0, 1], salience ranks [1, 0, 2]: 1 - 6 * 2 / (3 * 8) = 0.5.
    assert attribution_correlation(credit, salience) == pytest.approx(0.5)


def test_attribution_correlation_ignores_unheld_and_uncredited_chunks() -> None:
    credit = {1: 0.1, 2: 0.2, 3: 0.3, 50: 10.0}
    salience = {1: 0.2, 2: 0.4, 3: 0.6, 7: 1.0, 8: -1.0}
    assert attribution_correlation(credit, salience) == pytest.approx(1.0)


def test_attribution_correlation_none_cases() -> None:
    assert attribution_correlation({}, {1: 0.5}) is None
    assert attribution_correlation({1: 0.3}, {1: 0.5, 2: 0.1}) is None
    assert attribution_correlation({1: 0.3, 2: 0.4}, {3: 0.5}) is None
    assert attribution_correlation({1: 0.3, 2: 0.4}, {1: 0.5, 2: 0.5}) is None


# ---- counterfactual replay ---------------------------------------------------------------


def test_counterfactual_replay_share_found_again() -> None:
    # 1 and 3 found again, 2 and 4 lost; 7 is new and does not count.
    assert counterfactual_replay([[1, 2, 3], [4]], [[3, 1, 7], []]) == 0.5
    assert counterfactual_replay([[1, 2]], [[2, 1]]) == 1.0
    assert counterfactual_replay([[1, 2]], [[3]]) == 0.0
    # Each replay is matched to its own decision only.
    assert counterfactual_replay([[1], [2]], [[2], [1]]) == 0.0


def test_counterfactual_replay_none_and_mismatch() -> None:
    assert counterfactual_replay([], []) is None
    assert counterfactual_replay([[], []], [[1], [2]]) is None
    with pytest.raises(ValueError, match="one replay per decision"):
        counterfactual_replay([[1]], [])
