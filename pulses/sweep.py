"""Time downscaling and the percentile sweep (seed section 5, Membrane-style decay)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

import numpy as np

from pulses.constants import EPSILON, SALIENCE_MIN

#: Seed section 5: the bottom 60 % by salience is tombstoned each cycle.
DEFAULT_SWEEP_PERCENTILE: Final = 60.0
#: Seed section 5: a cold database (fewer sweepable chunks than this) is not swept.
DEFAULT_MIN_POPULATION: Final = 100
#: Interpolation of numpy.percentile, fixed so every peer computes the same threshold.
PERCENTILE_METHOD: Final = "linear"


class InvalidSweep(ValueError):
    """A downscale or sweep argument that makes no sense; the message names it."""


def downscale(salience: float, pin_floor: float, elapsed_s: float, half_life_s: float) -> float:
    """Salience after `elapsed_s` seconds of exponential decay with half-life `half_life_s`.

    Never below max(pin_floor, SALIENCE_MIN), so a pinned chunk decays only to its
    floor. A half-life <= 0 or infinite means the kind does not decay, and a
    non-positive elapsed time (a clock that stepped back) changes nothing.
    """
    for name, value in (
        ("salience", salience),
        ("pin_floor", pin_floor),
        ("elapsed_s", elapsed_s),
        ("half_life_s", half_life_s),
    ):
        if math.isnan(value):
            raise InvalidSweep(f"downscale {name} is NaN")
    if not math.isfinite(salience):
        raise InvalidSweep(f"downscale salience must be finite, got {salience}")
    if half_life_s <= 0 or math.isinf(half_life_s) or elapsed_s <= 0:
        return salience
    decayed = salience * math.pow(0.5, elapsed_s / half_life_s)
    return max(decayed, pin_floor, SALIENCE_MIN)


@dataclass(frozen=True)
class SweepCandidate:
    """A live chunk as the sweep sees it; `protected` means its deletion policy forbids pruning."""

    label: int
    salience: float
    pinned: bool
    protected: bool

    @property
    def sweepable(self) -> bool:
        return not (self.pinned or self.protected)


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep would tombstone: `doomed` labels ascending, or why it was skipped."""

    threshold: float | None
    population: int
    doomed: tuple[int, ...]
    skipped_reason: str | None


def plan_sweep(
    candidates: Iterable[SweepCandidate],
    percentile: float = DEFAULT_SWEEP_PERCENTILE,
    min_population: int = DEFAULT_MIN_POPULATION,
    tolerance: float = EPSILON,
) -> SweepPlan:
    """Threshold = `percentile` of the sweepable saliences; doom those below it by more than
    `tolerance`.

    The tolerance keeps a sweep from deciding on differences no pulse could have made
    (chunks ingested seconds apart differ by ~1e-8 after decay). Pinned and protected
    chunks neither count towards the threshold nor get doomed.
    """
    if not (math.isfinite(tolerance) and tolerance >= 0.0):
        raise InvalidSweep(f"sweep tolerance must be finite and >= 0, got {tolerance}")
    if not (math.isfinite(percentile) and 0.0 < percentile < 100.0):
        raise InvalidSweep(f"sweep percentile must be strictly between 0 and 100, got {percentile}")
    if isinstance(min_population, bool) or not isinstance(min_population, int):
        raise InvalidSweep(f"sweep min_population must be an integer, got {min_population!r}")
    if min_population < 0:
        raise InvalidSweep(f"sweep min_population must be >= 0, got {min_population}")
    sweepable = _sweepable(candidates)
    population = len(sweepable)
    if population < min_population:
        return SweepPlan(
            threshold=None,
            population=population,
            doomed=(),
            skipped_reason=f"population {population} below minimum {min_population}",
        )
    if population == 0:
        return SweepPlan(
            threshold=None, population=0, doomed=(), skipped_reason="no sweepable chunks"
        )
    saliences = np.fromiter((c.salience for c in sweepable), dtype=np.float64, count=population)
    threshold = float(np.percentile(saliences, percentile, method=PERCENTILE_METHOD))
    doomed = tuple(sorted(c.label for c in sweepable if c.salience < threshold - tolerance))
    return SweepPlan(threshold=threshold, population=population, doomed=doomed, skipped_reason=None)


def _sweepable(candidates: Iterable[SweepCandidate]) -> list[SweepCandidate]:
    seen: set[int] = set()
    sweepable: list[SweepCandidate] = []
    for candidate in candidates:
        if candidate.label in seen:
            raise InvalidSweep(f"sweep candidate label {candidate.label} appears twice")
        seen.add(candidate.label)
        if not math.isfinite(candidate.salience):
            raise InvalidSweep(
                f"sweep candidate {candidate.label} has non-finite salience {candidate.salience}"
            )
        if candidate.sweepable:
            sweepable.append(candidate)
    return sweepable
