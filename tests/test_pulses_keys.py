"""Learned retrieval keys: add, reinforce, weaken, decay, evict, match."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from dreamcycle.pulses import retrieval_keys
from dreamcycle.pulses.retrieval_keys import (
    KEY_HALF_LIFE_S,
    MAX_KEY_WEIGHT,
    MAX_KEYS_PER_CHUNK,
    MIN_KEY_WEIGHT,
    SAME_KEY_SIMILARITY,
    LearnedKey,
    alive,
)
from dreamcycle.pulses.vectors import Vector

T0 = 1_760_000_000_000
#: Keys fade only when given a half-life (a key does not by default): these tests use one.
HALF_LIFE_S = 60 * 86_400.0
learn = functools.partial(retrieval_keys.learn, half_life_s=HALF_LIFE_S)
effective_weight = functools.partial(retrieval_keys.effective_weight, half_life_s=HALF_LIFE_S)
key_similarity = functools.partial(retrieval_keys.key_similarity, half_life_s=HALF_LIFE_S)
HALF_LIFE_MS = int(HALF_LIFE_S * 1000)


def unit(*components: float) -> Vector:
    vector = np.asarray(components, dtype=np.float32)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


E0 = unit(1, 0, 0, 0)
E1 = unit(0, 1, 0, 0)
E2 = unit(0, 0, 1, 0)
# cos(E0, NEAR) = 0.95 >= SAME_KEY_SIMILARITY; cos(E0, FAR) = 0.8 < it.
NEAR = unit(0.95, math.sqrt(1 - 0.95**2), 0, 0)
FAR = unit(0.8, 0.6, 0, 0)


def key(
    embedding: Vector, weight: float, updated_ms: int = T0, text: str | None = None
) -> LearnedKey:
    return LearnedKey(embedding=embedding, weight=weight, updated_ms=updated_ms, text=text)


def test_constants_are_the_documented_ones() -> None:
    assert MAX_KEYS_PER_CHUNK == 8
    assert SAME_KEY_SIMILARITY == 0.92
    assert KEY_HALF_LIFE_S == 0.0
    assert (MIN_KEY_WEIGHT, MAX_KEY_WEIGHT) == (0.05, 1.0)
    assert float(np.dot(E0, NEAR)) == pytest.approx(0.95, abs=1e-6)
    assert float(np.dot(E0, FAR)) == pytest.approx(0.8, abs=1e-6)


# ---- learn: adding and reinforcing ------------------------------------------------------


def test_a_positive_amount_adds_a_key() -> None:
    keys = learn([], E0, 0.3, T0, text="how do I deploy")
    assert len(keys) == 1
    (only,) = keys
    assert only.weight == pytest.approx(0.3)
    assert only.updated_ms == T0
    assert only.text == "how do I deploy"
    assert only.embedding.dtype == np.float32
    np.testing.assert_array_equal(only.embedding, E0)


def test_a_new_key_is_capped_at_max_weight() -> None:
    (only,) = learn([], E0, 5.0, T0)
    assert only.weight == MAX_KEY_WEIGHT


def test_the_same_query_reinforces_the_key() -> None:
    keys = learn([], E0, 0.3, T0)
    keys = learn(keys, E0, 0.4, T0)
    assert len(keys) == 1
    assert keys[0].weight == pytest.approx(0.7)
    keys = learn(keys, E0, 0.4, T0 + 1000, text="later words")
    assert len(keys) == 1
    assert keys[0].weight == MAX_KEY_WEIGHT
    assert keys[0].updated_ms == T0 + 1000
    assert keys[0].text == "later words"


def test_reinforcement_keeps_the_text_when_none_is_given() -> None:
    keys = learn([], E0, 0.3, T0, text="first words")
    keys = learn(keys, E0, 0.3, T0)
    assert keys[0].text == "first words"


def test_reinforcement_applies_to_the_decayed_weight() -> None:
    keys = [key(E0, 0.8)]
    keys = learn(keys, E0, 0.1, T0 + HALF_LIFE_MS)
    assert len(keys) == 1
    assert keys[0].weight == pytest.approx(0.5)  # 0.8 / 2 + 0.1
    assert keys[0].updated_ms == T0 + HALF_LIFE_MS


def test_a_close_query_reinforces_the_existing_key() -> None:
    keys = learn([key(E0, 0.3)], NEAR, 0.2, T0)
    assert len(keys) == 1
    assert keys[0].weight == pytest.approx(0.5)
    # The key keeps its own embedding: a close query does not move it.
    np.testing.assert_array_equal(keys[0].embedding, E0)


def test_a_dissimilar_query_adds_a_second_key() -> None:
    keys = learn([key(E0, 0.3)], FAR, 0.2, T0)
    assert len(keys) == 2
    assert keys[0].weight == pytest.approx(0.3)
    np.testing.assert_array_equal(keys[1].embedding, FAR)
    assert keys[1].weight == pytest.approx(0.2)


def test_the_closest_key_is_the_one_reinforced() -> None:
    keys = [key(E1, 0.3), key(E0, 0.3)]
    keys = learn(keys, NEAR, 0.2, T0)
    assert [k.weight for k in keys] == pytest.approx([0.3, 0.5])


def test_more_than_max_keys_evicts_the_weakest() -> None:
    basis = [unit(*[1.0 if i == n else 0.0 for i in range(10)]) for n in range(10)]
    weights = [0.9, 0.8, 0.7, 0.6, 0.15, 0.5, 0.4, 0.3]
    keys = [key(basis[n], w) for n, w in enumerate(weights)]
    assert len(keys) == MAX_KEYS_PER_CHUNK
    keys = learn(keys, basis[8], 0.25, T0)
    assert len(keys) == MAX_KEYS_PER_CHUNK
    assert sorted(k.weight for k in keys) == pytest.approx(
        sorted([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.25])
    )
    # The weakest (0.15, on basis[4]) went; the new key stayed.
    assert not any(float(np.dot(k.embedding, basis[4])) > 0.5 for k in keys)
    assert any(float(np.dot(k.embedding, basis[8])) > 0.5 for k in keys)
    # A new key weaker than all others is itself the weakest.
    again = learn(keys, basis[9], 0.1, T0)
    assert len(again) == MAX_KEYS_PER_CHUNK
    assert not any(float(np.dot(k.embedding, basis[9])) > 0.5 for k in again)


def test_max_keys_can_be_lowered() -> None:
    keys = learn([key(E0, 0.5), key(E1, 0.2)], E2, 0.4, T0, max_keys=2)
    assert sorted(k.weight for k in keys) == pytest.approx([0.4, 0.5])


# ---- learn: weakening ----------------------------------------------------------------------


def test_a_negative_amount_weakens_only_the_matching_key_by_exactly_its_size() -> None:
    keys = [key(E0, 0.6), key(E1, 0.6)]
    weakened = learn(keys, NEAR, -0.25, T0)
    assert len(weakened) == 2
    assert weakened[0].weight == pytest.approx(0.35)
    assert weakened[1].weight == pytest.approx(0.6)


def test_weakening_applies_after_decay() -> None:
    keys = [key(E0, 0.8), key(E1, 0.8)]
    weakened = learn(keys, E0, -0.1, T0 + HALF_LIFE_MS)
    assert weakened[0].weight == pytest.approx(0.3)  # 0.8 / 2 - 0.1
    assert weakened[1].weight == pytest.approx(0.4)  # only decayed
    assert all(k.updated_ms == T0 + HALF_LIFE_MS for k in weakened)


def test_a_negative_amount_never_adds_a_key() -> None:
    assert learn([], E0, -0.5, T0) == []
    keys = [key(E0, 0.6)]
    unchanged = learn(keys, FAR, -0.5, T0 + HALF_LIFE_MS)
    assert unchanged == keys
    assert unchanged is not keys


def test_weakening_to_below_the_minimum_drops_the_key() -> None:
    keys = [key(E0, 0.3), key(E1, 0.3)]
    weakened = learn(keys, E0, -0.28, T0)
    assert len(weakened) == 1
    np.testing.assert_array_equal(weakened[0].embedding, E1)
    assert learn([key(E0, 0.3)], E0, -1.0, T0) == []


def test_a_zero_amount_without_a_match_changes_nothing() -> None:
    keys = [key(E0, 0.6)]
    assert learn(keys, E1, 0.0, T0 + HALF_LIFE_MS) == keys


@pytest.mark.parametrize("amount", [math.nan, math.inf, -math.inf])
def test_non_finite_amount_is_refused(amount: float) -> None:
    with pytest.raises(ValueError, match="key amount must be finite"):
        learn([], E0, amount, T0)


# ---- decay ------------------------------------------------------------------------------


def test_effective_weight_halves_after_a_half_life() -> None:
    k = key(E0, 0.8)
    assert effective_weight(k, T0) == pytest.approx(0.8)
    assert effective_weight(k, T0 + HALF_LIFE_MS) == pytest.approx(0.4)
    assert effective_weight(k, T0 + 2 * HALF_LIFE_MS) == pytest.approx(0.2)
    assert effective_weight(k, T0 + HALF_LIFE_MS // 2) == pytest.approx(0.8 / math.sqrt(2))
    # A clock that stepped back does not inflate the weight.
    assert effective_weight(k, T0 - HALF_LIFE_MS) == pytest.approx(0.8)
    # A custom half-life, and the no-decay cases.
    assert effective_weight(k, T0 + 10_000, half_life_s=10.0) == pytest.approx(0.4)
    assert effective_weight(k, T0 + HALF_LIFE_MS, half_life_s=0.0) == 0.8
    assert effective_weight(k, T0 + HALF_LIFE_MS, half_life_s=math.inf) == 0.8


def test_keys_decayed_below_the_minimum_are_dropped_at_the_next_learn() -> None:
    # 0.16 after two half-lives is 0.04 < MIN_KEY_WEIGHT; 0.4 is 0.1 and stays.
    keys = [key(E0, 0.16), key(E1, 0.4)]
    now = T0 + 2 * HALF_LIFE_MS
    learned = learn(keys, E2, 0.3, now)
    assert len(learned) == 2
    np.testing.assert_array_equal(learned[0].embedding, E1)
    assert learned[0].weight == pytest.approx(0.1)
    assert learned[0].updated_ms == now
    np.testing.assert_array_equal(learned[1].embedding, E2)
    assert learned[1].weight == pytest.approx(0.3)


# ---- key_similarity --------------------------------------------------------------------------


def test_key_similarity_is_the_best_cosine_of_a_live_key() -> None:
    keys = [key(E0, 0.5), key(FAR, 1.0)]
    # Weight does not scale the match: E0 matches its own key at 1.0.
    assert key_similarity(E0, keys, T0) == pytest.approx(1.0, abs=1e-6)
    # E1: E0 gives 0; FAR gives 0.6.
    assert key_similarity(E1, keys, T0) == pytest.approx(0.6, abs=1e-6)
    # E2 is orthogonal to both.
    assert key_similarity(E2, keys, T0) == pytest.approx(0.0, abs=1e-6)


def test_dead_keys_do_not_match() -> None:
    # E0's key has decayed below MIN_KEY_WEIGHT (0.5 -> 0.03 after four half-lives).
    keys = [key(E0, 0.5, updated_ms=T0 - 4 * HALF_LIFE_MS), key(FAR, 1.0)]
    assert key_similarity(E0, keys, T0) == pytest.approx(0.8, abs=1e-6)
    assert key_similarity(E0, keys[:1], T0) is None


def test_alive_masks_keys_by_decayed_weight() -> None:
    weights = np.array([1.0, 0.5, 0.04])
    mask = alive(weights, [T0, T0 - 4 * HALF_LIFE_MS, T0], T0, HALF_LIFE_MS / 1000)
    assert mask.tolist() == [True, False, False]


def test_key_similarity_of_no_keys_is_none() -> None:
    assert key_similarity(E0, [], T0) is None


def test_key_similarity_can_be_negative() -> None:
    assert key_similarity(-E0, [key(E0, 0.5)], T0) == pytest.approx(-1.0)


def test_without_a_half_life_keys_live_by_their_stored_weight_alone() -> None:
    weights = np.array([1.0, 0.5, 0.04])
    long_ago = T0 - 100 * HALF_LIFE_MS
    for half_life_s in (KEY_HALF_LIFE_S, math.inf):
        mask = alive(weights, [long_ago, long_ago, T0], T0, half_life_s)
        assert mask.tolist() == [True, True, False]
    old = key(E0, 0.5, updated_ms=long_ago)
    assert retrieval_keys.effective_weight(old, T0) == 0.5
    assert retrieval_keys.key_similarity(E0, [old], T0) == pytest.approx(1.0)
