"""Recall's learned-keys retriever: per chunk, how close the query is to a question the
chunk answered before (pulses.retrieval_keys), among the keys recall may use for it.

Which keys count is `KeyUse`: those of the similarity bands this store's new questions
showed they help in (pulses.key_gate), every live key (learning ranks with all and with
none to judge them), or none.
"""

from __future__ import annotations

import enum

import numpy as np

from dreamcycle.daemon.recall.learned_ranking import open_key_bands
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.key_gate import usable_similarities
from dreamcycle.pulses.retrieval_keys import alive
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store import retrieval_keys as key_store


class KeyUse(enum.Enum):
    """Which learned keys a ranking uses."""

    #: Those in the similarity bands the store's new questions showed they help in.
    GATED = "gated"
    #: Every live key at least `recall.key_min_similarity`-close (learning compares).
    ALL = "all"
    #: None: the unlearned ranking.
    NONE = "none"


def key_scores_of(
    rt: Runtime, vector: Vector, stamp: str, keys: KeyUse = KeyUse.GATED
) -> dict[int, float]:
    """Per chunk, the best cosine of the query to one of its usable keys."""
    if keys is KeyUse.NONE:
        return {}
    stamp = key_store.keys_stamp(rt.db, stamp)
    cache = recall_state(rt).cache
    cached = cache.get("keys", stamp)
    if cached is None:
        cached = cache.put("keys", stamp, key_store.all_keys(rt.db, rt.embedder.dim))
    chunks, matrix, weights, updated = cached
    if len(chunks) == 0:
        return {}
    half_life = rt.config.learning.key_half_life_s
    cosines = matrix @ vector
    # A key stands for the question it was learned from: only queries close to that
    # question (a repeat or a paraphrase) may use it, and only while it lives.
    usable = alive(weights, updated, rt.clock.now_ms(), half_life) & (
        cosines >= rt.config.recall.key_min_similarity
    )
    if keys is KeyUse.GATED:
        usable &= usable_similarities(cosines, open_key_bands(rt.db, rt.config))
    scaled = np.where(usable, cosines, -np.inf)
    best: dict[int, float] = {}
    for chunk, value in zip(chunks.tolist(), scaled.tolist(), strict=True):
        if value > best.get(chunk, -np.inf) and value > -np.inf:
            best[chunk] = value
    return best


def has_keys(rt: Runtime) -> bool:
    stamp = key_store.keys_stamp(rt.db, rt.db.change_stamp())
    cache = recall_state(rt).cache
    cached = cache.get("has_keys", stamp)
    if cached is None:
        cached = cache.put("has_keys", stamp, key_store.key_count(rt.db) > 0)
    return bool(cached)
