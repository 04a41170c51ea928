"""The percentile sweep (the sweep keeps a state; time decay is in pulses/decay.py).

The sweep moves the bottom percentile of each kind, by a value that mixes learned
salience with intrinsic worth, to the cold tier; see plan_sweep.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.constants import EPSILON
from dreamcycle.pulses.vectors import Flags, Floats, Labels

#: The bottom 60 % by value (per kind, live and cold together) is kept in the cold tier.
DEFAULT_SWEEP_PERCENTILE: Final = 60.0
#: A young store (fewer sweepable chunks than this) is not swept.
DEFAULT_MIN_POPULATION: Final = 100
#: Interpolation of numpy.percentile, fixed so every peer computes the same threshold.
PERCENTILE_METHOD: Final = "linear"


class InvalidSweep(ValueError):
    """A downscale or sweep argument that makes no sense; the message names it."""


#: How salience and intrinsic value mix into the value the sweep ranks by (sums to 1).
DEFAULT_SALIENCE_SHARE: Final = 0.5
DEFAULT_INFORMATION_SHARE: Final = 0.4
DEFAULT_IMPORTANCE_SHARE: Final = 0.1
#: A kind with fewer sweepable chunks than this is left alone (its percentile means little).
MIN_KIND_POPULATION: Final = 10


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


class LabelValues(Mapping[int, float]):
    """Each sweepable chunk's value, by label: two arrays, not a dict of a million entries."""

    def __init__(self, labels: Labels, values: Floats) -> None:
        order = np.argsort(labels, kind="stable")
        self._labels: Labels = labels[order]
        self._values: Floats = values[order]

    def __getitem__(self, label: int) -> float:
        at = int(np.searchsorted(self._labels, label))
        if at == len(self._labels) or self._labels[at] != label:
            raise KeyError(label)
        return float(self._values[at])

    def __iter__(self) -> Iterator[int]:
        return iter(self._labels.tolist())

    def __len__(self) -> int:
        return len(self._labels)


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
    values: Mapping[int, float] = field(default_factory=dict)
    already_cold: int = 0


@dataclass(frozen=True)
class SweepColumns:
    """The sweepable chunks as columns, one entry per chunk (pinned and protected ones left
    out): what plan_sweep_columns ranks. `kinds` indexes `kind_names`."""

    labels: Labels
    salience: Floats
    kinds: Labels
    kind_names: tuple[str, ...]
    information: Floats
    importance: Floats
    cold: Flags
    eligible: Flags

    @classmethod
    def of(
        cls,
        *,
        labels: Labels,
        salience: Floats,
        pinned: Flags,
        protected: Flags,
        kinds: Sequence[str],
        information: Floats,
        importance: Floats,
        cold: Flags,
        eligible: Flags,
    ) -> SweepColumns:
        """Every chunk, checked (labels once each, finite salience), then the sweepable ones."""
        count = len(labels)
        columns = (salience, pinned, protected, kinds, information, importance, cold, eligible)
        if any(len(column) != count for column in columns):
            raise InvalidSweep("sweep columns differ in length")
        # Labels come in ascending order from the store: then no sort is needed to check.
        ordered = labels if np.all(labels[1:] > labels[:-1]) else np.sort(labels)
        repeated = np.flatnonzero(ordered[1:] == ordered[:-1])
        if len(repeated):
            raise InvalidSweep(f"sweep candidate label {int(ordered[repeated[0]])} appears twice")
        not_finite = np.flatnonzero(~np.isfinite(salience))
        if len(not_finite):
            at = int(not_finite[0])
            raise InvalidSweep(
                f"sweep candidate {int(labels[at])} has non-finite salience {salience[at]}"
            )
        kept = ~(np.asarray(pinned, dtype=bool) | np.asarray(protected, dtype=bool))
        kind_names = tuple(sorted(set(kinds)))
        code = {name: i for i, name in enumerate(kind_names)}
        kind_codes = np.fromiter(map(code.__getitem__, kinds), dtype=np.int64, count=count)
        # With nothing pinned or protected, the columns as given: a copy of each would
        # raise a large store's peak memory for nothing.
        every = bool(kept.all())

        def keep(column: npt.ArrayLike, dtype: type) -> npt.NDArray[Any]:
            array: npt.NDArray[Any] = np.asarray(column, dtype=dtype)
            return array if every else array[kept]

        return cls(
            labels=keep(labels, np.int64),
            salience=keep(salience, np.float64),
            kinds=keep(kind_codes, np.int64),
            kind_names=kind_names,
            information=keep(information, np.float64),
            importance=keep(importance, np.float64),
            cold=keep(cold, bool),
            eligible=keep(eligible, bool),
        )

    @classmethod
    def of_candidates(cls, candidates: Iterable[SweepCandidate]) -> SweepColumns:
        pool = list(candidates)
        return cls.of(
            labels=np.array([c.label for c in pool], dtype=np.int64),
            salience=np.array([c.salience for c in pool], dtype=np.float64),
            pinned=np.array([c.pinned for c in pool], dtype=bool),
            protected=np.array([c.protected for c in pool], dtype=bool),
            kinds=[c.kind for c in pool],
            information=np.array([c.information for c in pool], dtype=np.float64),
            importance=np.array([c.importance for c in pool], dtype=np.float64),
            cold=np.array([c.cold for c in pool], dtype=bool),
            eligible=np.array([c.eligible for c in pool], dtype=bool),
        )


def percentile_ranks(values: Sequence[float]) -> list[float]:
    """Each value's rank in [0, 1], ties sharing their average rank (never split arbitrarily)."""
    ranks: list[float] = _percentile_ranks(np.asarray(values, dtype=np.float64)).tolist()
    return ranks


def _percentile_ranks(values: Floats, order: Labels | None = None) -> Floats:
    """`order` sorts `values` when given (any order of equal values gives the same ranks)."""
    count = len(values)
    if count <= 1:
        return np.full(count, 0.5)
    if order is None:
        order = _ascending(values)
    ordered = values[order]
    starts_run = np.empty(count, dtype=bool)
    starts_run[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
    starts = np.flatnonzero(starts_run)
    ends = np.append(starts[1:], count) - 1
    average = (starts + ends) / 2.0
    ranks = np.empty(count, dtype=np.float64)
    ranks[order] = (average / (count - 1))[np.cumsum(starts_run) - 1]
    return ranks


def plan_sweep(
    candidates: Iterable[SweepCandidate],
    percentile: float = DEFAULT_SWEEP_PERCENTILE,
    min_population: int = DEFAULT_MIN_POPULATION,
    tolerance: float = EPSILON,
    mix: SweepMix | None = None,
) -> SweepPlan:
    """plan_sweep_columns over `candidates`."""
    return plan_sweep_columns(
        SweepColumns.of_candidates(candidates),
        percentile=percentile,
        min_population=min_population,
        tolerance=tolerance,
        mix=mix,
    )


def plan_sweep_columns(
    columns: SweepColumns,
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
    population = len(columns.labels)
    already_cold = int(np.count_nonzero(columns.cold))
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
    values = np.empty(population, dtype=np.float64)
    doomed = np.zeros(population, dtype=bool)
    thresholds: dict[str, float] = {}
    for code, kind in enumerate(columns.kind_names):
        group = np.flatnonzero(columns.kinds == code)
        if len(group) == 0:
            continue
        kind_values = _values(columns, group, mix, tolerance)
        values[group] = kind_values
        if len(group) < MIN_KIND_POPULATION:
            continue
        threshold = float(np.percentile(kind_values, percentile, method=PERCENTILE_METHOD))
        thresholds[kind] = threshold
        doomed[group] = (
            ~columns.cold[group]
            & columns.eligible[group]
            & (kind_values < threshold - _VALUE_TOLERANCE)
        )
    overall = float(np.percentile(values, percentile, method=PERCENTILE_METHOD))
    return SweepPlan(
        threshold=overall,
        population=population,
        doomed=tuple(sorted(columns.labels[doomed].tolist())),
        skipped_reason=None,
        thresholds=thresholds,
        values=LabelValues(columns.labels, values),
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
    tied: list[float] = _relative_ties(np.asarray(values, dtype=np.float64), tolerance).tolist()
    return tied


def _relative_ties(values: Floats, tolerance: float, order: Labels | None = None) -> Floats:
    """`order` sorts `values` when given; it sorts the result too (a run's values all take
    its smallest)."""
    if order is None:
        order = _ascending(values)
    ordered = values[order]
    tied = np.empty_like(ordered)
    start, count = 0, len(ordered)
    # One step per run of near-equal values, however many values the run holds.
    while start < count:
        anchor = float(ordered[start])
        end = int(np.searchsorted(ordered, anchor * (1.0 + tolerance), side="right"))
        end = max(end, start + 1)
        tied[start:end] = anchor
        start = end
    result = np.empty_like(values)
    result[order] = tied
    return result


def _values(columns: SweepColumns, group: Labels, mix: SweepMix, tolerance: float) -> Floats:
    salience = columns.salience[group]
    # One sort for both steps: a million chunks' sorts are most of a settled sweep.
    order = _ascending(salience)
    salience_ranks = _percentile_ranks(_relative_ties(salience, tolerance, order), order)
    information_ranks = _percentile_ranks(columns.information[group])
    importance_ranks = _percentile_ranks(columns.importance[group])
    total = mix.salience + mix.information + mix.importance
    mixed: Floats = (
        mix.salience * salience_ranks
        + mix.information * information_ranks
        + mix.importance * importance_ranks
    ) / total
    return mixed


def _ascending(values: Floats) -> Labels:
    # Not a stable sort: equal values tie and share their rank whichever comes first, and
    # the unstable sort is the faster one.
    order: Labels = np.argsort(values)
    return order


def spare(plan: SweepPlan, keep: Iterable[int]) -> tuple[SweepPlan, tuple[int, ...]]:
    """The plan without the labels in `keep` (the prune gate's verdict), and those spared."""
    kept = set(keep)
    spared = tuple(label for label in plan.doomed if label in kept)
    if not spared:
        return plan, ()
    remaining = tuple(label for label in plan.doomed if label not in kept)
    return replace(plan, doomed=remaining), spared
