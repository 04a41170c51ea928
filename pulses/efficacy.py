"""The three efficacy checks of the learning loop, computed from what a peer recorded.

1. Recall hit rate: of the chunks that were in context for a decision, how many
   stand above the median salience? High means salience tracks what is used.
2. Attribution-salience correlation: does the credit a chunk received from
   outcomes (summed signed credit) agree with its current salience? Spearman's
   rank correlation over the chunks that received any.
3. Counterfactual replay: re-run recent successful decisions against the state
   after a sweep; what share of the chunks they found would recall still find?
   Low means forgetting removes the wrong things.

Pure functions over plain values; the daemon gathers the inputs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Final

import numpy as np

RECALL_HIT_RATE: Final = "recall_hit_rate"
ATTRIBUTION_CORRELATION: Final = "attribution_salience_correlation"
COUNTERFACTUAL_REPLAY: Final = "counterfactual_replay"
METRICS: Final = (RECALL_HIT_RATE, ATTRIBUTION_CORRELATION, COUNTERFACTUAL_REPLAY)


def recall_hit_rate(
    contexts: Sequence[Sequence[int]], salience: Mapping[int, float]
) -> float | None:
    """Share of context chunks (still held) whose salience is above the median of all held."""
    if not salience:
        return None
    median = float(np.median(np.fromiter(salience.values(), dtype=np.float64)))
    counted = above = 0
    for context in contexts:
        for label in context:
            value = salience.get(label)
            if value is None:
                continue
            counted += 1
            above += value > median
    return None if counted == 0 else above / counted


def _ranks(values: Sequence[float]) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
    order = np.argsort(np.asarray(values, dtype=np.float64), kind="stable")
    ranks = np.empty(len(values), dtype=np.float64)
    sorted_values = np.asarray(values, dtype=np.float64)[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start : end + 1]] = (start + end) / 2.0
        start = end + 1
    return ranks


def spearman(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Spearman's rank correlation (ties averaged); None when undefined."""
    if len(xs) != len(ys):
        raise ValueError(f"spearman needs equal lengths, got {len(xs)} and {len(ys)}")
    if len(xs) < 2:
        return None
    rx, ry = _ranks(xs), _ranks(ys)
    sx, sy = float(np.std(rx)), float(np.std(ry))
    if sx == 0 or sy == 0:
        return None
    value = float(np.mean((rx - rx.mean()) * (ry - ry.mean())) / (sx * sy))
    return max(-1.0, min(1.0, value)) if math.isfinite(value) else None


def attribution_correlation(
    credit: Mapping[int, float], salience: Mapping[int, float]
) -> float | None:
    """Spearman of summed credit against salience, over credited chunks still held."""
    labels = sorted(label for label in credit if label in salience)
    return spearman([credit[label] for label in labels], [salience[label] for label in labels])


def counterfactual_replay(
    found: Sequence[Sequence[int]], replayed: Sequence[Sequence[int]]
) -> float | None:
    """Share of the chunks each decision found that its replay still returns."""
    if len(found) != len(replayed):
        raise ValueError("counterfactual_replay needs one replay per decision")
    total = kept = 0
    for before, after in zip(found, replayed, strict=True):
        again = set(after)
        total += len(before)
        kept += sum(label in again for label in before)
    return None if total == 0 else kept / total
