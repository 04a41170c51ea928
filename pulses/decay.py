"""Time downscaling (Membrane-style decay): how salience decays, which chunks a step
decays, and the time a cycle accounts for."""

from __future__ import annotations

import math
from collections.abc import Mapping

from dreamcycle.pulses.constants import SALIENCE_MIN
from dreamcycle.pulses.sweep import InvalidSweep


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


def due_for_decay(
    decayed_at_ms: Mapping[int, int], now_ms: int, min_step_ms: int, limit: int | None
) -> list[int]:
    """The chunks one downscale step decays: those last decayed `min_step_ms` or more ago,
    the longest waiting first (ties: the smaller label), at most `limit` of them.

    Decay composes (half a step now and half later is one step), so a chunk left for a
    later step loses nothing; what the rule saves is rewriting every chunk every cycle.
    """
    if min_step_ms < 0:
        raise InvalidSweep(f"downscale min_step_ms must be >= 0, got {min_step_ms}")
    if limit is not None and limit < 1:
        raise InvalidSweep(f"downscale limit must be >= 1, got {limit}")
    due = sorted((at, label) for label, at in decayed_at_ms.items() if now_ms - at >= min_step_ms)
    return [label for _, label in due[:limit]]


def accounted_step(accounted_ms: int | None, observed_ms: int, max_step_ms: int) -> int:
    """The time a cycle accounts for, given what was accounted before and the clock it reads.

    It follows the clock forward by at most `max_step_ms` per cycle and never goes back:
    a clock stepped forward moves it one bounded step per cycle (a real downtime is caught
    up over later cycles), and a clock stepped back leaves it where it was until the clock
    passes it again. With nothing accounted yet, the clock is taken as it is.
    """
    if max_step_ms <= 0:
        raise InvalidSweep(f"max_step_ms must be > 0, got {max_step_ms}")
    if accounted_ms is None:
        return observed_ms
    return accounted_ms + min(max(observed_ms - accounted_ms, 0), max_step_ms)
