"""Time downscaling and the percentile sweep (Membrane-style decay; the sweep keeps a state).

The sweep moves the bottom percentile of each kind, by a value that mixes learned
salience with intrinsic worth, to the cold tier; see plan_sweep.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np

from dreamcycle.pulses.constants import EPSILON, SALIENCE_MIN

#: The bottom 60 % by value (per kind, live and cold together) is kept in the cold tier.
DEFAULT_SWEEP_PERCENTILE: Final = 60.0
#: A young store (fewer sweepable chunks than this) is not swept.
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


#: How salience and intrinsic value mix into the value the sweep ranks by (sums to 1).
DEFAULT_SALIENCE_SHARE: Final = 0.5
DEFAULT_INFORMATION_SHARE: Final = 0.4
DEFAULT_IMPORTANCE_SHARE: Final = 0.1
#: A kind with fewer sweepable chunks than this is left alone (its percentile means little).
MIN_KIND_POPULATION: Final = 10
_WORD: Final = re.compile(r"[a-z0-9]+")


@dataclass(frozen=True)
class SweepCandidate:
    """A chunk as the sweep sees it.

    `protected` means its deletion policy forbids pruning; `cold` that an earlier
    sweep already moved it to the cold tier (it still counts towards the
    percentile, so the bottom share is a state the sweep keeps, not a cut it
    repeats); `eligible` that its grace period is over; `information` its
    intrinsic value (see information_content).
    """

    label: int
    salience: float
    pinned: bool
    protected: bool
    kind: str = "note"
    information: float = 0.0
    importance: int = 5
    cold: bool = False
    eligible: bool = True

    @property
    def sweepable(self) -> bool:
        return not (self.pinned or self.protected)


@dataclass(frozen=True)
class SweepMix:
    """Shares of the three signals in a chunk's value; each is a percentile rank within kind."""

    salience: float = DEFAULT_SALIENCE_SHARE
    information: float = DEFAULT_INFORMATION_SHARE
    importance: float = DEFAULT_IMPORTANCE_SHARE

    def validate(self) -> None:
        shares = (self.salience, self.information, self.importance)
        if any(not (math.isfinite(s) and s >= 0) for s in shares) or sum(shares) <= 0:
            raise InvalidSweep(f"sweep mix shares must be >= 0 and not all 0, got {shares}")


@dataclass(frozen=True)
class SweepPlan:
    """What one sweep would move to the cold tier: `doomed` labels ascending, or why not.

    `thresholds` maps each swept kind to the value below which its chunks go.
    """

    threshold: float | None
    population: int
    doomed: tuple[int, ...]
    skipped_reason: str | None
    thresholds: dict[str, float] = field(default_factory=dict)
    values: dict[int, float] = field(default_factory=dict)
    already_cold: int = 0


def information_content(texts: Sequence[str]) -> list[float]:
    """Summed inverse document frequency of each text's distinct words, over `texts`.

    Greetings and acknowledgements share common words and score low; a chunk that
    names rare things scores high, whatever its salience.
    """
    documents = [set(_WORD.findall(text.lower())) for text in texts]
    frequency = Counter(itertools.chain.from_iterable(documents))
    total = len(documents)
    # Each word's weight once, not once per text that holds it; fsum is correctly rounded,
    # so the order of the words in a text does not change its sum.
    weight = {word: math.log((total + 1) / (count + 0.5)) for word, count in frequency.items()}
    return [math.fsum(map(weight.__getitem__, words)) for words in documents]


def percentile_ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank in [0, 1], ties sharing their average rank (never split arbitrarily)."""
    count = len(values)
    if count == 0:
        return []
    if count == 1:
        return [0.5]
    order = sorted(range(count), key=lambda i: values[i])
    ranks = [0.0] * count
    start = 0
    while start < count:
        end = start
        while end + 1 < count and values[order[end + 1]] == values[order[start]]:
            end += 1
        average = (start + end) / 2.0
        for position in range(start, end + 1):
            ranks[order[position]] = average / (count - 1)
        start = end + 1
    return ranks


def plan_sweep(
    candidates: Iterable[SweepCandidate],
    percentile: float = DEFAULT_SWEEP_PERCENTILE,
    min_population: int = DEFAULT_MIN_POPULATION,
    tolerance: float = EPSILON,
    mix: SweepMix | None = None,
) -> SweepPlan:
    """Per kind, the `percentile` of value over live and cold chunks; doom live, eligible
    chunks whose value is below it.

    Value = the mix of a chunk's percentile ranks (within its kind) of salience,
    information content and declared importance. Saliences within a relative
    `tolerance` of each other tie first, so differences no pulse could have made
    (chunks ingested seconds apart differ by ~1e-8 after decay) do not split.
    Ranking within kind means a kind that decays faster is never wiped as a
    whole; ranks are unchanged by a decay that scales a whole kind alike, so
    repeated sweeps of a static corpus settle. Pinned and protected chunks
    neither count nor get doomed.
    """
    mix = mix or SweepMix()
    mix.validate()
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
    already_cold = sum(c.cold for c in sweepable)
    if population < min_population:
        return SweepPlan(
            threshold=None,
            population=population,
            doomed=(),
            skipped_reason=f"population {population} below minimum {min_population}",
            already_cold=already_cold,
        )
    if population == 0:
        return SweepPlan(
            threshold=None, population=0, doomed=(), skipped_reason="no sweepable chunks"
        )
    by_kind: dict[str, list[SweepCandidate]] = {}
    for candidate in sweepable:
        by_kind.setdefault(candidate.kind, []).append(candidate)
    values: dict[int, float] = {}
    thresholds: dict[str, float] = {}
    doomed: list[int] = []
    for kind in sorted(by_kind):
        group = by_kind[kind]
        kind_values = _values(group, mix, tolerance)
        values.update(zip((c.label for c in group), kind_values, strict=True))
        if len(group) < MIN_KIND_POPULATION:
            continue
        threshold = float(np.percentile(kind_values, percentile, method=PERCENTILE_METHOD))
        thresholds[kind] = threshold
        doomed.extend(
            c.label
            for c, value in zip(group, kind_values, strict=True)
            if not c.cold and c.eligible and value < threshold - _VALUE_TOLERANCE
        )
    overall = float(np.percentile(list(values.values()), percentile, method=PERCENTILE_METHOD))
    return SweepPlan(
        threshold=overall,
        population=population,
        doomed=tuple(sorted(doomed)),
        skipped_reason=None,
        thresholds=thresholds,
        values=values,
        already_cold=already_cold,
    )


#: Values are mixes of ranks; closer than this they are the same value.
_VALUE_TOLERANCE: Final = 1e-9


def relative_ties(values: Sequence[float], tolerance: float) -> list[float]:
    """Each value replaced by the smallest value of its run of near-equal values.

    Sorted values join a run while within a factor (1 + tolerance) of the run's
    first value. The grouping depends only on ratios, so scaling every value by
    the same decay factor leaves the groups (and so the ranks) as they were.
    """
    order = sorted(range(len(values)), key=lambda i: values[i])
    tied = [0.0] * len(values)
    anchor: float | None = None
    for i in order:
        value = values[i]
        if anchor is None or value > anchor * (1.0 + tolerance):
            anchor = value
        tied[i] = anchor
    return tied


def _values(group: Sequence[SweepCandidate], mix: SweepMix, tolerance: float) -> list[float]:
    salience = relative_ties([c.salience for c in group], tolerance)
    signals = (
        (mix.salience, percentile_ranks(salience)),
        (mix.information, percentile_ranks([c.information for c in group])),
        (mix.importance, percentile_ranks([float(c.importance) for c in group])),
    )
    total = mix.salience + mix.information + mix.importance
    return [
        math.fsum(share * ranks[i] for share, ranks in signals) / total for i in range(len(group))
    ]


def spare(plan: SweepPlan, keep: Iterable[int]) -> tuple[SweepPlan, tuple[int, ...]]:
    """The plan without the labels in `keep` (the prune gate's verdict), and those spared."""
    kept = set(keep)
    spared = tuple(label for label in plan.doomed if label in kept)
    if not spared:
        return plan, ()
    remaining = tuple(label for label in plan.doomed if label not in kept)
    return replace(plan, doomed=remaining), spared


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
