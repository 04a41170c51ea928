"""The in-memory SalienceState."""

from __future__ import annotations

import math

import pytest

from dreamcycle.pulses.memory import InMemorySalience, InvalidSalience


def test_unknown_chunk_is_new_live_and_unpinned() -> None:
    state = InMemorySalience()
    assert state.salience(42) == 1.0
    assert state.pin_floor(42) == 0.0
    assert not state.is_tombstoned(42)
    assert state.snapshot() == {}


def test_constructor_and_snapshot_in_label_order() -> None:
    state = InMemorySalience(saliences={5: 0.2, 1: 0.9}, pin_floors={3: 0.7}, tombstoned=[9])
    assert list(state.snapshot().items()) == [(1, 0.9), (3, 1.0), (5, 0.2), (9, 1.0)]
    assert state.tombstones() == frozenset({9})
    assert state.labels() == [1, 3, 5, 9]


def test_pinning_raises_salience_to_the_floor() -> None:
    state = InMemorySalience(saliences={1: 0.3, 2: 0.9})
    state.pin(1, 0.7)
    state.pin(2, 0.7)
    assert state.salience(1) == 0.7
    assert state.salience(2) == 0.9


@pytest.mark.parametrize("value", [-0.01, 1.01, math.nan, math.inf])
def test_out_of_range_values_are_named(value: float) -> None:
    state = InMemorySalience()
    with pytest.raises(InvalidSalience, match=r"salience of chunk 7 must be in \[0.0, 1.0\]"):
        state.set_salience(7, value)
    with pytest.raises(InvalidSalience, match=r"pin floor of chunk 7 must be in"):
        state.pin(7, value)


def test_copy_is_independent() -> None:
    original = InMemorySalience(saliences={1: 0.5})
    clone = original.copy()
    clone.set_salience(1, 0.1)
    clone.tombstone(2)
    clone.pin(3, 0.4)
    assert original.snapshot() == {1: 0.5}
    assert not original.is_tombstoned(2)
    assert clone.snapshot() == {1: 0.1, 2: 1.0, 3: 1.0}
