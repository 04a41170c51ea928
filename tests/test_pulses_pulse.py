"""SalientPulse invariants, canonical id and JSON round trip."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse, max_hops_allowed

DEFAULT_TS = (1_760_000_000_000 << 16) | 7


def make_pulse(
    seed_embedding: npt.ArrayLike | None = None,
    *,
    kind: PulseKind = PulseKind.REWARD,
    strength: float = 0.5,
    sigma: float = 0.3,
    max_hops: int = 2,
    k: int = 3,
    decay_per_hop: float = 0.3,
    ts: int = DEFAULT_TS,
    origin_peer: str = "peer-a",
    reason: str = "tests/pulse",
    ttl_s: float = 3600.0,
    index_version: str = "test-v1",
) -> SalientPulse:
    """A pulse with its id set; defaults satisfy every invariant."""
    embedding = np.asarray(
        [1.0, 0.0, 0.0] if seed_embedding is None else seed_embedding, dtype=np.float32
    )
    return SalientPulse(
        seed_embedding=embedding,
        kind=kind,
        strength=strength,
        sigma=sigma,
        max_hops=max_hops,
        k=k,
        decay_per_hop=decay_per_hop,
        ts=ts,
        origin_peer=origin_peer,
        reason=reason,
        ttl_s=ttl_s,
        index_version=index_version,
    ).with_id()


def test_default_pulse_is_valid() -> None:
    make_pulse().validate()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"decay_per_hop": 0.5, "k": 2}, r"decay_per_hop \* k must be < 1"),
        ({"decay_per_hop": 0.34, "k": 3}, r"decay_per_hop \* k must be < 1"),
        (
            {"sigma": 0.3, "max_hops": 24},
            r"max_hops 24 exceeds floor\(-ln\(0\.001\) / sigma\) = 23",
        ),
        ({"sigma": 0.0}, r"sigma must be finite and >= 1e-06"),
        ({"sigma": -0.1}, r"sigma must be finite and >= 1e-06"),
        ({"sigma": 1e-200}, r"sigma must be finite and >= 1e-06"),
        ({"strength": -0.1}, r"strength must be finite and >= 0"),
        ({"strength": math.nan}, r"strength must be finite and >= 0"),
        ({"strength": math.inf}, r"strength must be finite and >= 0"),
        ({"kind": PulseKind.FORGET, "strength": math.inf, "max_hops": 1}, r"max_hops = 0"),
        ({"k": 0}, r"k must be in 1\.\.255"),
        ({"ttl_s": 0.0}, r"ttl must be > 0"),
        ({"origin_peer": ""}, r"origin_peer must not be empty"),
        ({"seed_embedding": [0.0, math.nan, 1.0]}, r"NaN or infinity"),
    ],
)
def test_invariant_violations_are_named(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPulse, match=message):
        make_pulse(**overrides).validate()


def test_max_hops_limit_follows_sigma() -> None:
    assert max_hops_allowed(0.15) == 46
    assert max_hops_allowed(0.3) == 23
    assert max_hops_allowed(0.5) == 13
    make_pulse(sigma=0.5, max_hops=13, k=1, decay_per_hop=0.5).validate()


def test_forget_pulse_with_infinite_strength_is_valid() -> None:
    make_pulse(kind=PulseKind.FORGET, strength=math.inf, max_hops=0).validate()


def test_pulse_json_round_trip_keeps_every_field_and_the_id() -> None:
    original = make_pulse([0.6, -0.8, 0.0], kind=PulseKind.DECAY, strength=0.25)
    wire = json.dumps(original.to_json())
    received = SalientPulse.from_json(json.loads(wire))
    assert received == original
    assert received.pulse_id == original.pulse_id == original.computed_id()
    assert received.seed_embedding.dtype == np.float32
    assert received.seed_embedding.tobytes() == original.seed_embedding.tobytes()


def test_forget_pulse_round_trips_infinite_strength() -> None:
    original = make_pulse(kind=PulseKind.FORGET, strength=math.inf, max_hops=0)
    received = SalientPulse.from_json(json.loads(json.dumps(original.to_json())))
    assert received.strength == math.inf
    assert received.pulse_id == original.pulse_id


@pytest.mark.parametrize(
    ("field", "value"),
    [("reason", "tests/other"), ("strength", 0.75), ("origin_peer", "peer-b"), ("ts", 1)],
)
def test_tampered_pulse_is_rejected(field: str, value: object) -> None:
    wire = make_pulse().to_json()
    wire[field] = value
    with pytest.raises(InvalidPulse, match="does not match its content"):
        SalientPulse.from_json(wire)


def test_tampered_embedding_is_rejected() -> None:
    wire = make_pulse().to_json()
    wire["seed_embedding"] = make_pulse([0.0, 1.0, 0.0]).to_json()["seed_embedding"]
    with pytest.raises(InvalidPulse, match="does not match its content"):
        SalientPulse.from_json(wire)


def test_ids_differ_for_different_pulses() -> None:
    assert make_pulse().pulse_id != make_pulse(strength=0.51).pulse_id
    assert make_pulse().pulse_id != make_pulse([0.0, 1.0, 0.0]).pulse_id
    assert len(make_pulse().pulse_id) == 32
