"""Learned retrieval keys: the questions a chunk has been shown to answer.

One chunk answers different questions, so a single salience per chunk cannot
say *which* question it is good for. A credited success adds the decision's
query (its embedding, and its words where they are known) to the chunk as a
key; recall then matches a query against a chunk's keys as well as against the
chunk itself. Keys are bounded per chunk (the weakest goes), a credited failure
weakens the key that matches the failed query, their weight may decay with
disuse (off by default), and they go with the chunk when it is tombstoned.

Everything here is pure: it takes a chunk's keys and returns the new list.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Vector

#: Keys kept per chunk; the weakest goes when a new one would exceed it.
MAX_KEYS_PER_CHUNK: Final = 8
#: A query at least this close to a key reinforces (or weakens) that key instead of adding one.
SAME_KEY_SIMILARITY: Final = 0.92
#: A key's weight halves over this many seconds without reinforcement; 0: it does not fade
#: with time, only when a credited miss weakens it or a stronger key takes its place. Not
#: fading is the default: a store asked rarely would forget what it learned by the calendar
#: alone, and a key of a question asked again months later is what finds its answer.
KEY_HALF_LIFE_S: Final = 0.0
#: Keys whose effective weight falls below this are dropped.
MIN_KEY_WEIGHT: Final = 0.05
#: A key's weight never exceeds this.
MAX_KEY_WEIGHT: Final = 1.0


@dataclass(frozen=True)
class LearnedKey:
    """One key: the query embedding, its words (None when they did not travel)."""

    embedding: Vector
    weight: float
    updated_ms: int
    text: str | None = None


def _fades(half_life_s: float) -> bool:
    """Whether keys lose weight with time under this half-life (0 or infinite: never)."""
    return 0 < half_life_s < math.inf


def effective_weight(key: LearnedKey, now_ms: int, half_life_s: float = KEY_HALF_LIFE_S) -> float:
    """The key's weight after decay since it was last reinforced."""
    elapsed_s = max(0.0, (now_ms - key.updated_ms) / 1000.0)
    if not _fades(half_life_s):
        return key.weight
    return key.weight * math.pow(0.5, elapsed_s / half_life_s)


def _closest(keys: Sequence[LearnedKey], query: Vector) -> tuple[int, float]:
    best, best_similarity = -1, -math.inf
    for position, key in enumerate(keys):
        similarity = float(np.dot(key.embedding, query))
        if similarity > best_similarity:
            best, best_similarity = position, similarity
    return best, best_similarity


def _settled(keys: Sequence[LearnedKey], now_ms: int, half_life_s: float) -> list[LearnedKey]:
    """Decay folded into the stored weight, dead keys dropped."""
    out: list[LearnedKey] = []
    for key in keys:
        weight = effective_weight(key, now_ms, half_life_s)
        if weight >= MIN_KEY_WEIGHT:
            out.append(replace(key, weight=weight, updated_ms=max(key.updated_ms, now_ms)))
    return out


def learn(
    keys: Sequence[LearnedKey],
    query: Vector,
    amount: float,
    now_ms: int,
    *,
    text: str | None = None,
    max_keys: int = MAX_KEYS_PER_CHUNK,
    half_life_s: float = KEY_HALF_LIFE_S,
) -> list[LearnedKey]:
    """The chunk's keys after a credited outcome of signed `amount` for `query`.

    A positive amount reinforces the matching key (or adds one, evicting the
    weakest beyond `max_keys`); a negative one weakens only the matching key,
    by at most |amount|, and never adds one. Unmatched keys only decay.
    """
    if not math.isfinite(amount):
        raise ValueError(f"key amount must be finite, got {amount}")
    current = keys
    position, similarity = _closest(current, query)
    matched = position >= 0 and similarity >= SAME_KEY_SIMILARITY
    updated = list(current)
    if matched:
        key = updated[position]
        weight = min(MAX_KEY_WEIGHT, max(0.0, effective_weight(key, now_ms, half_life_s) + amount))
        updated[position] = replace(
            key, weight=weight, updated_ms=now_ms, text=key.text if text is None else text
        )
    elif amount > 0:
        updated.append(
            LearnedKey(
                embedding=np.ascontiguousarray(query, dtype=np.float32),
                weight=min(MAX_KEY_WEIGHT, amount),
                updated_ms=now_ms,
                text=text,
            )
        )
    if not matched and amount <= 0:
        return list(keys)
    settled = _settled(updated, now_ms, half_life_s)
    if len(settled) > max_keys:
        settled.sort(key=lambda k: (-k.weight, -k.updated_ms))
        settled = settled[:max_keys]
    return settled


def key_similarity(
    query: Vector, keys: Sequence[LearnedKey], now_ms: int, half_life_s: float = KEY_HALF_LIFE_S
) -> float | None:
    """The best cosine of `query` to a key that is still alive.

    Weight decides how long a key lives and how far a miss weakens it, not how
    well it matches: a question asked again two months later must still find
    what answered it (scaling by weight halved that match and lost it).
    """
    best: float | None = None
    for key in keys:
        if effective_weight(key, now_ms, half_life_s) < MIN_KEY_WEIGHT:
            continue
        value = float(np.dot(key.embedding, query))
        if best is None or value > best:
            best = value
    return best


def alive(
    weights: npt.NDArray[np.float64],
    updated_ms: Sequence[int],
    now_ms: int,
    half_life_s: float = KEY_HALF_LIFE_S,
) -> npt.NDArray[np.bool_]:
    """Which of many keys are still alive (recall checks every key per query)."""
    if not _fades(half_life_s):
        return np.asarray(weights, dtype=np.float64) >= MIN_KEY_WEIGHT
    elapsed_s = np.maximum(0.0, (now_ms - np.asarray(updated_ms, dtype=np.float64)) / 1000.0)
    decayed = weights * np.power(0.5, elapsed_s / half_life_s)
    mask: npt.NDArray[np.bool_] = decayed >= MIN_KEY_WEIGHT
    return mask
