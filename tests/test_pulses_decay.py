"""Time decay (pulses/decay.py): a half-life halves, a pin floor holds, nothing decays
backwards or on NaN."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.decay import downscale
from dreamcycle.pulses.sweep import InvalidSweep

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
