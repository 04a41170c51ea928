"""What a store's answers look like, learned from what its agents cite.

Whatever the question, the chunks that answer a store's questions tend to share a shape:
in long conversations the answer is a turn that says something, rarely a short
acknowledgement, and in notes of terse facts it may be the short line beside a long
paragraph. That shape is a prior over chunks that holds for questions never asked, so it
can help new questions, which learned keys cannot.

The prior is each candidate's size (its length) as a percentile among the query's
candidates, p in [0, 1]: no store-wide statistic is kept, and it means the same in a
store of any size. Recall multiplies a candidate's relevance by 1 + strength * (2p - 1),
so the strength bounds how far the prior can move a chunk (like salience), and a
negative strength favours the shorter ones. The strength is learned like the
vector/word split (pulses.evidence): every cited success, before it teaches anything,
scores each candidate strength in STRENGTHS by the reciprocal rank it would have given
the cited chunks against no prior at all; recall uses the strength whose paired gain is
clearly above zero, and none until one is.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.evidence import rescored_gains

#: The strengths recall may learn (none is the prior).
STRENGTHS: Final = (-0.2, -0.1, 0.05, 0.1, 0.2, 0.3)
#: The largest strength allowed anywhere (a multiplier in [1 - it, 1 + it]).
MAX_STRENGTH: Final = 0.5


class InvalidPrior(ValueError):
    """A strength, list or stored statistic out of range; the message names it."""


def check_strength(strength: float) -> None:
    if not (math.isfinite(strength) and abs(strength) <= MAX_STRENGTH):
        raise InvalidPrior(f"the intrinsic prior's strength must be in [-0.5, 0.5], got {strength}")


def size_percentiles(lengths: npt.NDArray[np.floating]) -> npt.NDArray[np.float64]:
    """Each candidate's length as a percentile among them, ties sharing their mean rank."""
    count = len(lengths)
    if count == 0:
        return np.zeros(0, dtype=np.float64)
    if count == 1:
        return np.full(1, 0.5)
    values = np.asarray(lengths, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(count, dtype=np.float64)
    ranks[order] = np.arange(count, dtype=np.float64)
    # Ties: the mean of the ranks they span.
    unique, inverse = np.unique(values, return_inverse=True)
    if len(unique) < count:
        sums = np.bincount(inverse, weights=ranks)
        counts = np.bincount(inverse)
        ranks = (sums / counts)[inverse]
    percentiles: npt.NDArray[np.float64] = ranks / (count - 1)
    return percentiles


def multipliers(percentiles: npt.NDArray[np.float64], strength: float) -> npt.NDArray[np.float64]:
    """1 + strength * (2p - 1) for each candidate's size percentile p."""
    check_strength(strength)
    result: npt.NDArray[np.float64] = 1.0 + strength * (2.0 * percentiles - 1.0)
    return result


def gains_of_strengths(
    cited: Sequence[int],
    labels: npt.NDArray[np.int64],
    relevance: npt.NDArray[np.float64],
    lengths: npt.NDArray[np.floating],
) -> list[float] | None:
    """Per strength of STRENGTHS, the reciprocal-rank gain over no prior that it gives the
    cited chunks among these candidates (None when none of them is a candidate)."""
    if not (len(labels) == len(relevance) == len(lengths)):
        raise InvalidPrior("labels, relevance and lengths differ in length")
    if not np.all(np.isfinite(relevance)):
        raise InvalidPrior("relevance must be finite")
    position = {int(label): i for i, label in enumerate(labels.tolist())}
    targets = [position[c] for c in cited if c in position]
    percentiles = size_percentiles(lengths)
    return rescored_gains(
        targets, relevance, [relevance * multipliers(percentiles, s) for s in STRENGTHS]
    )
