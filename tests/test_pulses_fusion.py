"""The vector/word split of recall's fusion, learned from cited chunks' ranks."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pulses.fusion import (
    ALPHA,
    MAX_SHARE,
    MIN_SHARE,
    InvalidFusion,
    RankPair,
    learn_share,
    split_weights,
    vote,
)


def test_the_retriever_that_ranked_the_cited_chunk_higher_wins_the_vote() -> None:
    assert vote(RankPair(vector_rank=1, lexical_rank=4)) == 1.0
    assert vote(RankPair(vector_rank=9, lexical_rank=2)) == 0.0
    assert vote(RankPair(vector_rank=3, lexical_rank=None)) == 1.0
    assert vote(RankPair(vector_rank=None, lexical_rank=30)) == 0.0


def test_ties_and_chunks_neither_list_found_do_not_vote() -> None:
    assert vote(RankPair(vector_rank=2, lexical_rank=2)) is None
    assert vote(RankPair(vector_rank=None, lexical_rank=None)) is None
    assert learn_share(0.4, [RankPair(None, None), RankPair(5, 5)]) == 0.4


def test_one_vote_moves_the_share_by_alpha_of_the_gap() -> None:
    # 0.95 * 0.4 + 0.05 * 1.0 = 0.43; then 0.95 * 0.43 + 0.05 * 0.0 = 0.4085
    after_vector = learn_share(0.4, [RankPair(1, 3)])
    assert after_vector == pytest.approx(0.43)
    assert learn_share(after_vector, [RankPair(3, 1)]) == pytest.approx(0.4085)
    assert ALPHA == 0.05


def test_the_share_stays_inside_its_bounds_however_one_sided_the_votes() -> None:
    assert learn_share(0.5, [RankPair(1, None)] * 1000) == MAX_SHARE
    assert learn_share(0.5, [RankPair(None, 1)] * 1000) == MIN_SHARE
    assert 0.0 < MIN_SHARE < MAX_SHARE < 1.0


def test_split_keeps_the_total_weight() -> None:
    vector, lexical = split_weights(0.25, 2.0)
    assert (vector, lexical) == (0.5, 1.5)


@given(
    st.floats(0.0, 1.0),
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.integers(1, 200)), st.one_of(st.none(), st.integers(1, 200))
        )
    ),
)
def test_any_votes_leave_a_bounded_finite_share(
    start: float, ranks: list[tuple[int | None, int | None]]
) -> None:
    share = learn_share(start, [RankPair(v, w) for v, w in ranks])
    assert math.isfinite(share)
    assert MIN_SHARE <= share <= MAX_SHARE


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: vote(RankPair(0, 1)), "1-based"),
        (lambda: learn_share(0.5, [], alpha=0.0), "alpha"),
        (lambda: learn_share(0.5, [], lowest=0.9, highest=0.1), "bounds"),
        (lambda: learn_share(math.nan, []), "finite"),
        (lambda: split_weights(1.5, 1.0), "share"),
    ],
)
def test_bad_parameters_are_named(call, message: str) -> None:
    with pytest.raises(InvalidFusion, match=message):
        call()
