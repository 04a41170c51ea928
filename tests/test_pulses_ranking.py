"""Recall ranking: reciprocal-rank fusion, bounded salience, learned keys, the cold tier."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.ranking import (
    DEFAULT_COLD_FACTOR,
    DEFAULT_KEY_WEIGHT,
    DEFAULT_RRF_K,
    DEFAULT_SALIENCE_BOUND,
    Candidate,
    InvalidRanking,
    RankingWeights,
    best_labels,
    lexical_ranks,
    rank_candidates,
    reciprocal_rank,
    salience_multiplier,
    vector_similarity,
)

#: The mechanisms under test: salience bounded at 0.1, the cold tier halved, the lists
#: weighted equally so relevance is a plain sum of reciprocal ranks. (The defaults switch
#: the salience factor off, discount the cold tier only a little and weigh cosine at 0.7.)
WEIGHTS = RankingWeights(salience_bound=0.1, cold_factor=0.5, vector_weight=1.0)


def test_defaults_are_the_documented_ones() -> None:
    assert (DEFAULT_RRF_K, DEFAULT_SALIENCE_BOUND, DEFAULT_KEY_WEIGHT, DEFAULT_COLD_FACTOR) == (
        60.0,
        0.0,
        0.9,
        0.98,
    )
    assert RankingWeights().overtake_ratio == 1.0  # salience never reorders by default
    assert WEIGHTS.overtake_ratio == pytest.approx(0.9 / 1.1)


# ---- reciprocal-rank fusion -------------------------------------------------------


def test_fusion_scores_by_hand() -> None:
    # Vector order by similarity: 1 (0.9), 4 (key 0.95 * 0.9 = 0.855), 2 (0.8), 3 (0.7).
    pool = [
        Candidate(label=1, cosine=0.9, salience=0.5, lexical_rank=2),
        Candidate(label=2, cosine=0.8, salience=0.5, lexical_rank=1),
        Candidate(label=3, cosine=0.7, salience=0.5),
        Candidate(label=4, cosine=0.2, salience=0.5, lexical_rank=3, key_similarity=0.95),
    ]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [1, 2, 4, 3]
    by_label = {r.label: r for r in ranked}
    assert by_label[1].relevance == pytest.approx(1 / 61 + 1 / 62)
    assert by_label[2].relevance == pytest.approx(1 / 63 + 1 / 61)
    assert by_label[4].relevance == pytest.approx(1 / 62 + 1 / 63)
    assert by_label[3].relevance == pytest.approx(1 / 64)
    assert [by_label[n].vector_rank for n in (1, 2, 3, 4)] == [1, 3, 4, 2]
    assert [by_label[n].lexical_rank for n in (1, 2, 3, 4)] == [2, 1, None, 3]
    assert by_label[4].similarity == pytest.approx(0.855)
    assert by_label[3].similarity == 0.7
    # Neutral salience: score equals relevance.
    for r in ranked:
        assert r.score == pytest.approx(r.relevance)
        assert r.cold is False


def test_fusion_weights_scale_each_list() -> None:
    pool = [
        Candidate(label=1, cosine=0.9, salience=0.5, lexical_rank=3),
        Candidate(label=2, cosine=0.1, salience=0.5, lexical_rank=1),
        Candidate(label=3, cosine=0.5, salience=0.5, lexical_rank=2),
    ]
    weights = RankingWeights(rrf_k=10.0, lexical_weight=2.0, vector_weight=0.5)
    by_label = {r.label: r for r in rank_candidates(pool, weights)}
    assert by_label[1].relevance == pytest.approx(0.5 / 11 + 2 / 13)
    assert by_label[2].relevance == pytest.approx(0.5 / 13 + 2 / 11)
    assert by_label[3].relevance == pytest.approx(0.5 / 12 + 2 / 12)
    assert [r.label for r in rank_candidates(pool, weights)] == [2, 3, 1]


def test_only_lexical_hit_still_gets_a_vector_rank() -> None:
    pool = [
        Candidate(label=7, cosine=0.3, salience=0.5),
        Candidate(label=8, cosine=-0.2, salience=0.5, lexical_rank=1),
    ]
    by_label = {r.label: r for r in rank_candidates(pool, WEIGHTS)}
    assert by_label[8].vector_rank == 2
    assert by_label[8].relevance == pytest.approx(1 / 62 + 1 / 61)
    assert by_label[7].relevance == pytest.approx(1 / 61)


def test_reciprocal_rank_and_lexical_ranks() -> None:
    assert reciprocal_rank(None, 60.0) == 0.0
    assert reciprocal_rank(1, 60.0) == pytest.approx(1 / 61)
    assert reciprocal_rank(4, 0.0) == 0.25
    assert lexical_ranks([5, 3, 5, 9]) == {5: 1, 3: 2, 9: 4}
    assert lexical_ranks([]) == {}


# ---- salience ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("salience", "expected"),
    [
        (0.0, 0.9),
        (0.25, 0.95),
        (0.5, 1.0),
        (1.0, 1.1),
        (-3.0, 0.9),
        (7.0, 1.1),
        (math.inf, 1.1),
        (-math.inf, 0.9),
    ],
)
def test_salience_multiplier(salience: float, expected: float) -> None:
    assert salience_multiplier(salience, 0.1) == pytest.approx(expected)


def test_salience_multiplier_with_other_bound() -> None:
    assert salience_multiplier(0.0, 0.4) == pytest.approx(0.6)
    assert salience_multiplier(1.0, 0.4) == pytest.approx(1.4)
    assert salience_multiplier(0.75, 0.4) == pytest.approx(1.2)
    assert salience_multiplier(0.0, 0.0) == 1.0


def test_salience_reorders_close_relevance() -> None:
    # 1 is slightly more relevant; 2 is far more salient and overtakes it.
    pool = [
        Candidate(label=1, cosine=0.9, salience=0.0),
        Candidate(label=2, cosine=0.8, salience=1.0),
    ]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [2, 1]
    assert ranked[0].score == pytest.approx(1.1 / 62)
    assert ranked[1].score == pytest.approx(0.9 / 61)
    assert ranked[0].relevance == pytest.approx(1 / 62)


def test_salience_cannot_overturn_a_clear_relevance_gap() -> None:
    # 1 is in both lists, 2 only last in the vector list: no salience closes that gap.
    pool = [
        Candidate(label=1, cosine=0.9, salience=0.0, lexical_rank=1),
        Candidate(label=2, cosine=0.8, salience=1.0),
    ]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [1, 2]
    assert ranked[0].score == pytest.approx(0.9 * (2 / 61))
    assert ranked[1].score == pytest.approx(1.1 / 62)


# ---- learned keys -----------------------------------------------------------------


def test_key_similarity_used_when_higher_than_cosine() -> None:
    with_key = Candidate(label=1, cosine=0.3, salience=0.5, key_similarity=0.8)
    assert vector_similarity(with_key, 0.9) == pytest.approx(0.72)
    assert vector_similarity(with_key, 0.25) == pytest.approx(0.3)  # 0.2 < 0.3
    pool = [with_key, Candidate(label=2, cosine=0.6, salience=0.5)]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [1, 2]
    assert ranked[0].vector_rank == 1 and ranked[0].similarity == pytest.approx(0.72)
    # With key_weight 0.5 the key gives 0.4 < 0.6: the chunk's own order returns.
    half = rank_candidates(pool, replace(WEIGHTS, key_weight=0.5))
    assert [r.label for r in half] == [2, 1]
    assert half[1].similarity == pytest.approx(0.4)


def test_key_similarity_ignored_when_lower_than_cosine() -> None:
    weak_key = Candidate(label=1, cosine=0.7, salience=0.5, key_similarity=0.5)
    assert vector_similarity(weak_key, 0.9) == 0.7
    pool = [weak_key, Candidate(label=2, cosine=0.65, salience=0.5)]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [1, 2]
    assert ranked[0].similarity == 0.7
    assert vector_similarity(Candidate(label=3, cosine=0.1, salience=0.5), 0.9) == 0.1


# ---- cold tier, ties, top_k ---------------------------------------------------------


def test_cold_chunk_is_multiplied_by_cold_factor() -> None:
    pool = [
        Candidate(label=1, cosine=0.9, salience=0.5, lexical_rank=1, cold=True),
        Candidate(label=2, cosine=0.8, salience=0.5, lexical_rank=2),
    ]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [2, 1]
    cold = ranked[1]
    assert cold.cold is True
    assert cold.relevance == pytest.approx(2 / 61)
    assert cold.score == pytest.approx(0.5 * 2 / 61)
    assert ranked[0].score == pytest.approx(2 / 62)
    # With cold_factor 1 the cold tier is not penalised and relevance wins again.
    assert [r.label for r in rank_candidates(pool, replace(WEIGHTS, cold_factor=1.0))] == [1, 2]


def test_cold_factor_stacks_with_salience() -> None:
    pool = [Candidate(label=1, cosine=0.9, salience=1.0, cold=True)]
    (only,) = rank_candidates(pool, replace(WEIGHTS, cold_factor=0.25))
    assert only.score == pytest.approx(1 / 61 * 1.1 * 0.25)


def test_ties_are_broken_by_smaller_label() -> None:
    # Same cosine: the vector list orders them by label too; the same scores tie at the end.
    pool = [Candidate(label=label, cosine=0.5, salience=0.5) for label in (9, 3, 6)]
    ranked = rank_candidates(pool, WEIGHTS)
    assert [r.label for r in ranked] == [3, 6, 9]
    assert [r.vector_rank for r in ranked] == [1, 2, 3]
    # Exact score ties: vector rank 1 + lexical rank 2 vs vector rank 2 + lexical rank 1.
    swapped = [
        Candidate(label=8, cosine=0.9, salience=0.5, lexical_rank=2),
        Candidate(label=5, cosine=0.8, salience=0.5, lexical_rank=1),
    ]
    ranked = rank_candidates(swapped, WEIGHTS)
    assert ranked[0].score == ranked[1].score
    assert [r.label for r in ranked] == [5, 8]


def test_top_k_cuts_the_list() -> None:
    pool = [Candidate(label=n, cosine=1.0 - n / 10, salience=0.5) for n in range(6)]
    assert [r.label for r in rank_candidates(pool, WEIGHTS, top_k=3)] == [0, 1, 2]
    assert rank_candidates(pool, WEIGHTS, top_k=0) == []
    assert len(rank_candidates(pool, WEIGHTS, top_k=100)) == 6
    assert len(rank_candidates(pool, WEIGHTS)) == 6
    assert rank_candidates([], WEIGHTS) == []


def test_negative_top_k_is_refused() -> None:
    pool = [Candidate(label=n, cosine=1.0 - n / 10, salience=0.5) for n in range(3)]
    with pytest.raises(InvalidRanking, match="top_k"):
        rank_candidates(pool, WEIGHTS, top_k=-1)


# ---- validation -------------------------------------------------------------------


def test_duplicate_label_is_named() -> None:
    pool = [
        Candidate(label=4, cosine=0.1, salience=0.5),
        Candidate(label=4, cosine=0.2, salience=0.5),
    ]
    with pytest.raises(InvalidRanking, match="candidate 4 appears twice"):
        rank_candidates(pool, WEIGHTS)


@pytest.mark.parametrize("cosine", [math.nan, math.inf, -math.inf])
def test_non_finite_cosine_is_named(cosine: float) -> None:
    with pytest.raises(InvalidRanking, match=f"candidate 2 has cosine {cosine}"):
        rank_candidates([Candidate(label=2, cosine=cosine, salience=0.5)], WEIGHTS)


@pytest.mark.parametrize("rank", [0, -1])
def test_lexical_rank_below_one_is_named(rank: int) -> None:
    with pytest.raises(InvalidRanking, match=f"candidate 3 has lexical rank {rank}"):
        rank_candidates([Candidate(label=3, cosine=0.5, salience=0.5, lexical_rank=rank)], WEIGHTS)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (RankingWeights(rrf_k=-1.0), "rrf_k must be finite and >= 0"),
        (RankingWeights(rrf_k=math.nan), "rrf_k must be finite and >= 0"),
        (RankingWeights(rrf_k=math.inf), "rrf_k must be finite and >= 0"),
        (RankingWeights(salience_bound=1.0), r"salience_bound must be in \[0, 1\)"),
        (RankingWeights(salience_bound=-0.1), r"salience_bound must be in \[0, 1\)"),
        (RankingWeights(salience_bound=math.nan), r"salience_bound must be in \[0, 1\)"),
        (RankingWeights(key_weight=1.5), r"key_weight must be in \[0, 1\]"),
        (RankingWeights(key_weight=-0.5), r"key_weight must be in \[0, 1\]"),
        (RankingWeights(cold_factor=0.0), r"cold_factor must be in \(0, 1\]"),
        (RankingWeights(cold_factor=1.5), r"cold_factor must be in \(0, 1\]"),
        (RankingWeights(lexical_weight=-1.0), "lexical_weight must be finite and >= 0"),
        (RankingWeights(vector_weight=math.inf), "vector_weight must be finite and >= 0"),
        (RankingWeights(vector_weight=math.nan), "vector_weight must be finite and >= 0"),
    ],
)
def test_bad_weights_are_named(weights: RankingWeights, message: str) -> None:
    with pytest.raises(InvalidRanking, match=message):
        weights.validate()
    with pytest.raises(InvalidRanking, match=message):
        rank_candidates([Candidate(label=1, cosine=0.5, salience=0.5)], weights)


def test_boundary_weights_are_accepted() -> None:
    RankingWeights(
        rrf_k=0.0,
        salience_bound=0.0,
        key_weight=0.0,
        cold_factor=1.0,
        lexical_weight=0.0,
        vector_weight=0.0,
    ).validate()
    RankingWeights(key_weight=1.0, salience_bound=0.99).validate()


# ---- the two guarantees -------------------------------------------------------------

candidate_rows = st.lists(
    st.tuples(
        st.floats(-1.0, 1.0),  # cosine
        st.floats(-0.5, 1.5),  # salience (clamped)
        st.one_of(st.none(), st.integers(1, 40)),  # lexical rank
        st.one_of(st.none(), st.floats(-1.0, 1.0)),  # key similarity
        st.booleans(),  # cold
    ),
    min_size=0,
    max_size=30,
)


@given(candidate_rows, st.floats(0.0, 0.5), st.floats(0.05, 1.0))
@settings(max_examples=200, deadline=None)
def test_a_chunk_outranks_another_only_with_enough_relevance(
    rows: list[tuple[float, float, int | None, float | None, bool]],
    bound: float,
    cold_factor: float,
) -> None:
    pool = [
        Candidate(label=n, cosine=c, salience=s, lexical_rank=lex, key_similarity=key, cold=cold)
        for n, (c, s, lex, key, cold) in enumerate(rows)
    ]
    weights = RankingWeights(salience_bound=bound, cold_factor=cold_factor)
    ranked = rank_candidates(pool, weights)
    assert sorted(r.label for r in ranked) == list(range(len(pool)))
    ratio = weights.overtake_ratio
    for i, above in enumerate(ranked):
        for below in ranked[i + 1 :]:
            # A cold chunk's score carries cold_factor: account for it on either side.
            factor_above = cold_factor if above.cold else 1.0
            factor_below = cold_factor if below.cold else 1.0
            needed = ratio * below.relevance * factor_below / factor_above
            assert above.relevance >= needed * (1 - 1e-12)
            if not (above.cold or below.cold):
                assert above.relevance >= ratio * below.relevance * (1 - 1e-12)


@given(
    st.lists(st.floats(0.0, 1.0), min_size=19, max_size=19),
    st.lists(st.integers(0, 18), unique=True, max_size=19),
    st.floats(-1.0, -0.01),
)
@settings(max_examples=200, deadline=None)
def test_an_irrelevant_popular_chunk_stays_out_of_the_top_five(
    cosines: list[float], lexical_order: list[int], popular_cosine: float
) -> None:
    # 19 unpopular chunks (salience 0) and one at salience 1.0 that is last by vector and
    # absent from the lexical list: 20 candidates in all.
    lexical = {label: rank for rank, label in enumerate(lexical_order, start=1)}
    pool = [
        Candidate(label=n, cosine=cosine, salience=0.0, lexical_rank=lexical.get(n))
        for n, cosine in enumerate(cosines)
    ]
    popular = Candidate(label=99, cosine=popular_cosine, salience=1.0)
    ranked = rank_candidates([popular, *pool], WEIGHTS)
    assert len(ranked) == 20
    by_label = {r.label: r for r in ranked}
    assert by_label[99].vector_rank == 20
    assert by_label[99].score == pytest.approx(1.1 / 80)
    top5 = rank_candidates([popular, *pool], WEIGHTS, top_k=5)
    assert 99 not in {r.label for r in top5}
    assert len(top5) == 5


@given(
    st.lists(st.integers(-3, 3), min_size=0, max_size=40),
    st.integers(0, 45),
)
def test_best_labels_are_the_highest_scores_with_ties_to_the_lower_label(
    scores: list[int], n: int
) -> None:
    # Few distinct scores, so ties fall at the cut; labels shuffled, so order is by label.
    rng = np.random.default_rng(len(scores) * 100 + n)
    labels = rng.permutation(len(scores)).astype(np.int64) * 3 + 1
    values = np.array(scores, dtype=np.float64) / 4
    expected = [label for _, label in sorted(zip(-values, labels.tolist(), strict=True))][:n]
    assert best_labels(labels, values, n) == expected
