"""The vector/word split of recall's fusion, learned from where cited chunks would rank."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dreamcycle.pulses.fusion import (
    ALPHA,
    MIN_EVIDENCE,
    SHARES,
    InvalidFusion,
    SplitScores,
    best_share,
    fused_rank,
    observe,
    split_weights,
)

K = 60.0


def test_fused_rank_by_hand() -> None:
    vectors = [1, 2, 3]
    words = [3, 4]
    # share 0.8: 1 -> 0.8/61 = .01311, 3 -> 0.8/63 + 0.2/61 = .01598; 3 is first, 1 second.
    assert fused_rank(3, vectors, words, 0.8, K) == 1
    assert fused_rank(1, vectors, words, 0.8, K) == 2
    # share 0.2: 4 -> 0.8/62 = .01290 beats 1 -> 0.2/61 = .00328.
    assert fused_rank(4, vectors, words, 0.2, K) == 2
    assert fused_rank(1, vectors, words, 0.2, K) == 3
    assert fused_rank(9, vectors, words, 0.5, K) is None


def test_a_tie_counts_against_the_target() -> None:
    # share 0.5: 1 (vector rank 1) and 2 (word rank 1) score the same.
    assert fused_rank(1, [1], [2], 0.5, K) == 2
    assert fused_rank(2, [1], [2], 0.5, K) == 2


def test_observe_moves_every_split_towards_the_reciprocal_rank_it_would_have_given() -> None:
    state = observe(SplitScores(), [4], [1, 2, 3], [3, 4], rrf_k=K)
    expected = [1 / fused_rank(4, [1, 2, 3], [3, 4], s, K) for s in SHARES]  # type: ignore[operator]
    # The first chunk is the whole mean so far.
    assert state.scores == pytest.approx(tuple(expected))
    assert state.evidence == 1
    # Chunk 4 is found by words only: low shares rank it higher, so they score higher.
    assert state.scores[0] > state.scores[-1]


def test_chunks_neither_list_holds_teach_nothing() -> None:
    assert observe(SplitScores(), [9], [1, 2], [3], rrf_k=K) == SplitScores()


def test_the_configured_split_stays_until_enough_evidence() -> None:
    few = SplitScores(scores=(0.9, 0, 0, 0, 0, 0, 0), evidence=MIN_EVIDENCE - 1)
    assert best_share(few, 0.41) == 0.41
    enough = SplitScores(scores=(0.9, 0, 0, 0, 0, 0, 0), evidence=MIN_EVIDENCE)
    assert best_share(enough, 0.41) == SHARES[0]


def test_ties_between_splits_go_to_the_one_closest_to_the_configured() -> None:
    flat = SplitScores(scores=tuple(0.5 for _ in SHARES), evidence=MIN_EVIDENCE)
    assert best_share(flat, 0.41) == 0.4
    assert best_share(flat, 0.66) == 0.7


def test_the_split_moves_towards_the_list_that_finds_what_agents_cite() -> None:
    words_find = SplitScores()
    vectors_find = SplitScores()
    for _ in range(MIN_EVIDENCE):
        # The cited chunk 5 is second in one list and absent from the other.
        words_find = observe(words_find, [5], [1, 2, 3], [8, 5], rrf_k=K)
        vectors_find = observe(vectors_find, [5], [8, 5], [1, 2, 3], rrf_k=K)
    assert best_share(words_find, 0.5) < 0.5
    assert best_share(vectors_find, 0.5) > 0.5
    # Where every split ranks it alike, nothing moves.
    same = SplitScores()
    for _ in range(MIN_EVIDENCE):
        same = observe(same, [1], [1, 2], [1, 3], rrf_k=K)
    assert best_share(same, 0.41) == 0.4


def test_split_keeps_the_total_weight() -> None:
    assert split_weights(0.25, 2.0) == (0.5, 1.5)


@given(
    st.lists(st.integers(0, 30), max_size=5),
    st.lists(st.integers(0, 30), unique=True, max_size=20),
    st.lists(st.integers(0, 30), unique=True, max_size=20),
)
def test_any_evidence_leaves_scores_in_range_and_a_share_on_the_grid(
    cited: list[int], vectors: list[int], words: list[int]
) -> None:
    state = SplitScores(evidence=MIN_EVIDENCE)
    for _ in range(3):
        state = observe(state, cited, vectors, words, rrf_k=K)
    assert all(0.0 <= s <= 1.0 and math.isfinite(s) for s in state.scores)
    assert best_share(state, 0.5) in SHARES


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: observe(SplitScores(), [], [], [], rrf_k=K, alpha=0.0), "alpha"),
        (lambda: observe(SplitScores(), [], [], [], rrf_k=math.nan), "rrf_k"),
        (lambda: SplitScores(scores=(0.1,)), "split scores"),
        (lambda: SplitScores(scores=tuple(2.0 for _ in SHARES)), r"\[0, 1\]"),
        (lambda: SplitScores(evidence=-1), "evidence"),
        (lambda: best_share(SplitScores(), 1.5), "share"),
        (lambda: split_weights(1.5, 1.0), "share"),
    ],
)
def test_bad_parameters_are_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidFusion, match=message):
        call()


def test_the_average_is_the_plain_mean_then_a_moving_average_of_step_alpha() -> None:
    # Chunk 2 is first in the vector list and second in the words (rank r under each split),
    # chunk 7 is found by words alone: alternating them, the mean is known exactly.
    state = SplitScores()
    ranks_2 = [fused_rank(2, [2, 1], [1, 2], s, K) for s in SHARES]
    ranks_7 = [fused_rank(7, [2, 1], [7, 1], s, K) for s in SHARES]
    n = round(1 / ALPHA)
    for i in range(n):
        if i % 2 == 0:
            state = observe(state, [2], [2, 1], [1, 2], rrf_k=K)
        else:
            state = observe(state, [7], [2, 1], [7, 1], rrf_k=K)
    mean = [(1 / a + 1 / b) / 2 for a, b in zip(ranks_2, ranks_7, strict=True)]  # type: ignore[operator]
    assert state.scores == pytest.approx(tuple(mean))
    # Past 1/ALPHA chunks, each new one moves the average by ALPHA of the difference.
    after = observe(state, [2], [2, 1], [1, 2], rrf_k=K)
    moved = [(1 - ALPHA) * m + ALPHA / r for m, r in zip(mean, ranks_2, strict=True)]  # type: ignore[operator]
    assert after.scores == pytest.approx(tuple(moved))
