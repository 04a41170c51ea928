"""Cosine distance over [0, 2] and the Gaussian kernel."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.kernel import InvalidKernelInput, cosine_distance, gaussian_kernel


def test_kernel_is_one_at_zero_distance() -> None:
    assert gaussian_kernel(0.0, 0.3) == 1.0


def test_kernel_at_one_sigma_is_exp_minus_half() -> None:
    assert gaussian_kernel(0.15, 0.15) == pytest.approx(math.exp(-0.5), rel=1e-15)


def test_kernel_handles_negative_cosine_distances() -> None:
    # all-MiniLM-L6-v2 gives cosine -0.25 for unrelated sentences: d = 1.25.
    far = gaussian_kernel(1.25, 0.5)
    assert far == pytest.approx(math.exp(-(1.25**2) / (2 * 0.25)))
    assert 0.0 < far < gaussian_kernel(1.0, 0.5)
    assert gaussian_kernel(2.0, 0.5) == pytest.approx(math.exp(-8.0))
    assert gaussian_kernel(2.0, 0.05) == 0.0


@given(
    st.floats(0.0, 2.0),
    st.floats(0.0, 2.0),
    st.floats(0.01, 1.0),
)
@settings(max_examples=200, deadline=None)
def test_kernel_is_monotone_and_bounded(near: float, far: float, sigma: float) -> None:
    near, far = sorted((near, far))
    assert 0.0 <= gaussian_kernel(far, sigma) <= gaussian_kernel(near, sigma) <= 1.0


@pytest.mark.parametrize("sigma", [0.0, -0.3, math.nan, math.inf])
def test_kernel_rejects_bad_sigma(sigma: float) -> None:
    with pytest.raises(InvalidKernelInput, match="sigma must be > 0"):
        gaussian_kernel(0.5, sigma)


def test_kernel_rejects_nan_distance() -> None:
    with pytest.raises(InvalidKernelInput, match="distance is NaN"):
        gaussian_kernel(math.nan, 0.3)


def test_cosine_distance_spans_zero_to_two() -> None:
    x = np.array([1.0, 0.0], dtype=np.float32)
    assert cosine_distance(x, x) == 0.0
    assert cosine_distance(x, np.array([0.0, 1.0], dtype=np.float32)) == 1.0
    assert cosine_distance(x, -x) == 2.0
    negative = np.array([-0.25, math.sqrt(1 - 0.25**2)])
    assert cosine_distance(x, negative) == pytest.approx(1.25)


def test_cosine_distance_clips_rounding_outside_the_range() -> None:
    slightly_long = np.array([1.0 + 1e-7, 0.0])
    assert cosine_distance(slightly_long, slightly_long) == 0.0
    assert cosine_distance(slightly_long, -slightly_long) == 2.0


def test_cosine_distance_rejects_mismatched_shapes() -> None:
    with pytest.raises(InvalidKernelInput, match=r"shapes \(2,\) and \(3,\)"):
        cosine_distance(np.zeros(2), np.zeros(3))


def test_cosine_distance_rejects_nan() -> None:
    with pytest.raises(InvalidKernelInput, match="NaN"):
        cosine_distance(np.array([math.nan, 0.0]), np.array([1.0, 0.0]))
