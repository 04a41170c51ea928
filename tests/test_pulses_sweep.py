"""Half-life downscaling and the percentile sweep plan."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pulses.sweep import (
    DEFAULT_MIN_POPULATION,
    InvalidSweep,
    SweepCandidate,
    downscale,
    plan_sweep,
)

DAY_S = 86_400.0


# ---- downscale ------------------------------------------------------------------


def test_one_half_life_halves_and_two_quarter() -> None:
    assert downscale(0.8, 0.0, DAY_S, DAY_S) == pytest.approx(0.4)
    assert downscale(0.8, 0.0, 2 * DAY_S, DAY_S) == pytest.approx(0.2)
    assert downscale(0.8, 0.0, DAY_S / 2, DAY_S) == pytest.approx(0.8 / math.sqrt(2))


def test_pinned_chunk_decays_only_to_its_floor() -> None:
    assert downscale(0.9, 0.7, DAY_S, DAY_S) == 0.7
    assert downscale(0.9, 0.7, 0.1 * DAY_S, DAY_S) == pytest.approx(0.9 * 0.5**0.1)
    assert downscale(0.9, 0.0, math.inf, DAY_S) == 0.0


@pytest.mark.parametrize(
    ("elapsed_s", "half_life_s"),
    [(DAY_S, 0.0), (DAY_S, -1.0), (DAY_S, math.inf), (0.0, DAY_S), (-5.0, DAY_S)],
)
def test_no_decay_cases_leave_salience_unchanged(elapsed_s: float, half_life_s: float) -> None:
    assert downscale(0.63, 0.1, elapsed_s, half_life_s) == 0.63


@pytest.mark.parametrize("field", ["salience", "pin_floor", "elapsed_s", "half_life_s"])
def test_downscale_rejects_nan(field: str) -> None:
    args = {"salience": 0.5, "pin_floor": 0.0, "elapsed_s": 10.0, "half_life_s": 100.0}
    args[field] = math.nan
    with pytest.raises(InvalidSweep, match=f"{field} is NaN"):
        downscale(**args)


@given(
    st.floats(0.0, 1.0),
    st.floats(0.0, 1.0),
    st.floats(0.0, 1e9),
    st.floats(1.0, 1e8),
)
@settings(max_examples=200, deadline=None)
def test_downscale_never_raises_salience_or_crosses_the_floor(
    salience: float, floor: float, elapsed_s: float, half_life_s: float
) -> None:
    salience = max(salience, floor)
    after = downscale(salience, floor, elapsed_s, half_life_s)
    assert floor <= after <= salience


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
    saliences = [(label * 37 % 200) / 200 for label in range(200)]
    plan = plan_sweep(candidates(saliences))
    assert plan.skipped_reason is None and plan.threshold is not None
    assert plan.population == 200
    assert plan.threshold == pytest.approx(np.percentile(saliences, 60.0))
    assert len(plan.doomed) == 120
    assert list(plan.doomed) == sorted(plan.doomed)
    assert all(saliences[label] < plan.threshold for label in plan.doomed)


def test_threshold_interpolates_linearly() -> None:
    plan = plan_sweep(candidates([0.0, 1.0, 2.0, 3.0]), percentile=50.0, min_population=0)
    assert plan.threshold == 1.5
    assert plan.doomed == (0, 1)


def test_ties_at_the_threshold_survive() -> None:
    plan = plan_sweep(candidates([0.5] * 150))
    assert plan.threshold == 0.5
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
    assert plan.population == 150
    assert plan.threshold == plan_sweep(sweepable).threshold
    assert not {1000, 1001, 1002} & set(plan.doomed)
    only_keepers = plan_sweep(keepers, min_population=0)
    assert only_keepers.doomed == () and only_keepers.skipped_reason == "no sweepable chunks"


@pytest.mark.parametrize("percentile", [0.0, 100.0, -1.0, 150.0, math.nan, math.inf])
def test_percentile_must_be_strictly_inside(percentile: float) -> None:
    with pytest.raises(InvalidSweep, match="strictly between 0 and 100"):
        plan_sweep(candidates([0.5]), percentile=percentile)


def test_min_population_must_be_a_non_negative_integer() -> None:
    with pytest.raises(InvalidSweep, match="min_population must be >= 0, got -1"):
        plan_sweep(candidates([0.5]), min_population=-1)
    with pytest.raises(InvalidSweep, match="min_population must be an integer"):
        plan_sweep(candidates([0.5]), min_population=1.5)  # type: ignore[arg-type]


def test_bad_candidates_are_named() -> None:
    with pytest.raises(InvalidSweep, match="label 0 appears twice"):
        plan_sweep(candidates([0.5]) * 2, min_population=0)
    with pytest.raises(InvalidSweep, match="candidate 1 has non-finite salience nan"):
        plan_sweep(candidates([0.5, math.nan]), min_population=0)


@given(
    st.lists(
        st.tuples(st.floats(0.0, 1.0), st.booleans(), st.booleans()), min_size=0, max_size=300
    ),
    st.floats(1.0, 99.0),
)
@settings(max_examples=100, deadline=None)
def test_plan_partitions_the_sweepable_chunks(
    rows: list[tuple[float, bool, bool]], percentile: float
) -> None:
    pool = [
        SweepCandidate(label=label, salience=s, pinned=pinned, protected=protected)
        for label, (s, pinned, protected) in enumerate(rows)
    ]
    plan = plan_sweep(pool, percentile=percentile, min_population=10)
    sweepable = [c for c in pool if not (c.pinned or c.protected)]
    assert plan.population == len(sweepable)
    if plan.threshold is None:
        assert plan.doomed == () and len(sweepable) < 10
        return
    doomed = set(plan.doomed)
    for candidate in pool:
        if candidate.label in doomed:
            assert candidate.salience < plan.threshold
            assert not (candidate.pinned or candidate.protected)
        elif not (candidate.pinned or candidate.protected):
            assert candidate.salience >= plan.threshold


def test_differences_below_the_tolerance_doom_nothing() -> None:
    # Chunks ingested seconds apart differ by ~1e-8 after decay: no pulse made that difference.
    candidates = [
        SweepCandidate(label=i, salience=0.5 + i * 1e-8, pinned=False, protected=False)
        for i in range(200)
    ]
    assert plan_sweep(candidates).doomed == ()
    assert plan_sweep(candidates, tolerance=0.0).doomed != ()


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(InvalidSweep, match="tolerance"):
        plan_sweep([], tolerance=-1.0)
