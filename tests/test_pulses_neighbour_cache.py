"""The neighbour cache: pulses propagated through it change exactly what they change through
the index itself, from a few batched searches, and never from an answer the index has
outgrown."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given

from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.neighbour_cache import NeighbourCache
from dreamcycle.pulses.propagate import UpdateRule, propagate, seed_vectors
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.pulses.vectors import Vectors
from tests.bruteforce import BruteForceIndex
from tests.test_pulses_propagate import PROPERTY_SETTINGS, World, unit_at, worlds
from tests.test_pulses_pulse import make_pulse


class CountedIndex:
    """Passes through to a real index and counts the searches asked of it."""

    def __init__(self, inner: BruteForceIndex) -> None:
        self.inner = inner
        self.searches = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def generation(self) -> int:
        return self.inner.generation

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        self.searches += 1
        return self.inner.knn_many(vectors, k)

    def vectors(self, labels: npt.NDArray[np.int64]) -> Vectors:
        return self.inner.vectors(labels)


def saliences(state: InMemorySalience) -> dict[int, float]:
    return {label: state.salience(label) for label in state.labels()}


def circle(count: int) -> BruteForceIndex:
    """`count` chunks spread on a quarter of the unit circle, labels 1..count."""
    index = BruteForceIndex(dim=2)
    for label in range(1, count + 1):
        index.add(label, unit_at(label * math.pi / (2 * count)))
    return index


def test_a_pulse_that_spreads_changes_the_same_through_the_cache_as_through_the_index() -> None:
    index = circle(40)
    pulses = [
        make_pulse(unit_at(angle), kind=kind, k=k, max_hops=hops, decay_per_hop=0.2)
        for angle, kind, k, hops in [
            (0.1, PulseKind.REWARD, 3, 2),
            (0.12, PulseKind.DECAY, 3, 2),
            (0.9, PulseKind.REWARD, 2, 3),
            (1.3, PulseKind.DECAY, 4, 1),
        ]
    ]
    direct, cached = InMemorySalience(), InMemorySalience()
    for label in range(1, 41):
        direct.add(label, 0.5)
        cached.add(label, 0.5)
    neighbours = NeighbourCache(CountedIndex(index))
    neighbours.prefetch(pulses)
    for pulse in pulses:
        assert propagate(pulse, neighbours, cached) == propagate(pulse, index, direct)
    assert saliences(cached) == saliences(direct)


@given(worlds())
@PROPERTY_SETTINGS
def test_random_worlds_change_bit_for_bit_the_same_through_the_cache(world: World) -> None:
    direct = copy.deepcopy(world.state)
    counted = CountedIndex(world.index)
    neighbours = NeighbourCache(counted)
    neighbours.prefetch(world.pulses)
    for pulse in world.pulses:
        through_cache = propagate(pulse, neighbours, world.state, UpdateRule.BFS)
        assert through_cache == propagate(pulse, world.index, direct, UpdateRule.BFS)
    assert saliences(world.state) == saliences(direct)


def test_the_first_two_hops_of_a_batch_are_two_searches_per_k() -> None:
    index = CountedIndex(circle(60))
    pulses = [make_pulse(unit_at(0.02 * step), k=3, max_hops=2) for step in range(30)]
    pulses += [make_pulse(unit_at(1.0 + 0.01 * step), k=5, max_hops=2) for step in range(10)]
    neighbours = NeighbourCache(index)
    neighbours.prefetch(pulses)
    assert index.searches == 4  # seeds and frontier, for k = 3 and for k = 5
    state = InMemorySalience()
    for label in range(1, 61):
        state.add(label, 0.5)
    for pulse in pulses:
        assert propagate(pulse, neighbours, state).changes
    assert index.searches == 4


def test_a_third_hop_is_asked_when_a_pulse_reaches_it() -> None:
    index = CountedIndex(circle(60))
    neighbours = NeighbourCache(index)
    pulse = make_pulse(unit_at(0.5), k=2, max_hops=3, decay_per_hop=0.3)
    neighbours.prefetch([pulse])
    state = InMemorySalience()
    for label in range(1, 61):
        state.add(label, 0.5)
    result = propagate(pulse, neighbours, state)
    assert max(change.hop for change in result.changes) == 3
    assert index.searches == 3


def test_an_index_that_changed_is_asked_again() -> None:
    index = circle(20)
    neighbours = NeighbourCache(CountedIndex(index))
    pulse = make_pulse(unit_at(0.3), k=2, max_hops=1)
    neighbours.prefetch([pulse])
    index.add(99, unit_at(0.3))  # right at the seed, after the answers were kept
    state = InMemorySalience()
    for label in [*range(1, 21), 99]:
        state.add(label, 0.5)
    untouched = copy.deepcopy(state)
    result = propagate(pulse, neighbours, state)
    assert 99 in [change.label for change in result.changes]
    assert result == propagate(pulse, index, untouched)


def test_a_deleted_chunk_s_kept_vector_is_dropped_with_the_answers() -> None:
    index = circle(10)
    neighbours = NeighbourCache(CountedIndex(index))
    assert neighbours.vectors(np.array([3], dtype=np.int64)).shape == (1, 2)
    index.mark_deleted(3)
    index.add(3, unit_at(1.2))  # the same label, moved
    moved = neighbours.vectors(np.array([3], dtype=np.int64))[0]
    assert moved == pytest.approx(unit_at(1.2))


def test_a_seed_of_the_wrong_length_is_left_out_and_refused_on_its_own() -> None:
    index = CountedIndex(circle(20))
    neighbours = NeighbourCache(index)
    good = make_pulse(unit_at(0.4), k=2, max_hops=2)
    wrong = make_pulse([1.0, 0.0, 0.0], k=2, max_hops=2)
    neighbours.prefetch([wrong, good])
    assert index.searches == 2
    with pytest.raises(ValueError, match="shape"):
        propagate(wrong, neighbours, InMemorySalience())


class FiniteOnlyIndex(CountedIndex):
    """Refuses a query that is not finite, as store.index_graph.HnswIndex does."""

    def knn_many(
        self, vectors: Vectors, k: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        if not np.isfinite(vectors).all():
            raise ValueError("query vectors contain NaN or infinite values")
        return super().knn_many(vectors, k)


def test_a_seed_that_is_not_finite_is_left_out() -> None:
    index = FiniteOnlyIndex(circle(20))
    neighbours = NeighbourCache(index)
    good = make_pulse(unit_at(0.4), k=2, max_hops=1)
    broken = replace(good, seed_embedding=np.array([np.nan, 1.0], dtype=np.float32))
    neighbours.prefetch([broken, good])
    assert index.searches == 1
    assert neighbours.knn_many(seed_vectors(good), 2)[0].shape == (1, 2)
    assert index.searches == 1  # the good seed's answer was kept


def test_forget_and_pulses_that_do_not_spread_ask_nothing() -> None:
    index = CountedIndex(circle(20))
    neighbours = NeighbourCache(index)
    neighbours.prefetch(
        [make_pulse(unit_at(0.4), kind=PulseKind.FORGET), make_pulse(unit_at(0.4), max_hops=0)]
    )
    assert index.searches == 0
