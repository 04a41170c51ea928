"""Decision hashes, outcome validation and the outcome -> pulses conversion."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.constants import (
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_PULSE_TTL_S,
    OUTCOME_SIGMA,
)
from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.outcome import (
    Attribution,
    InvalidOutcome,
    Outcome,
    decision_hash,
    outcome_to_pulses,
)
from dreamcycle.pulses.propagate import propagate
from dreamcycle.pulses.pulse import PulseKind
from tests.bruteforce import BruteForceIndex

CHUNKS = {f"{n:064x}": np.eye(4, dtype=np.float32)[n] for n in range(3)}
UNKNOWN_CHUNK = "f" * 64
DECISION_TS = 1_760_000_000_123 << 16


def embedding_of(chunk: str) -> npt.NDArray[np.float32] | None:
    return CHUNKS.get(chunk)


def attribution() -> Attribution:
    return Attribution.for_decision(
        "peer-a", DECISION_TS, [UNKNOWN_CHUNK, *reversed(CHUNKS)], "ship the fix"
    )


def outcome(reward: float, reason: str = "outcome/tests") -> Outcome:
    return Outcome(
        decision_hash=attribution().decision_hash,
        reward=reward,
        observer_peer="peer-b",
        ts=DECISION_TS + 99,
        reason=reason,
    )


# ---- decision hash --------------------------------------------------------------


@given(st.permutations(sorted(CHUNKS)))
@settings(max_examples=20, deadline=None)
def test_decision_hash_ignores_chunk_order(chunks: list[str]) -> None:
    assert decision_hash("peer-a", 5, chunks, "x") == decision_hash(
        "peer-a", 5, sorted(CHUNKS), "x"
    )


def test_decision_hash_is_full_blake3_hex_and_depends_on_every_field() -> None:
    base = decision_hash("peer-a", 5, ["a", "b"], "text")
    assert len(base) == 64 and int(base, 16) >= 0
    variants = {
        decision_hash("peer-b", 5, ["a", "b"], "text"),
        decision_hash("peer-a", 6, ["a", "b"], "text"),
        decision_hash("peer-a", 5, ["a"], "text"),
        decision_hash("peer-a", 5, ["a", "b"], "text!"),
    }
    assert base not in variants and len(variants) == 4


def test_decision_hash_field_boundaries_are_unambiguous() -> None:
    assert decision_hash("a", 1, ["b,c"], "") != decision_hash("a", 1, ["b", "c"], "")
    assert decision_hash('a","b', 1, [], "") != decision_hash("a", 1, ["b"], "")
    assert decision_hash("a", 1, [], "x") != decision_hash("ax", 1, [], "")


def test_decision_hash_rejects_non_integer_ts() -> None:
    with pytest.raises(InvalidOutcome, match="ts must be an integer"):
        decision_hash("peer-a", 1.5, ["a"], "")  # type: ignore[arg-type]


def test_attribution_for_decision_sorts_and_hashes() -> None:
    attr = attribution()
    assert attr.chunk_hashes == tuple(sorted({UNKNOWN_CHUNK, *CHUNKS}))
    assert attr.decision_hash == decision_hash(
        "peer-a", DECISION_TS, attr.chunk_hashes, "ship the fix"
    )
    attr.validate()


# ---- outcome validation ---------------------------------------------------------


@pytest.mark.parametrize(
    ("broken", "message"),
    [
        ({"reward": 1.5}, r"reward must be finite and in \[-1.0, 1.0\], got 1.5"),
        ({"reward": -1.01}, r"reward must be finite and in"),
        ({"reward": math.nan}, r"reward must be finite and in"),
        ({"decision_hash": "abc"}, r"decision_hash must be 64 lowercase hex"),
        ({"decision_hash": "A" * 64}, r"decision_hash must be 64 lowercase hex"),
        ({"reason": ""}, r"reason must not be empty"),
        ({"observer_peer": ""}, r"observer_peer must not be empty"),
    ],
)
def test_outcome_validation_names_the_problem(broken: dict[str, object], message: str) -> None:
    fields = {**outcome(0.5).__dict__, **broken}
    with pytest.raises(InvalidOutcome, match=message):
        Outcome(**fields).validate()


def test_outcome_reward_bounds_are_inclusive() -> None:
    outcome(1.0).validate()
    outcome(-1.0).validate()


# ---- conversion -----------------------------------------------------------------


def test_positive_reward_gives_reward_pulses_with_outcome_parameters() -> None:
    pulses = outcome_to_pulses(outcome(0.8), attribution(), embedding_of, index_version="v1")
    assert [p.seed_hash for p in pulses] == sorted(CHUNKS)
    for pulse in pulses:
        pulse.validate()
        assert pulse.kind is PulseKind.REWARD
        assert pulse.strength == 0.8
        assert (pulse.sigma, pulse.max_hops, pulse.k, pulse.decay_per_hop) == (
            OUTCOME_SIGMA,
            OUTCOME_MAX_HOPS,
            OUTCOME_K,
            OUTCOME_DECAY_PER_HOP,
        )
        assert pulse.ttl_s == OUTCOME_PULSE_TTL_S
        assert pulse.origin_peer == "peer-a"
        assert pulse.reason == "outcome/tests"
        assert pulse.ts == DECISION_TS + 99
        assert pulse.index_version == "v1"
        assert pulse.pulse_id == pulse.computed_id()
        assert pulse.seed_hash is not None
        np.testing.assert_array_equal(pulse.seed_embedding, CHUNKS[pulse.seed_hash])


def test_negative_reward_gives_decay_pulses_with_positive_strength() -> None:
    pulses = outcome_to_pulses(outcome(-0.25), attribution(), embedding_of, index_version="v1")
    assert len(pulses) == len(CHUNKS)
    assert all(p.kind is PulseKind.DECAY and p.strength == 0.25 for p in pulses)


@pytest.mark.parametrize("reward", [0.0, -0.0])
def test_zero_reward_credits_nothing(reward: float) -> None:
    assert outcome_to_pulses(outcome(reward), attribution(), embedding_of, index_version="v1") == []


def test_chunks_without_embedding_are_skipped() -> None:
    pulses = outcome_to_pulses(outcome(0.5), attribution(), embedding_of, index_version="v1")
    assert UNKNOWN_CHUNK not in {p.seed_hash for p in pulses}
    assert outcome_to_pulses(outcome(0.5), attribution(), lambda _: None, index_version="v1") == []


def test_conversion_is_deterministic_across_converters() -> None:
    first = outcome_to_pulses(outcome(0.5), attribution(), embedding_of, index_version="v1")
    # Another peer: fresh objects, its own copies of the same stored embeddings.
    copies = {chunk: vector.copy() for chunk, vector in CHUNKS.items()}
    second = outcome_to_pulses(outcome(0.5), attribution(), copies.get, index_version="v1")
    assert [p.pulse_id for p in first] == [p.pulse_id for p in second]
    assert len({p.pulse_id for p in first}) == len(first)
    other_reason = outcome_to_pulses(
        outcome(0.5, reason="outcome/other"), attribution(), embedding_of, index_version="v1"
    )
    assert not {p.pulse_id for p in first} & {p.pulse_id for p in other_reason}


def test_mismatched_attribution_is_refused() -> None:
    other = Attribution.for_decision("peer-a", DECISION_TS, list(CHUNKS), "another decision")
    with pytest.raises(InvalidOutcome, match="paired with the attribution of decision"):
        outcome_to_pulses(outcome(0.5), other, embedding_of, index_version="v1")


def test_invalid_outcome_is_refused_before_conversion() -> None:
    with pytest.raises(InvalidOutcome, match="reward"):
        outcome_to_pulses(outcome(2.0), attribution(), embedding_of, index_version="v1")


def test_reward_pulse_raises_the_credited_chunk_and_spares_unrelated_ones() -> None:
    index = BruteForceIndex(dim=4)
    state = InMemorySalience()
    for label, vector in enumerate(CHUNKS.values()):
        index.add(label, vector)
        state.add(label, 0.5)
    index.add(3, np.array([1.0, 0.05, 0.0, 0.0]))
    state.add(3, 0.5)
    attr = Attribution.for_decision("peer-a", DECISION_TS, [next(iter(CHUNKS))])
    win = Outcome(attr.decision_hash, 1.0, "peer-b", DECISION_TS + 1, "outcome/win")
    (pulse,) = outcome_to_pulses(win, attr, embedding_of, index_version="v1")
    propagate(pulse, index, state)
    snapshot = state.snapshot()
    assert snapshot[0] == pytest.approx(0.5 + OUTCOME_DECAY_PER_HOP)
    assert 0.5 + 0.25 < snapshot[3] < snapshot[0]
    # Orthogonal chunks sit at distance 1, about 6.7 sigma: the kernel all but vanishes.
    assert 0.5 < snapshot[1] < 0.5 + 1e-9
