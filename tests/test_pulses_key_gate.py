"""The key gate: which similarity bands of learned keys recall uses on this store."""

from __future__ import annotations

import numpy as np
import pytest

from dreamcycle.pulses.evidence import MIN_EVIDENCE, InvalidEvidence
from dreamcycle.pulses.key_gate import (
    BAND_EDGES,
    PRIOR_FROM,
    KeyGate,
    band_of,
    usable_similarities,
)


def test_bands_by_their_lower_edges() -> None:
    assert band_of(0.79) is None
    assert band_of(float("nan")) is None
    assert band_of(BAND_EDGES[0]) == 0
    assert band_of(0.93) == BAND_EDGES.index(0.90)
    assert band_of(1.0) == len(BAND_EDGES) - 1


def test_the_prior_uses_keys_only_for_questions_asked_again() -> None:
    opened = KeyGate().open_bands()
    assert opened == tuple(edge >= PRIOR_FROM for edge in BAND_EDGES)


def _observed(gate: KeyGate, similarity: float, gains: list[float]) -> KeyGate:
    for gain in gains:
        gate = gate.observe(similarity, gain)
    return gate


def test_a_band_opens_where_keys_helped_new_questions_and_closes_where_they_hurt() -> None:
    helped = [0.3 if i % 2 else 0.2 for i in range(MIN_EVIDENCE)]
    hurt = [-g for g in helped]
    gate = _observed(KeyGate(), 0.86, helped)
    gate = _observed(gate, 0.99, hurt)
    opened = dict(zip(BAND_EDGES, gate.open_bands(), strict=True))
    assert opened[0.85] is True
    assert opened[0.98] is False
    assert opened[0.80] is False and opened[0.95] is True  # untouched: their prior


def test_questions_below_the_lowest_band_change_nothing() -> None:
    assert KeyGate().observe(0.5, 1.0) == KeyGate()


def test_usable_similarities_follow_the_open_bands() -> None:
    opened = tuple(edge >= 0.90 for edge in BAND_EDGES)
    cosines = np.array([0.5, 0.81, 0.9, 0.97, 1.0])
    assert usable_similarities(cosines, opened).tolist() == [False, False, True, True, True]


def test_the_gate_survives_its_json_and_refuses_other_bands() -> None:
    gate = _observed(KeyGate(), 0.9, [0.1, -0.2])
    assert KeyGate.from_json(gate.to_json()) == gate
    with pytest.raises(InvalidEvidence, match="other bands"):
        KeyGate.from_json({"edges": [0.5], "bands": []})
    with pytest.raises(InvalidEvidence, match="key bands"):
        KeyGate(bands=())
