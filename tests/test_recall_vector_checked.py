"""A vector given to recall by is scaled to unit length whatever its magnitude, and refused
only when it has no direction."""

from __future__ import annotations

import numpy as np
import pytest

from dreamcycle.daemon.api.read_operations import _given_vector

DIM = 8


@pytest.mark.parametrize("magnitude", [1e-30, 1e-3, 1.0, 1e30, 1e300])
def test_any_finite_magnitude_gives_the_same_unit_vector(magnitude: float) -> None:
    direction = np.arange(1, DIM + 1, dtype=np.float64)
    unit = _given_vector([float(x) * magnitude for x in direction], DIM)
    assert unit.dtype == np.float32
    expected = direction / np.linalg.norm(direction)
    np.testing.assert_allclose(unit, expected, rtol=1e-6)


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([0.0] * DIM, "not all zeros"),
        ([float("nan")] + [1.0] * (DIM - 1), "finite"),
        ([float("inf")] + [1.0] * (DIM - 1), "finite"),
        ([1.0] * (DIM - 1), f"this model's have {DIM}"),
    ],
)
def test_a_vector_without_a_direction_or_of_another_width_is_refused(
    values: list[float], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        _given_vector(values, DIM)
