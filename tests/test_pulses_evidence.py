"""Paired evidence: the running gain of something learned over the unlearned ranking."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dreamcycle.pulses.evidence import (
    MIN_EVIDENCE,
    InvalidEvidence,
    PairedGain,
    reciprocal_rank_gain,
)


@given(st.lists(st.floats(-1.0, 1.0), min_size=2, max_size=60))
def test_the_statistics_are_the_plain_mean_and_variance(gains: list[float]) -> None:
    state = PairedGain()
    for gain in gains:
        state = state.add(gain, memory=1000)
    assert state.n == len(gains)
    assert state.mean == pytest.approx(statistics.fmean(gains), abs=1e-9)
    assert state.variance == pytest.approx(statistics.pvariance(gains), abs=1e-9)


def test_past_the_memory_each_question_moves_the_mean_by_one_over_memory() -> None:
    state = PairedGain()
    for _ in range(10):
        state = state.add(0.0, memory=10)
    after = state.add(1.0, memory=10)
    assert after.mean == pytest.approx(0.1)
    assert after.n == 11


def test_the_verdict_keeps_the_prior_until_the_evidence_is_clear() -> None:
    helps = PairedGain()
    for i in range(MIN_EVIDENCE - 1):
        helps = helps.add(0.2 if i % 2 else 0.1)
    assert helps.verdict(prior=False) is False  # too few questions
    helps = helps.add(0.2)
    assert helps.verdict(prior=False) is True
    hurts = PairedGain()
    for i in range(MIN_EVIDENCE):
        hurts = hurts.add(-0.2 if i % 2 else -0.1)
    assert hurts.verdict(prior=True) is False
    mixed = PairedGain()
    for i in range(200):
        mixed = mixed.add(0.5 if i % 2 else -0.5)
    assert mixed.verdict(prior=True) is True
    assert mixed.verdict(prior=False) is False


def test_a_constant_gain_is_infinitely_sure_and_none_is_no_evidence() -> None:
    constant = PairedGain()
    for _ in range(MIN_EVIDENCE):
        constant = constant.add(0.25)
    assert constant.t_statistic() == math.inf
    nothing = PairedGain()
    for _ in range(MIN_EVIDENCE):
        nothing = nothing.add(0.0)
    assert nothing.t_statistic() == 0.0
    assert nothing.verdict(prior=True) is True


def test_reciprocal_rank_gain_by_hand() -> None:
    # Target 3 is first with the learned part and third without: 1 - 1/3.
    assert reciprocal_rank_gain([3], [3, 1, 2], [1, 2, 3]) == pytest.approx(2 / 3)
    # Target 9 is in neither list; target 1 loses its first place to second.
    assert reciprocal_rank_gain([9, 1], [2, 1], [1, 2]) == pytest.approx((0 + 0.5 - 1) / 2)
    assert reciprocal_rank_gain([], [1], [1]) is None


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: PairedGain().add(1.5), "gain"),
        (lambda: PairedGain().add(math.nan), "gain"),
        (lambda: PairedGain(n=-1), "count"),
        (lambda: PairedGain(mean=2.0), "mean"),
        (lambda: PairedGain(variance=-1.0), "variance"),
        (lambda: PairedGain.from_json([1.5, 0.0, 0.0]), "integer"),
        (lambda: PairedGain.from_json("x"), "expected"),
    ],
)
def test_bad_statistics_are_named(call: object, message: str) -> None:
    with pytest.raises(InvalidEvidence, match=message):
        call()  # type: ignore[operator]
