"""Credit assignment: which recalled chunks an outcome credits, and by how much."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.credit import (
    MISS_FACTOR,
    STRONG_OUTCOME,
    UNCITED_STEP,
    Credit,
    CreditRule,
    InvalidCredit,
    assign_credit,
    uncited,
)

RANKED = ["a", "b", "c", "d"]


def assert_credits(credits: list[Credit], expected: list[tuple[str, float]]) -> None:
    assert [c.chunk_hash for c in credits] == [h for h, _ in expected]
    assert [c.amount for c in credits] == pytest.approx([a for _, a in expected], abs=1e-15)


def test_constants_are_the_documented_ones() -> None:
    assert (MISS_FACTOR, UNCITED_STEP, STRONG_OUTCOME) == (0.5, 0.1, 0.8)
    assert CreditRule("none") is CreditRule.NONE
    assert [rule.value for rule in CreditRule] == ["none", "top", "rank"]


# ---- citations --------------------------------------------------------------------


def test_citations_credit_exactly_the_cited_recalled_chunks_in_recalled_order() -> None:
    credits = assign_credit(RANKED, ["d", "b"], 0.6)
    assert credits == [Credit("b", 0.6), Credit("d", 0.6)]


def test_a_cited_miss_is_scaled_by_miss_factor() -> None:
    assert_credits(assign_credit(RANKED, ["c", "a"], -0.6), [("a", -0.3), ("c", -0.3)])
    assert_credits(assign_credit(RANKED, ["b"], -0.8, miss_factor=0.25), [("b", -0.2)])


def test_citations_override_the_rule() -> None:
    for rule in CreditRule:
        assert assign_credit(RANKED, ["c"], 1.0, rule) == [Credit("c", 1.0)]


def test_a_cited_hash_not_recalled_is_ignored_and_reported() -> None:
    credits = assign_credit(RANKED, ["zz", "b", "yy"], 0.5)
    assert credits == [Credit("b", 0.5)]
    assert uncited(RANKED, ["zz", "b", "yy"]) == ["zz", "yy"]
    assert uncited(RANKED, ["a", "d"]) == []
    # Only unrecalled citations: nothing is credited (the rule does not kick in either).
    assert assign_credit(RANKED, ["zz"], 1.0, CreditRule.RANK) == []


def test_duplicates_are_credited_once() -> None:
    credits = assign_credit(["a", "b", "a"], ["a", "a"], 0.4)
    assert credits == [Credit("a", 0.4)]
    ranked = assign_credit(["a", "b", "a", "c"], [], 1.0, CreditRule.RANK)
    assert [c.chunk_hash for c in ranked] == ["a", "b", "c"]
    assert [c.amount for c in ranked] == pytest.approx([0.1, 0.05, 0.1 / 3])


# ---- rules without citations ----------------------------------------------------------


@pytest.mark.parametrize("reward", [1.0, -1.0, 0.5, -0.3])
def test_rule_none_without_citations_credits_nothing(reward: float) -> None:
    assert assign_credit(RANKED, [], reward) == []
    assert assign_credit(RANKED, [], reward, CreditRule.NONE) == []


def test_rule_top_credits_only_the_first_chunk_on_strong_outcomes() -> None:
    assert_credits(assign_credit(RANKED, [], 0.9, CreditRule.TOP), [("a", 0.09)])
    assert_credits(assign_credit(RANKED, [], STRONG_OUTCOME, CreditRule.TOP), [("a", 0.08)])
    assert assign_credit(RANKED, [], 0.79, CreditRule.TOP) == []
    assert assign_credit(RANKED, [], -0.79, CreditRule.TOP) == []
    # A strong miss: reward * MISS_FACTOR * UNCITED_STEP.
    assert_credits(assign_credit(RANKED, [], -1.0, CreditRule.TOP), [("a", -0.05)])
    assert_credits(assign_credit(RANKED, [], -0.8, CreditRule.TOP), [("a", -0.04)])


def test_rule_rank_gives_step_over_rank() -> None:
    credits = assign_credit(RANKED, [], 1.0, CreditRule.RANK)
    assert [c.chunk_hash for c in credits] == RANKED
    assert [c.amount for c in credits] == pytest.approx([0.1, 0.05, 0.1 / 3, 0.025])
    misses = assign_credit(RANKED, [], -0.5, CreditRule.RANK)
    assert [c.amount for c in misses] == pytest.approx([-0.025, -0.0125, -0.025 / 3, -0.00625])
    custom = assign_credit(RANKED[:2], [], 0.5, CreditRule.RANK, uncited_step=0.2)
    assert [c.amount for c in custom] == pytest.approx([0.1, 0.05])


@pytest.mark.parametrize("rule", list(CreditRule))
def test_nothing_recalled_credits_nothing(rule: CreditRule) -> None:
    assert assign_credit([], [], 1.0, rule) == []
    assert assign_credit([], ["a"], 1.0, rule) == []


@pytest.mark.parametrize("rule", list(CreditRule))
def test_zero_reward_credits_nothing(rule: CreditRule) -> None:
    assert assign_credit(RANKED, ["a"], 0.0, rule) == []
    assert assign_credit(RANKED, [], 0.0, rule) == []
    assert assign_credit(RANKED, [], -0.0, rule) == []


# ---- validation ---------------------------------------------------------------------


@pytest.mark.parametrize("reward", [2.0, -1.01, math.nan, math.inf, -math.inf])
def test_invalid_reward_raises(reward: float) -> None:
    with pytest.raises(InvalidCredit, match="reward must be finite and in"):
        assign_credit(RANKED, ["a"], reward)


@pytest.mark.parametrize("miss_factor", [-0.1, 1.5, math.nan])
def test_invalid_miss_factor_raises(miss_factor: float) -> None:
    with pytest.raises(InvalidCredit, match="miss_factor must be in"):
        assign_credit(RANKED, ["a"], 0.5, miss_factor=miss_factor)


def test_boundary_rewards_are_accepted() -> None:
    assert assign_credit(RANKED, ["a"], 1.0) == [Credit("a", 1.0)]
    assert assign_credit(RANKED, ["a"], -1.0) == [Credit("a", -0.5)]


# ---- a miss never outweighs a hit ------------------------------------------------------

hashes = st.sampled_from([f"h{n}" for n in range(8)])


@given(
    st.lists(hashes, max_size=10),
    st.lists(hashes, max_size=5),
    st.floats(0.0, 1.0),
    st.sampled_from(list(CreditRule)),
    st.floats(0.0, 1.0),
)
@settings(max_examples=300, deadline=None)
def test_a_miss_never_weighs_more_than_a_hit_of_the_same_size(
    ranked: list[str], cited: list[str], size: float, rule: CreditRule, miss_factor: float
) -> None:
    hit = {c.chunk_hash: c.amount for c in assign_credit(ranked, cited, size, rule)}
    miss = {c.chunk_hash: c.amount for c in assign_credit(ranked, cited, -size, rule)}
    custom = {
        c.chunk_hash: c.amount
        for c in assign_credit(ranked, cited, -size, rule, miss_factor=miss_factor)
    }
    # The same chunks are touched either way; only the size differs.
    assert set(miss) == set(hit) == set(custom)
    for chunk, amount in hit.items():
        assert amount >= 0 and miss[chunk] <= 0 and custom[chunk] <= 0
        assert abs(miss[chunk]) <= abs(amount)
        assert abs(custom[chunk]) <= abs(amount)
        assert miss[chunk] == pytest.approx(-MISS_FACTOR * amount)
    # Everything credited was recalled; with citations, exactly the cited recalled ones.
    assert set(hit) <= set(ranked)
    if cited:
        assert set(hit) == ({h for h in cited if h in ranked} if size else set())
