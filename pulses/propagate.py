"""Salience pulse propagation over the local k-NN graph.

Two update rules:

* ``BFS`` (the default) is breadth-first for real: a chunk receives at most one delta
  per pulse, at the first hop that reaches it, from its closest parent at that hop
  (ties: smaller parent label). The next frontier is exactly the chunks newly reached.
  Each frontier chunk is queried with its stored vector for k + 1 neighbours and
  itself is dropped, so it contributes up to k real neighbours. Every hop's frontier
  goes to the index in one batched ``knn_many`` call.
* ``LITERAL`` is the protocol's pseudocode as written: no visited set, the frontier is the
  list of neighbours found (repeats included), a frontier chunk finds itself at
  distance 0. It hits the seed's nearest neighbours again at every hop; it is kept
  for an A/B of the two rules. Its cost grows as k ** max_hops.

Both rules share the clamp (salience stays in [max(pin_floor, SALIENCE_MIN),
SALIENCE_MAX]) and never touch or expand through tombstoned chunks. A change moves
salience by whole SALIENCE_STEPs, so changes add exactly and commute: peers applying the
same pulses in different orders agree bit for bit unless a clamp was reached.

Neither rule checks whether the pulse was already applied, whether it expired or
whether it is valid: the caller validates and deduplicates first (`apply_pulse` is
the in-memory form of that dedupe). All arithmetic is in Python floats and every
iteration order is fixed, so identical inputs give bit-identical salience.
"""

from __future__ import annotations

import enum
import math
from collections.abc import MutableSet
from dataclasses import dataclass
from typing import Final

import numpy as np

from dreamcycle.pulses.constants import SALIENCE_MAX, SALIENCE_MIN, SALIENCE_STEP
from dreamcycle.pulses.graph import NeighbourIndex, SalienceState
from dreamcycle.pulses.kernel import gaussian_kernel
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse
from dreamcycle.pulses.vectors import Vectors

#: Below this magnitude a sum of salience steps is exact in a float64 (2 ** 53 steps).
SALIENCE_GRID_LIMIT: Final = 2.0**12
#: Stands for the seed embedding as the parent of hop-1 chunks; real labels are >= 0.
SEED_PARENT: Final = -1


class UpdateRule(enum.StrEnum):
    BFS = "bfs"
    LITERAL = "literal"


class IndexContractViolation(ValueError):
    """The neighbour index answered with arrays that break the NeighbourIndex protocol."""


@dataclass(frozen=True)
class SalienceChange:
    """One salience update: `delta` is what the pulse asked for, `after` what was stored."""

    label: int
    hop: int
    distance: float
    delta: float
    before: float
    after: float

    @property
    def clamped(self) -> bool:
        """Whether a bound cut the change short: where the order of pulses matters."""
        return self.after != on_salience_grid(self.before) + self.delta


@dataclass(frozen=True)
class PropagationResult:
    """Every change one pulse made, in application order, and how many vectors it queried."""

    pulse_id: str
    changes: tuple[SalienceChange, ...]
    knn_queries: int


Neighbour = tuple[int, float]


def on_salience_grid(value: float) -> float:
    """`value` as a whole number of SALIENCE_STEPs, cut toward zero (so a change is never
    larger than asked; exact: the step is a power of two). A value beyond any salience (an
    unbounded pulse's, which the clamp then cuts) stays as it is."""
    if not abs(value) < SALIENCE_GRID_LIMIT:
        return value
    return math.trunc(value / SALIENCE_STEP) * SALIENCE_STEP


def clamp_salience(value: float, pin_floor: float) -> float:
    """The one clamp of both rules: never above SALIENCE_MAX, never below the floor or 0."""
    return min(SALIENCE_MAX, max(pin_floor, SALIENCE_MIN, value))


def hop_delta(pulse: SalientPulse, hop: int, distance: float) -> float:
    """sign * strength * decay_per_hop ** hop * exp(-d^2 / (2 sigma^2)), in float64."""
    attenuation = float(pulse.decay_per_hop) ** hop
    weight = gaussian_kernel(distance, float(pulse.sigma))
    return pulse.kind.sign * float(pulse.strength) * attenuation * weight


def total_delta_bound(pulse: SalientPulse) -> float:
    """strength * sum over hops h of (k * decay_per_hop) ** h.

    With the BFS rule at most k ** h chunks are reached at hop h, each by at most
    strength * decay_per_hop ** h, so this bounds the total |delta| of one pulse. It is
    the bound `SalientPulse.validate` caps (pulses/pulse.py).
    """
    return pulse.moved_salience_bound()


def propagate(
    pulse: SalientPulse,
    index: NeighbourIndex,
    state: SalienceState,
    rule: UpdateRule = UpdateRule.BFS,
) -> PropagationResult:
    """Apply `pulse` to `state` over `index` with `rule`; see the module docstring."""
    if pulse.kind is PulseKind.FORGET or pulse.max_hops == 0:
        return PropagationResult(pulse_id=pulse.pulse_id, changes=(), knn_queries=0)
    if rule is UpdateRule.BFS:
        return _propagate_bfs(pulse, index, state)
    if rule is UpdateRule.LITERAL:
        return _propagate_literal(pulse, index, state)
    raise ValueError(f"unknown update rule {rule!r}")


def apply_pulse(
    pulse: SalientPulse,
    index: NeighbourIndex,
    state: SalienceState,
    applied_ids: MutableSet[str],
    rule: UpdateRule = UpdateRule.BFS,
) -> PropagationResult | None:
    """Propagate unless `pulse.pulse_id` is in `applied_ids` (then None); records the id."""
    if not pulse.pulse_id:
        raise InvalidPulse("pulse_id is empty; derive it with with_id() before applying")
    if pulse.pulse_id in applied_ids:
        return None
    result = propagate(pulse, index, state, rule)
    applied_ids.add(pulse.pulse_id)
    return result


def seed_vectors(pulse: SalientPulse) -> Vectors:
    """The pulse's seed as the one-row query its first hop asks."""
    return np.ascontiguousarray(pulse.seed_embedding, dtype=np.float32).reshape(1, -1)


def _query(index: NeighbourIndex, vectors: Vectors, k: int) -> list[list[Neighbour]]:
    """Neighbours of each row as (label, distance) in the index's order, as Python values."""
    labels, distances = index.knn_many(vectors, k)
    rows = vectors.shape[0]
    if labels.ndim != 2 or labels.shape != distances.shape or labels.shape[0] != rows:
        raise IndexContractViolation(
            f"knn_many of {rows} vectors returned labels {labels.shape} and distances "
            f"{distances.shape}; expected two arrays of shape ({rows}, k')"
        )
    label_rows: list[list[int]] = labels.tolist()
    distance_rows: list[list[float]] = distances.tolist()
    return [
        list(zip(row_labels, row_distances, strict=True))
        for row_labels, row_distances in zip(label_rows, distance_rows, strict=True)
    ]


def _frontier_vectors(index: NeighbourIndex, labels: list[int]) -> Vectors:
    return index.vectors(np.asarray(labels, dtype=np.int64))


def _apply_delta(
    pulse: SalientPulse, state: SalienceState, label: int, hop: int, distance: float
) -> SalienceChange:
    before = state.salience(label)
    # Both on the grid: the sum is exact, so the order pulses arrive in cannot round it.
    delta = on_salience_grid(hop_delta(pulse, hop, distance))
    after = clamp_salience(on_salience_grid(before) + delta, state.pin_floor(label))
    if after != before:
        state.set_salience(label, after)
    return SalienceChange(
        label=label, hop=hop, distance=distance, delta=delta, before=before, after=after
    )


class _TombstoneCache:
    """Asks the state once per label per pulse; tombstones cannot change mid-pulse."""

    def __init__(self, state: SalienceState) -> None:
        self._state = state
        self._known: dict[int, bool] = {}

    def __call__(self, label: int) -> bool:
        known = self._known.get(label)
        if known is None:
            known = self._known[label] = self._state.is_tombstoned(label)
        return known


def _propagate_bfs(
    pulse: SalientPulse, index: NeighbourIndex, state: SalienceState
) -> PropagationResult:
    is_tombstoned = _TombstoneCache(state)
    reached: set[int] = set()
    changes: list[SalienceChange] = []
    knn_queries = 0
    parents = [SEED_PARENT]
    vectors = seed_vectors(pulse)
    for hop in range(1, pulse.max_hops + 1):
        # A stored vector finds itself first; ask for one more and drop it.
        query_k = pulse.k if hop == 1 else pulse.k + 1
        rows = _query(index, vectors, query_k)
        knn_queries += vectors.shape[0]
        closest: dict[int, tuple[float, int]] = {}
        for parent, row in zip(parents, rows, strict=True):
            neighbours = [(label, d) for label, d in row if label != parent][: pulse.k]
            for label, distance in neighbours:
                if label in reached or is_tombstoned(label):
                    continue
                candidate = (distance, parent)
                current = closest.get(label)
                if current is None or candidate < current:
                    closest[label] = candidate
        newly_reached = sorted(closest)
        for label in newly_reached:
            changes.append(_apply_delta(pulse, state, label, hop, closest[label][0]))
        reached.update(newly_reached)
        if not newly_reached or hop == pulse.max_hops:
            break
        parents = newly_reached
        vectors = _frontier_vectors(index, newly_reached)
    return PropagationResult(
        pulse_id=pulse.pulse_id, changes=tuple(changes), knn_queries=knn_queries
    )


def _propagate_literal(
    pulse: SalientPulse, index: NeighbourIndex, state: SalienceState
) -> PropagationResult:
    is_tombstoned = _TombstoneCache(state)
    changes: list[SalienceChange] = []
    knn_queries = 0
    vectors = seed_vectors(pulse)
    for hop in range(1, pulse.max_hops + 1):
        rows = _query(index, vectors, pulse.k)
        knn_queries += vectors.shape[0]
        found: list[int] = []
        for row in rows:
            for label, distance in row:
                if is_tombstoned(label):
                    continue
                changes.append(_apply_delta(pulse, state, label, hop, distance))
                found.append(label)
        if not found or hop == pulse.max_hops:
            break
        vectors = _frontier_vectors(index, found)
    return PropagationResult(
        pulse_id=pulse.pulse_id, changes=tuple(changes), knn_queries=knn_queries
    )
