"""Propagation of salience pulses: both update rules, clamp, tombstones, dedupe, determinism."""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.constants import SALIENCE_STEP
from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.propagate import (
    IndexContractViolation,
    PropagationResult,
    UpdateRule,
    apply_pulse,
    hop_delta,
    on_salience_grid,
    propagate,
    total_delta_bound,
)
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse, max_hops_allowed
from dreamcycle.pulses.vectors import Vectors
from tests.bruteforce import BruteForceIndex
from tests.test_pulses_pulse import make_pulse

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None)
BOTH_RULES = [UpdateRule.BFS, UpdateRule.LITERAL]


def unit_at(angle: float) -> npt.NDArray[np.float32]:
    return np.array([math.cos(angle), math.sin(angle)], dtype=np.float32)


#: Chunks on the unit circle: label -> angle in radians; the seed sits at angle 0.
ARC: dict[int, float] = {1: 0.10, 2: 0.25, 3: 0.45, 4: 0.70, 5: 1.00, 6: -0.50}


def arc_index() -> BruteForceIndex:
    index = BruteForceIndex(dim=2)
    for label, angle in ARC.items():
        index.add(label, unit_at(angle))
    return index


def arc_pulse(**overrides: object) -> SalientPulse:
    params: dict[str, object] = {
        "kind": PulseKind.DECAY,
        "strength": 0.4,
        "sigma": 0.3,
        "max_hops": 2,
        "k": 2,
        "decay_per_hop": 0.4,
    }
    params.update(overrides)
    return make_pulse(unit_at(0.0), **params)  # type: ignore[arg-type]


def index_distance(index: BruteForceIndex, source: int, target: int) -> float:
    labels, distances = index.knn_many(index.vectors(np.array([source])), k=len(ARC))
    return float(distances[0][list(labels[0]).index(target)])


class CountingIndex:
    """Passes through to a real index and records the batch size of every knn_many call."""

    def __init__(self, inner: BruteForceIndex) -> None:
        self.inner = inner
        self.batches: list[int] = []

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        self.batches.append(vectors.shape[0])
        return self.inner.knn_many(vectors, k)

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        return self.inner.vectors(labels)


# ---- the BFS rule on a known geometry -------------------------------------------


def test_hop_one_delta_uses_distance_to_the_seed() -> None:
    index, state = arc_index(), InMemorySalience()
    pulse = arc_pulse(max_hops=1)
    result = propagate(pulse, index, state)
    assert [c.label for c in result.changes] == [1, 2]
    for change in result.changes:
        expected_distance = 1.0 - math.cos(ARC[change.label])
        assert change.hop == 1
        assert change.distance == pytest.approx(expected_distance, abs=1e-6)
        expected_delta = -0.4 * 0.4 * math.exp(-(change.distance**2) / (2 * 0.3**2))
        assert change.delta == pytest.approx(expected_delta, rel=1e-12)
        assert change.before == 1.0
        assert change.after == 1.0 + change.delta
        assert state.salience(change.label) == change.after
    assert state.salience(3) == 1.0


def test_bfs_reaches_hop_two_from_the_closest_parent_only_once() -> None:
    index, state = arc_index(), InMemorySalience()
    result = propagate(arc_pulse(), index, state)
    assert [(c.label, c.hop) for c in result.changes] == [(1, 1), (2, 1), (3, 2)]
    hop_two = result.changes[2]
    # Chunk 3 neighbours both 1 (0.35 rad away) and 2 (0.20 rad): the closer parent wins.
    assert hop_two.distance == index_distance(index, 2, 3)
    assert hop_two.distance < index_distance(index, 1, 3)
    assert hop_two.delta == on_salience_grid(hop_delta(arc_pulse(), 2, hop_two.distance))
    assert result.knn_queries == 3


def test_literal_rule_hits_the_seeds_neighbours_again_and_never_spreads() -> None:
    bfs_state, literal_state = InMemorySalience(), InMemorySalience()
    bfs = propagate(arc_pulse(), arc_index(), bfs_state, UpdateRule.BFS)
    literal = propagate(arc_pulse(), arc_index(), literal_state, UpdateRule.LITERAL)

    literal_hits = Counter(c.label for c in literal.changes)
    assert literal_hits == Counter({1: 3, 2: 3})
    # A frontier chunk finds itself at distance 0 and takes the full kernel weight.
    assert any(c.hop == 2 and c.distance == 0.0 for c in literal.changes)
    assert literal_state.salience(3) == 1.0

    bfs_hits = Counter(c.label for c in bfs.changes)
    assert bfs_hits == Counter({1: 1, 2: 1, 3: 1})
    assert literal_state.salience(1) < bfs_state.salience(1)


def test_each_hop_is_one_batched_query() -> None:
    rng = np.random.default_rng(7)
    inner = BruteForceIndex(dim=8)
    for label in range(200):
        inner.add(label, rng.normal(size=8))
    index = CountingIndex(inner)
    pulse = make_pulse(rng.normal(size=8), k=3, max_hops=3, decay_per_hop=0.3)
    result = propagate(pulse, index, InMemorySalience())
    hop_sizes = Counter(c.hop for c in result.changes)
    assert index.batches == [1, hop_sizes[1], hop_sizes[2]]
    assert result.knn_queries == sum(index.batches)
    assert hop_sizes[1] == 3
    assert all(hop_sizes[h] <= 3**h for h in (1, 2, 3))


def test_tombstoned_chunk_is_neither_changed_nor_expanded() -> None:
    index = arc_index()
    state = InMemorySalience(tombstoned=[1])
    # With k = 1 the only route onward is through chunk 1.
    result = propagate(arc_pulse(k=1, decay_per_hop=0.5), index, state)
    assert result.changes == ()
    assert result.knn_queries == 1
    assert state.snapshot() == {1: 1.0}


def test_tombstone_returned_by_the_index_is_skipped_but_others_are_reached() -> None:
    index = arc_index()
    state = InMemorySalience(saliences={2: 0.5}, tombstoned=[2])
    result = propagate(arc_pulse(kind=PulseKind.REWARD), index, state)
    assert 2 not in {c.label for c in result.changes}
    assert state.salience(2) == 0.5
    assert {c.label for c in result.changes} == {1, 3}


def test_index_deletions_keep_tombstones_out_too() -> None:
    index = arc_index()
    index.mark_deleted(1)
    result = propagate(arc_pulse(max_hops=1), index, InMemorySalience())
    assert [c.label for c in result.changes] == [2, 3]


# ---- clamp ----------------------------------------------------------------------


def test_reward_is_capped_at_one_and_records_the_intended_delta() -> None:
    state = InMemorySalience(saliences={1: 0.95})
    result = propagate(arc_pulse(kind=PulseKind.REWARD, max_hops=1), arc_index(), state)
    first = result.changes[0]
    assert first.label == 1 and first.delta > 0.05
    assert first.after == state.salience(1) == 1.0


def test_decay_stops_at_the_pin_floor_and_at_zero() -> None:
    state = InMemorySalience(saliences={1: 0.1, 2: 0.1})
    state.pin(2, 0.08)
    propagate(arc_pulse(strength=5.0, max_hops=1), arc_index(), state)
    assert state.salience(1) == 0.0
    assert state.salience(2) == 0.08


def test_forget_pulse_changes_nothing_and_queries_nothing() -> None:
    pulse = make_pulse(unit_at(0.0), kind=PulseKind.FORGET, strength=math.inf, max_hops=0)
    index = CountingIndex(arc_index())
    for rule in BOTH_RULES:
        result = propagate(pulse, index, InMemorySalience(), rule)
        assert result == PropagationResult(pulse_id=pulse.pulse_id, changes=(), knn_queries=0)
    assert index.batches == []


def test_empty_index_changes_nothing() -> None:
    for rule in BOTH_RULES:
        result = propagate(arc_pulse(), BruteForceIndex(dim=2), InMemorySalience(), rule)
        assert result.changes == ()
        assert result.knn_queries == 1


def test_total_delta_bound_formula() -> None:
    pulse = arc_pulse(strength=0.5, k=3, decay_per_hop=0.3, max_hops=2)
    assert total_delta_bound(pulse) == pytest.approx(0.5 * (0.9 + 0.81))
    forget = make_pulse(kind=PulseKind.FORGET, strength=math.inf, max_hops=0)
    assert total_delta_bound(forget) == 0.0


class MisshapenIndex:
    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        return np.zeros((vectors.shape[0], k), np.int64), np.zeros((vectors.shape[0],), np.float32)

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        raise AssertionError("never reached")


def test_index_breaking_the_protocol_is_named() -> None:
    with pytest.raises(IndexContractViolation, match=r"labels \(1, 2\) and distances \(1,\)"):
        propagate(arc_pulse(), MisshapenIndex(), InMemorySalience())


def test_apply_pulse_refuses_a_pulse_without_id() -> None:
    anonymous = replace(arc_pulse(), pulse_id="")
    with pytest.raises(InvalidPulse, match="pulse_id is empty"):
        apply_pulse(anonymous, arc_index(), InMemorySalience(), set())


# ---- properties over random worlds ---------------------------------------------


@dataclass
class World:
    index: BruteForceIndex
    state: InMemorySalience
    pulses: list[SalientPulse]


@st.composite
def worlds(draw: st.DrawFn) -> World:
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dim = draw(st.sampled_from([2, 3, 8]))
    size = draw(st.integers(1, 40))
    centres = rng.normal(size=(3, dim))
    spread = draw(st.sampled_from([0.05, 0.5]))
    index = BruteForceIndex(dim=dim)
    state = InMemorySalience()
    for label in range(size):
        index.add(label, centres[label % 3] + spread * rng.normal(size=dim))
        state.add(label, float(rng.uniform(0.0, 1.0)))
        if rng.uniform() < 0.2:
            state.pin(label, float(rng.uniform(0.0, 0.9)))
        if rng.uniform() < 0.15:
            state.tombstone(label)
    pulses = []
    for _ in range(draw(st.integers(1, 4))):
        k = draw(st.integers(1, 5))
        sigma = draw(st.floats(0.05, 1.0))
        seed = (
            index.vectors(np.array([draw(st.integers(0, size - 1))]))[0]
            if draw(st.booleans())
            else rng.normal(size=dim)
        )
        pulses.append(
            make_pulse(
                seed,
                kind=draw(st.sampled_from([PulseKind.REWARD, PulseKind.DECAY])),
                strength=draw(st.floats(0.0, 3.0)),
                sigma=sigma,
                k=k,
                decay_per_hop=draw(st.floats(0.0, 0.99)) / k,
                max_hops=draw(st.integers(1, min(4, max_hops_allowed(sigma)))),
            )
        )
    return World(index=index, state=state, pulses=pulses)


@given(worlds(), st.sampled_from(BOTH_RULES))
@PROPERTY_SETTINGS
def test_salience_stays_between_floor_and_one(world: World, rule: UpdateRule) -> None:
    tombstoned_before = {label: world.state.salience(label) for label in world.state.tombstones()}
    for pulse in world.pulses:
        propagate(pulse, world.index, world.state, rule)
        for label in world.state.labels():
            assert world.state.pin_floor(label) <= world.state.salience(label) <= 1.0
    assert {label: world.state.salience(label) for label in tombstoned_before} == tombstoned_before


@given(worlds(), st.sampled_from(BOTH_RULES))
@PROPERTY_SETTINGS
def test_tombstoned_chunks_never_change(world: World, rule: UpdateRule) -> None:
    for pulse in world.pulses:
        result = propagate(pulse, world.index, world.state, rule)
        assert not {c.label for c in result.changes} & world.state.tombstones()


@given(worlds())
@PROPERTY_SETTINGS
def test_bfs_changes_each_chunk_at_most_once_within_the_bound(world: World) -> None:
    for pulse in world.pulses:
        result = propagate(pulse, world.index, world.state, UpdateRule.BFS)
        labels = [c.label for c in result.changes]
        assert len(labels) == len(set(labels))
        hops = Counter(c.hop for c in result.changes)
        assert all(count <= pulse.k**hop for hop, count in hops.items())
        applied = sum(abs(c.after - c.before) for c in result.changes)
        intended = sum(abs(c.delta) for c in result.changes)
        # A stored value not yet on the salience grid is first cut to it: up to a step.
        rounding = len(result.changes) * SALIENCE_STEP
        assert applied <= intended * (1 + 1e-12) + rounding + 1e-15
        assert intended <= total_delta_bound(pulse) * (1 + 1e-12) + 1e-15


@given(worlds(), st.sampled_from(BOTH_RULES), st.randoms(use_true_random=False))
@PROPERTY_SETTINGS
def test_pulses_in_any_order_give_the_same_salience_bit_for_bit_unless_clamped(
    world: World, rule: UpdateRule, rng: random.Random
) -> None:
    """What peers rely on: the same pulses applied in two orders store the same salience,
    to the last bit, on every chunk no clamp touched."""
    shuffled = list(world.pulses)
    rng.shuffle(shuffled)
    stored, clamped = [], set()
    for order in (world.pulses, shuffled):
        state = world.state.copy()
        for pulse in order:
            changes = propagate(pulse, world.index, state, rule).changes
            clamped |= {c.label for c in changes if c.clamped}
        stored.append(state.snapshot())
    first, second = stored
    assert {label: value for label, value in first.items() if label not in clamped} == {
        label: value for label, value in second.items() if label not in clamped
    }


@given(worlds(), st.sampled_from(BOTH_RULES))
@PROPERTY_SETTINGS
def test_pulse_applied_twice_equals_once(world: World, rule: UpdateRule) -> None:
    twice, once = world.state.copy(), world.state.copy()
    applied_twice: set[str] = set()
    applied_once: set[str] = set()
    for pulse in world.pulses:
        assert apply_pulse(pulse, world.index, twice, applied_twice, rule) is not None
        assert apply_pulse(pulse, world.index, twice, applied_twice, rule) is None
        apply_pulse(pulse, world.index, once, applied_once, rule)
    assert twice.snapshot() == once.snapshot()
    assert applied_twice == {p.pulse_id for p in world.pulses}


@given(worlds(), st.sampled_from(BOTH_RULES))
@PROPERTY_SETTINGS
def test_identical_inputs_give_bit_identical_outputs(world: World, rule: UpdateRule) -> None:
    def run() -> tuple[list[str], list[tuple[int, int, str, str, str, str]]]:
        state = world.state.copy()
        trail = []
        for pulse in world.pulses:
            result = propagate(pulse, world.index, state, rule)
            trail += [
                (c.label, c.hop, c.distance.hex(), c.delta.hex(), c.before.hex(), c.after.hex())
                for c in result.changes
            ]
        return [value.hex() for value in state.snapshot().values()], trail

    assert run() == run()
