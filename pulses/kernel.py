"""Cosine distance and the Gaussian kernel over it.

Real text embeddings have negative cosine similarity for unrelated texts, so the
distance lives in [0, 2], not the protocol's [0, 1]; both functions accept the full range.
"""

from __future__ import annotations

import math
from typing import Final

import numpy as np
import numpy.typing as npt

#: Bounds of 1 - cosine similarity for unit vectors.
COSINE_DISTANCE_MIN: Final = 0.0
COSINE_DISTANCE_MAX: Final = 2.0


class InvalidKernelInput(ValueError):
    """A kernel or distance argument that would poison salience (NaN, bad width, bad shape)."""


def gaussian_kernel(distance: float, sigma: float) -> float:
    """exp(-d^2 / (2 sigma^2)): 1 at distance 0, falling with width `sigma`."""
    if not (math.isfinite(sigma) and sigma > 0):
        raise InvalidKernelInput(f"kernel sigma must be > 0 and finite, got {sigma}")
    if math.isnan(distance):
        raise InvalidKernelInput("kernel distance is NaN")
    d = float(distance)
    return math.exp(-(d * d) / (2.0 * sigma * sigma))


def cosine_distance(a: npt.ArrayLike, b: npt.ArrayLike) -> float:
    """1 - a.b for unit vectors, clipped to [0, 2] against rounding; computed in float64."""
    left = np.asarray(a, dtype=np.float64)
    right = np.asarray(b, dtype=np.float64)
    if left.ndim != 1 or left.shape != right.shape:
        raise InvalidKernelInput(
            f"cosine_distance needs two vectors of one length, got shapes {left.shape} "
            f"and {right.shape}"
        )
    distance = 1.0 - float(np.dot(left, right))
    if math.isnan(distance):
        raise InvalidKernelInput("cosine_distance of vectors containing NaN")
    return min(COSINE_DISTANCE_MAX, max(COSINE_DISTANCE_MIN, distance))
