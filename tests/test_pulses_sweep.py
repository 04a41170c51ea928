"""Half-life downscaling and the per-kind percentile sweep plan (the cold tier).

One file: it tests one pure module, pulses/sweep.py, whose downscale, plan and spare build
on each other, with shared candidate builders.
"""

from __future__ import annotations

import math
import random
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.constants import EPSILON
from dreamcycle.pulses.information import information_content
from dreamcycle.pulses.sweep import (
    DEFAULT_MIN_POPULATION,
    InvalidSweep,
    SweepCandidate,
    SweepMix,
    percentile_ranks,
    plan_sweep,
    spare,
)

DAY_S = 86_400.0


# ---- percentile_ranks and information_content ------------------------------------------


def test_percentile_ranks_share_ties() -> None:
    assert percentile_ranks([3, 1, 1, 2]) == pytest.approx([1.0, 1 / 6, 1 / 6, 2 / 3])
    assert percentile_ranks([0.2, 0.1, 0.3]) == pytest.approx([0.5, 0.0, 1.0])
    assert percentile_ranks([4, 4, 4]) == [0.5, 0.5, 0.5]
    assert percentile_ranks([9.0]) == [0.5]
    assert percentile_ranks([]) == []


def _ranks_by_hand(values: list[float], tolerance: float) -> list[float]:
    """relative_ties then percentile_ranks, written out with Python's stable sort."""
    order = sorted(range(len(values)), key=values.__getitem__)
    tied = list(values)
    start = 0
    while start < len(order):
        anchor = values[order[start]]
        end = start
        while end < len(order) and values[order[end]] <= anchor * (1.0 + tolerance):
            tied[order[end]] = anchor
            end += 1
        start = end
    ranked = sorted(tied)
    return [
        (ranked.index(v) + len(ranked) - 1 - ranked[::-1].index(v)) / 2 / (len(ranked) - 1)
        for v in tied
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.sampled_from([0.0, 0.1, 0.1 * (1 + 1e-12), 0.3, 0.3 * (1 + 5e-9), 0.7]),
        min_size=2,
        max_size=40,
    )
)
def test_salience_ranks_from_one_sort_are_the_ranks_of_its_ties(values: list[float]) -> None:
    """The sweep sorts saliences once, for their ties and their ranks; that sort is not
    stable. Runs of near-equal values and repeated ones must rank as written out by hand."""
    tolerance = 1e-9
    pool = [
        SweepCandidate(label=n, salience=v, pinned=False, protected=False)
        for n, v in enumerate(values)
    ]
    only_salience = SweepMix(salience=1.0, information=0.0, importance=0.0)
    plan = plan_sweep(pool, min_population=0, mix=only_salience, tolerance=tolerance)
    assert [plan.values[n] for n in range(len(values))] == pytest.approx(
        _ranks_by_hand(values, tolerance)
    )


def test_information_content_by_hand() -> None:
    texts = ["thanks ok thanks", "Kubernetes ingress, TLS!", "Thanks. OK?", ""]
    # Four documents; "thanks" and "ok" are in two, the rest in one; words count once per text.
    common = math.log(5 / 2.5)
    rare = math.log(5 / 1.5)
    info = information_content(texts)
    assert info == pytest.approx([2 * common, 3 * rare, 2 * common, 0.0])
    assert info[1] > info[0]
    assert information_content([]) == []


def test_rare_words_score_higher_than_acknowledgements() -> None:
    texts = ["thanks ok thanks", "ok thanks", "thanks", "the zfs arc evicts l2arc headers"]
    info = information_content(texts)
    assert info[3] > max(info[:3])
    assert info[0] == pytest.approx(info[1])


# ---- plan_sweep -----------------------------------------------------------------


def candidates(saliences: list[float], **flags: bool) -> list[SweepCandidate]:
    return [
        SweepCandidate(
            label=label,
            salience=value,
            pinned=flags.get("pinned", False),
            protected=flags.get("protected", False),
        )
        for label, value in enumerate(saliences)
    ]


def test_bottom_sixty_percent_is_doomed() -> None:
    # One kind, equal information and importance: value = 0.5 * salience rank + 0.25.
    saliences = [(label * 37 % 200) / 200 for label in range(200)]
    plan = plan_sweep(candidates(saliences))
    assert plan.skipped_reason is None and plan.threshold is not None
    assert plan.population == 200
    # The 60th percentile of ranks k / 199 sits at k = 119.4: 0.5 * 0.6 + 0.25.
    assert plan.threshold == pytest.approx(0.55)
    assert plan.thresholds == {"note": pytest.approx(0.55)}
    assert len(plan.doomed) == 120
    assert list(plan.doomed) == sorted(plan.doomed)
    assert set(plan.doomed) == {label for label, s in enumerate(saliences) if s < 0.6}
    assert all(plan.values[label] < plan.threshold for label in plan.doomed)
    assert plan.already_cold == 0


def test_value_mixes_within_kind_ranks_and_threshold_interpolates_linearly() -> None:
    pool = [
        SweepCandidate(
            label=n, salience=s, pinned=False, protected=False, information=i, importance=m
        )
        for n, (s, i, m) in enumerate([(0.0, 0.0, 1), (1.0, 3.0, 1), (2.0, 1.0, 9), (3.0, 2.0, 5)])
    ]
    # Ranks: salience [0, 1/3, 2/3, 1]; information [0, 1, 1/3, 2/3]; importance
    # [1/6, 1/6, 1, 2/3]. Values = 0.5 s + 0.4 i + 0.1 m = [1, 35, 34, 50] / 60.
    plan = plan_sweep(pool, percentile=50.0, min_population=0)
    assert plan.values == pytest.approx({0: 1 / 60, 1: 35 / 60, 2: 34 / 60, 3: 50 / 60})
    assert plan.threshold == pytest.approx(34.5 / 60)
    # Position 0.75 between 1/60 and 34/60.
    quarter = plan_sweep(pool, percentile=25.0, min_population=0)
    assert quarter.threshold == pytest.approx((1 + 0.75 * 33) / 60)
    # Four chunks are below MIN_KIND_POPULATION: the kind is valued but not swept.
    assert plan.thresholds == {} and plan.doomed == ()


def test_a_custom_mix_ranks_by_salience_alone() -> None:
    pool = [
        SweepCandidate(label=n, salience=n / 10, pinned=False, protected=False, information=-n)
        for n in range(10)
    ]
    only_salience = SweepMix(salience=1.0, information=0.0, importance=0.0)
    plan = plan_sweep(pool, percentile=50.0, min_population=0, mix=only_salience)
    assert plan.values == pytest.approx({n: n / 9 for n in range(10)})
    assert plan.thresholds == {"note": pytest.approx(0.5)}
    assert plan.doomed == (0, 1, 2, 3, 4)
    # Information alone reverses the order (information = -label).
    only_information = SweepMix(salience=0.0, information=2.0, importance=0.0)
    reverse = plan_sweep(pool, percentile=50.0, min_population=0, mix=only_information)
    assert reverse.doomed == (5, 6, 7, 8, 9)


@pytest.mark.parametrize(
    "mix",
    [
        SweepMix(salience=-0.1),
        SweepMix(information=math.nan),
        SweepMix(importance=math.inf),
        SweepMix(salience=0.0, information=0.0, importance=0.0),
    ],
)
def test_a_bad_mix_is_refused(mix: SweepMix) -> None:
    with pytest.raises(InvalidSweep, match="sweep mix shares must be >= 0 and not all 0"):
        plan_sweep(candidates([0.5] * 20), min_population=0, mix=mix)


def test_ties_at_the_threshold_survive() -> None:
    plan = plan_sweep(candidates([0.5] * 150))
    assert plan.threshold == pytest.approx(0.5)
    assert plan.thresholds == {"note": pytest.approx(0.5)}
    assert list(plan.values.values()) == pytest.approx([0.5] * 150)
    assert plan.doomed == ()


def test_cold_database_is_not_swept() -> None:
    plan = plan_sweep(candidates([0.1] * 99))
    assert plan == type(plan)(
        threshold=None,
        population=99,
        doomed=(),
        skipped_reason=f"population 99 below minimum {DEFAULT_MIN_POPULATION}",
    )


def test_pinned_and_protected_are_never_doomed_nor_counted() -> None:
    sweepable = candidates([0.2 + i / 1000 for i in range(150)])
    keepers = [
        SweepCandidate(label=1000, salience=0.0, pinned=True, protected=False),
        SweepCandidate(label=1001, salience=0.0, pinned=False, protected=True),
        SweepCandidate(label=1002, salience=0.0, pinned=True, protected=True),
    ]
    plan = plan_sweep(sweepable + keepers)
    alone = plan_sweep(sweepable)
    assert plan.population == 150
    assert plan.threshold == alone.threshold
    assert plan.doomed == alone.doomed and len(plan.doomed) == 90
    assert not {1000, 1001, 1002} & set(plan.doomed)
    assert not {1000, 1001, 1002} & set(plan.values)
    only_keepers = plan_sweep(keepers, min_population=0)
    assert only_keepers.doomed == () and only_keepers.skipped_reason == "no sweepable chunks"


def test_cold_chunks_count_but_are_never_doomed_again() -> None:
    saliences = [n / 100 for n in range(100)]
    live = candidates(saliences)
    # The bottom 30 already went cold at an earlier sweep.
    pool = [replace(c, cold=c.label < 30) for c in live]
    plan = plan_sweep(pool)
    assert plan.population == 100
    assert plan.already_cold == 30
    assert plan.threshold == plan_sweep(live).threshold
    # 60 % of 100 are below the threshold; 30 of them are cold already.
    assert plan.doomed == tuple(range(30, 60))
    assert plan_sweep(live).doomed == tuple(range(60))


def test_cold_count_is_reported_when_the_sweep_is_skipped() -> None:
    pool = [replace(c, cold=c.label < 5) for c in candidates([0.1] * 50)]
    plan = plan_sweep(pool)
    assert plan.skipped_reason is not None and plan.already_cold == 5


def test_ineligible_chunks_count_but_are_never_doomed() -> None:
    saliences = [n / 100 for n in range(100)]
    live = candidates(saliences)
    # The 30 least salient are still in their grace period.
    pool = [replace(c, eligible=c.label >= 30) for c in live]
    plan = plan_sweep(pool)
    assert plan.population == 100
    assert plan.threshold == plan_sweep(live).threshold
    assert plan.doomed == tuple(range(30, 60))
    assert plan.already_cold == 0


def two_kinds(fast_scale: float, seed: int) -> list[SweepCandidate]:
    rng = random.Random(seed)
    pool = []
    for n in range(200):
        kind = "fast" if n % 2 else "slow"
        salience = rng.random() * (fast_scale if kind == "fast" else 1.0)
        pool.append(
            SweepCandidate(
                label=n,
                salience=salience,
                pinned=False,
                protected=False,
                kind=kind,
                information=rng.random(),
                importance=rng.randint(1, 10),
            )
        )
    return pool


def doomed_by_kind(pool: list[SweepCandidate], doomed: tuple[int, ...]) -> dict[str, int]:
    counts = dict.fromkeys(sorted({c.kind for c in pool}), 0)
    gone = set(doomed)
    for candidate in pool:
        counts[candidate.kind] += candidate.label in gone
    return counts


@pytest.mark.parametrize("seed", range(5))
def test_a_fast_decaying_kind_loses_the_same_share_not_everything(seed: int) -> None:
    pool = two_kinds(fast_scale=0.01, seed=seed)
    plan = plan_sweep(pool)
    counts = doomed_by_kind(pool, plan.doomed)
    # A single salience percentile would take nearly all of "fast" and little of "slow".
    assert 54 <= counts["fast"] <= 66 and 54 <= counts["slow"] <= 66
    assert set(plan.thresholds) == {"fast", "slow"}
    assert plan.population == 200


def test_rank_within_kind_is_exactly_scale_free_without_quantisation() -> None:
    slow = [
        SweepCandidate(label=n, salience=(n + 1) / 100, pinned=False, protected=False, kind="slow")
        for n in range(100)
    ]
    fast = [replace(c, label=c.label + 100, kind="fast", salience=c.salience / 100) for c in slow]
    plan = plan_sweep(slow + fast, tolerance=0.0)
    assert doomed_by_kind(slow + fast, plan.doomed) == {"fast": 60, "slow": 60}
    assert plan.thresholds["fast"] == plan.thresholds["slow"]
    assert plan.doomed == tuple(range(60)) + tuple(range(100, 160))


def test_a_kind_below_its_minimum_population_is_not_swept() -> None:
    main = candidates([n / 100 for n in range(100)])
    rare = [
        SweepCandidate(label=500 + n, salience=n / 1000, pinned=False, protected=False, kind="rare")
        for n in range(9)
    ]
    plan = plan_sweep(main + rare)
    assert plan.population == 109
    assert set(plan.thresholds) == {"note"}
    assert not set(plan.doomed) & {c.label for c in rare}
    assert {c.label for c in rare} <= set(plan.values)
    assert plan.doomed == plan_sweep(main).doomed
    # One more and it is swept: its bottom 60 %, by its own ranks.
    rare.append(SweepCandidate(label=509, salience=0.5, pinned=False, protected=False, kind="rare"))
    swept = plan_sweep(main + rare)
    assert set(swept.thresholds) == {"note", "rare"}
    assert set(swept.doomed) & {c.label for c in rare} == set(range(500, 506))


def test_overall_threshold_is_the_percentile_of_all_values() -> None:
    pool = two_kinds(fast_scale=0.01, seed=7)
    plan = plan_sweep(pool)
    assert plan.threshold == pytest.approx(np.percentile(list(plan.values.values()), 60.0))
    assert sorted(plan.values) == list(range(200))


@pytest.mark.parametrize("percentile", [0.0, 100.0, -1.0, 150.0, math.nan, math.inf])
def test_percentile_must_be_strictly_inside(percentile: float) -> None:
    with pytest.raises(InvalidSweep, match="strictly between 0 and 100"):
        plan_sweep(candidates([0.5]), percentile=percentile)


def test_min_population_must_be_a_non_negative_integer() -> None:
    with pytest.raises(InvalidSweep, match="min_population must be >= 0, got -1"):
        plan_sweep(candidates([0.5]), min_population=-1)
    with pytest.raises(InvalidSweep, match="min_population must be an integer"):
        plan_sweep(candidates([0.5]), min_population=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidSweep, match="min_population must be an integer"):
        plan_sweep(candidates([0.5]), min_population=True)


def test_bad_candidates_are_named() -> None:
    with pytest.raises(InvalidSweep, match="label 0 appears twice"):
        plan_sweep(candidates([0.5]) * 2, min_population=0)
    with pytest.raises(InvalidSweep, match="candidate 1 has non-finite salience nan"):
        plan_sweep(candidates([0.5, math.nan]), min_population=0)


@given(
    st.lists(
        st.tuples(
            st.floats(0.0, 1.0),  # salience
            st.booleans(),  # pinned
            st.booleans(),  # protected
            st.sampled_from(["note", "fact", "rare"]),
            st.floats(0.0, 10.0),  # information
            st.integers(1, 10),  # importance
            st.booleans(),  # cold
            st.booleans(),  # eligible
        ),
        min_size=0,
        max_size=300,
    ),
    st.floats(1.0, 99.0),
)
@settings(max_examples=100, deadline=None)
def test_plan_partitions_the_sweepable_chunks(
    rows: list[tuple[float, bool, bool, str, float, int, bool, bool]], percentile: float
) -> None:
    pool = [
        SweepCandidate(
            label=label,
            salience=s,
            pinned=pinned,
            protected=protected,
            kind=kind,
            information=info,
            importance=importance,
            cold=cold,
            eligible=eligible,
        )
        for label, (s, pinned, protected, kind, info, importance, cold, eligible) in enumerate(rows)
    ]
    plan = plan_sweep(pool, percentile=percentile, min_population=10)
    sweepable = [c for c in pool if c.sweepable]
    assert plan.population == len(sweepable)
    assert plan.already_cold == sum(c.cold for c in sweepable)
    if plan.threshold is None:
        assert plan.doomed == () and len(sweepable) < 10
        return
    assert set(plan.values) == {c.label for c in sweepable}
    assert all(0.0 <= v <= 1.0 for v in plan.values.values())
    assert plan.threshold == pytest.approx(np.percentile(list(plan.values.values()), percentile))
    sizes = {kind: sum(c.kind == kind for c in sweepable) for kind in {"note", "fact", "rare"}}
    assert set(plan.thresholds) == {kind for kind, size in sizes.items() if size >= 10}
    doomed = set(plan.doomed)
    assert list(plan.doomed) == sorted(doomed)
    for candidate in pool:
        if candidate.label in doomed:
            assert candidate.sweepable and not candidate.cold and candidate.eligible
            assert plan.values[candidate.label] < plan.thresholds[candidate.kind]
        elif (
            candidate.sweepable
            and candidate.kind in plan.thresholds
            and not candidate.cold
            and candidate.eligible
        ):
            assert plan.values[candidate.label] >= plan.thresholds[candidate.kind] - 1e-9
    # Never a whole kind, and never more than its bottom share (ties survive).
    for kind, threshold in plan.thresholds.items():
        group = [c for c in sweepable if c.kind == kind]
        below = sum(plan.values[c.label] < threshold for c in group)
        assert sum(c.label in doomed for c in group) <= below < len(group)


def test_differences_below_the_tolerance_doom_nothing() -> None:
    # Chunks ingested seconds apart differ by ~1e-8 after decay: no pulse made that difference.
    candidates = [
        SweepCandidate(label=i, salience=0.5 + i * 1e-8, pinned=False, protected=False)
        for i in range(200)
    ]
    assert plan_sweep(candidates).doomed == ()
    assert plan_sweep(candidates).values == {i: pytest.approx(0.5) for i in range(200)}
    assert len(plan_sweep(candidates, tolerance=0.0).doomed) == 120


def test_differences_above_the_tolerance_still_split() -> None:
    pool = [
        SweepCandidate(label=i, salience=0.5 + i * 2e-3, pinned=False, protected=False)
        for i in range(100)
    ]
    assert plan_sweep(pool).doomed == tuple(range(60))
    # A coarser quantum merges neighbours: ties share their rank and are not split.
    coarse = plan_sweep(pool, tolerance=0.1)
    assert len(set(coarse.values.values())) < 100
    assert len(coarse.doomed) < 60


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(InvalidSweep, match="tolerance"):
        plan_sweep([], tolerance=-1.0)
    with pytest.raises(InvalidSweep, match="tolerance"):
        plan_sweep([], tolerance=math.nan)


# ---- spare ----------------------------------------------------------------------------


def test_spare_removes_labels_from_the_plan_and_returns_them() -> None:
    plan = plan_sweep(candidates([n / 100 for n in range(100)]))
    assert plan.doomed == tuple(range(60))
    spared_plan, spared = spare(plan, [3, 59, 60, 1234, 3])
    assert spared == (3, 59)
    assert spared_plan.doomed == tuple(n for n in range(60) if n not in {3, 59})
    assert spared_plan.threshold == plan.threshold and spared_plan.values == plan.values
    assert plan.doomed == tuple(range(60))  # the original plan is unchanged
    same, none = spare(plan, [60, 99])
    assert same is plan and none == ()
    assert spare(plan, [])[1] == ()


# ---- repeated sweeps of a static corpus ---------------------------------------------------


def static_corpus(seed: int) -> list[SweepCandidate]:
    rng = random.Random(seed)
    return [
        SweepCandidate(
            label=n,
            salience=rng.randint(1, 1_000_000) / 1_000_000,
            pinned=False,
            protected=False,
            kind="slow" if n % 2 else "fast",
            information=rng.random() * 10,
            importance=rng.randint(1, 10),
        )
        for n in range(300)
    ]


def sweep_repeatedly(
    pool: list[SweepCandidate], sweeps: int, decay: dict[str, float], tolerance: float
) -> list[int]:
    """Cold count after each sweep; between sweeps each kind decays by its own factor."""
    cold_counts = []
    for _ in range(sweeps):
        doomed = set(plan_sweep(pool, tolerance=tolerance).doomed)
        pool = [replace(c, cold=c.cold or c.label in doomed) for c in pool]
        cold_counts.append(sum(c.cold for c in pool))
        pool = [replace(c, salience=c.salience * decay[c.kind]) for c in pool]
    return cold_counts


@pytest.mark.parametrize("seed", range(3))
def test_repeated_sweeps_of_a_static_corpus_settle(seed: int) -> None:
    cold_counts = sweep_repeatedly(
        static_corpus(seed), 20, {"slow": 0.9, "fast": 0.5}, tolerance=EPSILON
    )
    assert cold_counts[0] == 180
    assert cold_counts[-1] == cold_counts[0]
    assert cold_counts == [cold_counts[0]] * 20


@pytest.mark.parametrize("seed", range(3))
def test_repeated_sweeps_settle_without_quantisation(seed: int) -> None:
    # The rank rule itself is scale-free: with no quantum, only the first sweep dooms.
    cold_counts = sweep_repeatedly(
        static_corpus(seed), 20, {"slow": 0.9, "fast": 0.5}, tolerance=0.0
    )
    assert cold_counts == [180] * 20


def test_repeated_sweeps_without_decay_settle() -> None:
    assert sweep_repeatedly(static_corpus(11), 5, {"slow": 1.0, "fast": 1.0}, EPSILON) == [180] * 5


@given(
    st.lists(
        st.tuples(st.integers(1, 10**6), st.floats(0.0, 10.0), st.integers(1, 10)),
        min_size=60,
        max_size=300,
    ),
    st.floats(0.3, 1.0),
    st.floats(0.3, 1.0),
)
@settings(max_examples=15, deadline=None)
def test_repeated_sweeps_settle_for_any_corpus_without_quantisation(
    rows: list[tuple[int, float, int]], slow: float, fast: float
) -> None:
    pool = [
        SweepCandidate(
            label=n,
            salience=s / 10**6,
            pinned=False,
            protected=False,
            kind="slow" if n % 2 else "fast",
            information=info,
            importance=importance,
        )
        for n, (s, info, importance) in enumerate(rows)
    ]
    cold_counts = sweep_repeatedly(pool, 10, {"slow": slow, "fast": fast}, tolerance=0.0)
    assert cold_counts == [cold_counts[0]] * 10
