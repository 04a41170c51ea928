"""The vector/word split of recall's fusion, learned from where cited chunks would rank."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dreamcycle.pulses.evidence import MIN_EVIDENCE, GridEvidence, PairedGain
from dreamcycle.pulses.fusion import (
    SHARES,
    InvalidFusion,
    SplitEvidence,
    best_share,
    fused_rank,
    observe,
    split_weights,
)

K = 60.0
CONFIGURED = 0.41


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


def test_observe_books_each_splits_gain_over_the_configured_one() -> None:
    state = observe(SplitEvidence(CONFIGURED), [4], [1, 2, 3], [3, 4], rrf_k=K)
    base = fused_rank(4, [1, 2, 3], [3, 4], CONFIGURED, K)
    assert base is not None
    expected = [1 / fused_rank(4, [1, 2, 3], [3, 4], s, K) - 1 / base for s in SHARES]  # type: ignore[operator]
    assert [g.mean for g in state.gains] == pytest.approx(expected)
    assert state.evidence == 1
    # Chunk 4 is found by words only: a high share ranks it lower, so it loses.
    assert state.gains[0].mean >= 0 > state.gains[-1].mean


def test_chunks_neither_list_holds_teach_nothing() -> None:
    assert observe(SplitEvidence(CONFIGURED), [9], [1, 2], [3], rrf_k=K) == SplitEvidence(
        CONFIGURED
    )


def _clear(mean: float, n: int = MIN_EVIDENCE) -> PairedGain:
    """A gain of `mean` on every one of `n` questions but one, which gained nothing."""
    gain = PairedGain()
    for i in range(n):
        gain = gain.add(mean if i else 0.0)
    return gain


def test_the_configured_split_stays_until_a_split_is_clearly_better() -> None:
    few = SplitEvidence(
        CONFIGURED, GridEvidence(SHARES, (_clear(0.3, MIN_EVIDENCE - 1),) + (PairedGain(),) * 6)
    )
    assert best_share(few) == CONFIGURED
    enough = SplitEvidence(CONFIGURED, GridEvidence(SHARES, (_clear(0.3),) + (PairedGain(),) * 6))
    assert best_share(enough) == SHARES[0]


def test_mixed_evidence_keeps_the_configured_split() -> None:
    # A mean gain of 0.01 with gains of +-0.5: nowhere near two standard errors.
    gain = PairedGain()
    for i in range(200):
        gain = gain.add(0.51 if i % 2 else -0.49)
    assert gain.mean == pytest.approx(0.01)
    assert (
        best_share(SplitEvidence(CONFIGURED, GridEvidence(SHARES, (gain,) * len(SHARES))))
        == CONFIGURED
    )


def test_among_clearly_better_splits_the_best_mean_wins_ties_to_the_closest() -> None:
    gains = [PairedGain()] * len(SHARES)
    gains[1], gains[5] = _clear(0.2), _clear(0.4)
    assert best_share(SplitEvidence(CONFIGURED, GridEvidence(SHARES, tuple(gains)))) == SHARES[5]
    tied = [_clear(0.2)] * len(SHARES)
    assert best_share(SplitEvidence(CONFIGURED, GridEvidence(SHARES, tuple(tied)))) == 0.4
    assert best_share(SplitEvidence(0.66, GridEvidence(SHARES, tuple(tied)))) == 0.7


def test_the_split_moves_towards_the_list_that_finds_what_agents_cite() -> None:
    words_find = SplitEvidence(0.5)
    vectors_find = SplitEvidence(0.5)
    for i in range(3 * MIN_EVIDENCE):
        # The cited chunk is second in one list and absent from the other; now and then
        # both lists rank it alike, so the gains vary.
        if i % 3:
            words_find = observe(words_find, [5], [1, 2, 3], [8, 5], rrf_k=K)
            vectors_find = observe(vectors_find, [5], [8, 5], [1, 2, 3], rrf_k=K)
        else:
            words_find = observe(words_find, [5], [5, 1], [5, 8], rrf_k=K)
            vectors_find = observe(vectors_find, [5], [5, 1], [5, 8], rrf_k=K)
    assert best_share(words_find) < 0.5
    assert best_share(vectors_find) > 0.5
    # Where every split ranks it alike, nothing moves.
    same = SplitEvidence(CONFIGURED)
    for _ in range(MIN_EVIDENCE):
        same = observe(same, [1], [1, 2], [1, 3], rrf_k=K)
    assert best_share(same) == CONFIGURED


def test_evidence_against_another_configured_split_starts_again() -> None:
    learned = observe(SplitEvidence(0.5), [4], [1, 2, 3], [3, 4], rrf_k=K)
    stored = learned.to_json()
    assert SplitEvidence.from_json(stored, 0.5) == learned
    assert SplitEvidence.from_json(stored, CONFIGURED) == SplitEvidence(CONFIGURED)


def test_split_keeps_the_total_weight() -> None:
    assert split_weights(0.25, 2.0) == (0.5, 1.5)


@given(
    st.lists(st.integers(0, 30), max_size=5),
    st.lists(st.integers(0, 30), unique=True, max_size=20),
    st.lists(st.integers(0, 30), unique=True, max_size=20),
)
def test_any_evidence_leaves_gains_in_range_and_a_share_on_the_grid_or_configured(
    cited: list[int], vectors: list[int], words: list[int]
) -> None:
    state = SplitEvidence(0.5)
    for _ in range(3 * MIN_EVIDENCE):
        state = observe(state, cited, vectors, words, rrf_k=K)
    assert all(-1.0 <= g.mean <= 1.0 and math.isfinite(g.variance) for g in state.gains)
    assert best_share(state) in (*SHARES, 0.5)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: observe(SplitEvidence(0.5), [], [], [], rrf_k=math.nan), "rrf_k"),
        (lambda: SplitEvidence(0.5, GridEvidence((0.5,))), "shares"),
        (lambda: SplitEvidence(1.5), "share"),
        (lambda: SplitEvidence.from_json({"configured": 0.5}, 0.5), "no gains"),
        (
            lambda: SplitEvidence.from_json(
                {"configured": 0.5, "grid": list(SHARES), "gains": [[1, 5, 0]] * len(SHARES)}, 0.5
            ),
            "mean",
        ),
        (lambda: split_weights(1.5, 1.0), "share"),
    ],
)
def test_bad_parameters_are_named(call: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidFusion, match=message):
        call()
