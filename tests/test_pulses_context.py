"""pulses/context.py: dedup across tiers, the budget spent by salience, overflow, cutting.

Token counts are hand-computed with the estimate max(words, ceil(chars / 4)).
"""

from __future__ import annotations

import pytest

from dreamcycle.pulses.context import (
    CUT_MARK,
    Candidate,
    InvalidBundle,
    Reference,
    Tier,
    estimate_tokens,
    member_text,
    pack,
    render,
)


def chunk(name: str, salience: float, chars: int = 40, title: str = "") -> Candidate:
    """A candidate whose content is `chars` characters without spaces: chars / 4 tokens."""
    return Candidate(content_hash=name * 64, title=title, content="x" * chars, salience=salience)


def test_the_estimate_is_words_or_a_quarter_of_the_characters() -> None:
    assert estimate_tokens("x" * 40) == 10
    assert estimate_tokens("x" * 41) == 11  # rounded up
    assert estimate_tokens("a b c d e f") == 6  # 11 characters, but six words
    assert member_text(chunk("a", 0.5, 8, title="T")) == "T\nxxxxxxxx"


def test_a_chunk_in_several_tiers_is_kept_once_in_the_tier_of_highest_priority() -> None:
    a, b, c = chunk("a", 0.2), chunk("b", 0.5), chunk("c", 0.9)
    bundle = pack(
        {Tier.PINNED: [a], Tier.OUTCOMES: [b, a], Tier.RELEVANT: [c, b, a]},
        budget=1000,
        pinned_salience=0.0,
        max_overflow=64,
    )
    assert [(m.candidate.content_hash[0], m.tier) for m in bundle.members] == [
        ("a", Tier.PINNED),
        ("b", Tier.OUTCOMES),
        ("c", Tier.RELEVANT),
    ]
    assert bundle.tokens() == 30 and bundle.tokens(Tier.OUTCOMES) == 10
    assert (bundle.overflow, bundle.dropped) == ((), 0)


def test_the_budget_goes_by_salience_and_smaller_chunks_fill_what_is_left() -> None:
    # 10-token chunks except d (30 tokens); budget 35.
    a, b, c, d = chunk("a", 0.9), chunk("b", 0.3), chunk("c", 0.6), chunk("d", 0.8, chars=120)
    bundle = pack({Tier.RELEVANT: [b, c, d, a]}, budget=35, pinned_salience=1.0, max_overflow=64)
    # By salience: a (10, 25 left), d (30: does not fit), c (10, 15 left), b (10, 5 left).
    kept = [m.candidate.content_hash[0] for m in bundle.members]
    assert kept == ["b", "c", "a"]  # the tier's own order, not the salience order
    assert bundle.overflow == (Reference("d" * 64, ""),)
    assert bundle.tokens(Tier.RELEVANT) == 30


def test_pinned_chunks_get_a_salience_floor_and_survive_budget_pressure() -> None:
    pinned = chunk("p", 0.1)
    hot = [chunk(name, 0.8) for name in "abc"]
    bundle = pack(
        {Tier.PINNED: [pinned], Tier.RELEVANT: hot},
        budget=25,
        pinned_salience=0.9,
        max_overflow=64,
    )
    # p ranks at 0.9 > 0.8: it is taken first (15 left), then a and... only one of a, b, c.
    assert [m.candidate.content_hash[0] for m in bundle.members] == ["p", "a"]
    assert bundle.members[0].rank_salience == 0.9 and bundle.members[0].candidate.salience == 0.1
    assert [r.content_hash[0] for r in bundle.overflow] == ["b", "c"]
    # Without the floor the pinned chunk would be the one left out.
    unfloored = pack(
        {Tier.PINNED: [pinned], Tier.RELEVANT: hot},
        budget=25,
        pinned_salience=0.0,
        max_overflow=64,
    )
    assert [m.candidate.content_hash[0] for m in unfloored.members] == ["a", "b"]


def test_equal_salience_goes_to_the_tier_of_higher_priority() -> None:
    bundle = pack(
        {Tier.OUTCOMES: [chunk("o", 0.5)], Tier.RELEVANT: [chunk("r", 0.5)]},
        budget=10,
        pinned_salience=1.0,
        max_overflow=64,
    )
    assert [m.tier for m in bundle.members] == [Tier.OUTCOMES]
    assert [r.content_hash[0] for r in bundle.overflow] == ["r"]


def test_overflow_lists_at_most_max_overflow_references_but_counts_all() -> None:
    many = [chunk(name, 0.5) for name in "abcdefgh"]
    bundle = pack({Tier.RELEVANT: many}, budget=10, pinned_salience=1.0, max_overflow=3)
    assert [m.candidate.content_hash[0] for m in bundle.members] == ["a"]
    assert [r.content_hash[0] for r in bundle.overflow] == ["b", "c", "d"]
    assert bundle.dropped == 7


def test_one_memory_is_always_kept_cut_to_the_budget() -> None:
    big = Candidate("b" * 64, "Big", "word " * 200, 0.4)  # 200 words, 1000 characters
    small_but_dull = chunk("s", 0.1, chars=400)  # 100 tokens: also over budget
    bundle = pack(
        {Tier.RELEVANT: [small_but_dull, big]}, budget=20, pinned_salience=1.0, max_overflow=64
    )
    [member] = bundle.members
    assert member.truncated and member.candidate.content_hash == "b" * 64
    assert member.candidate.content.endswith(CUT_MARK)
    assert member.tokens == estimate_tokens(member_text(member.candidate)) <= 20
    assert member.tokens >= 15  # cut close to the budget, not to nothing
    assert bundle.overflow == (Reference("s" * 64, ""),) and bundle.dropped == 1


def test_a_title_longer_than_the_budget_is_cut_too() -> None:
    candidate = Candidate("t" * 64, "T" * 400, "body", 0.5)
    bundle = pack({Tier.PINNED: [candidate]}, budget=8, pinned_salience=1.0, max_overflow=0)
    assert bundle.members[0].tokens <= 8 and bundle.members[0].truncated


def test_nothing_in_gives_an_empty_bundle() -> None:
    bundle = pack({}, budget=100, pinned_salience=1.0, max_overflow=64)
    assert (bundle.members, bundle.overflow, bundle.dropped) == ((), (), 0)


@pytest.mark.parametrize(
    ("budget", "floor", "overflow", "named"),
    [(7, 1.0, 1, "budget"), (100, 1.5, 1, "pinned_salience"), (100, 1.0, -1, "max_overflow")],
)
def test_bad_arguments_are_refused_by_name(
    budget: int, floor: float, overflow: int, named: str
) -> None:
    with pytest.raises(InvalidBundle, match=named):
        pack({}, budget=budget, pinned_salience=floor, max_overflow=overflow)


def test_render_lists_tiers_in_priority_order_then_what_did_not_fit() -> None:
    pinned = Candidate("p" * 64, "Pinned rule", "Always rotate keys.", 0.2)
    relevant = Candidate("r" * 64, "", "Deploys go through the bastion.\nSecond line.", 0.7)
    left_out = chunk("z", 0.1, chars=400, title="Too long")
    bundle = pack(
        {Tier.RELEVANT: [relevant, left_out], Tier.PINNED: [pinned]},
        budget=40,
        pinned_salience=0.9,
        max_overflow=64,
    )
    text = render(bundle, "decision abc")
    assert text == (
        "decision abc\n\n# Pinned\n\n## Pinned rule [pppppppppppp]\nAlways rotate keys.\n"
        "\n# Relevant\n\n## Deploys go through the bastion. [rrrrrrrrrrrr]\n"
        "Deploys go through the bastion.\nSecond line.\n"
        "\n# Not included (1, over the budget)\n- Too long [zzzzzzzzzzzz]"
    )
