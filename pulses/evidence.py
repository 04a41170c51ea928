"""Paired evidence for or against something learned, from the store's own questions.

Whatever recall learns (the vector/word split, the questions chunks answered) is judged
the same way: each cited success, before it teaches anything, is a question the learned
part has not seen. Its gain is how much better the learned ranking put the cited chunks
than the unlearned one (a difference of reciprocal ranks, in [-1, 1]). The running mean
and variance of that paired difference say whether the learned part helps on new
questions of this store, and how sure that is; a verdict leaves the prior only when the
mean is more than Z standard errors away from zero, after MIN_EVIDENCE questions.

The mean is plain up to MEMORY questions and exponentially weighted after, so a store
whose questions change can still change its verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: Questions before a verdict may leave its prior.
MIN_EVIDENCE: Final = 20
#: Standard errors the mean gain must be away from zero to leave the prior.
Z: Final = 2.0
#: Questions the running statistics remember at full weight (then 1 / MEMORY each).
MEMORY: Final = 1000


class InvalidEvidence(ValueError):
    """A gain or a stored statistic out of range; the message names it."""


@dataclass(frozen=True)
class PairedGain:
    """Mean and variance of the learned-minus-unlearned gain over `n` questions."""

    n: int = 0
    mean: float = 0.0
    variance: float = 0.0

    def __post_init__(self) -> None:
        if self.n < 0:
            raise InvalidEvidence(f"evidence count must be >= 0, got {self.n}")
        if not (math.isfinite(self.mean) and -1.0 <= self.mean <= 1.0):
            raise InvalidEvidence(f"mean gain must be in [-1, 1], got {self.mean}")
        if not (math.isfinite(self.variance) and 0.0 <= self.variance <= 4.0):
            raise InvalidEvidence(f"gain variance must be in [0, 4], got {self.variance}")

    def add(self, gain: float, memory: int = MEMORY) -> PairedGain:
        """The statistics with one more question's gain."""
        if not (math.isfinite(gain) and -1.0 <= gain <= 1.0):
            raise InvalidEvidence(f"a gain must be in [-1, 1], got {gain}")
        weight = 1.0 / min(self.n + 1, memory)
        delta = gain - self.mean
        mean = self.mean + weight * delta
        # West's weighted update: with weight 1/(n+1) it is Welford's population variance.
        variance = (1.0 - weight) * (self.variance + weight * delta * delta)
        return PairedGain(self.n + 1, min(1.0, max(-1.0, mean)), min(4.0, max(0.0, variance)))

    def t_statistic(self, memory: int = MEMORY) -> float:
        """The mean in standard errors (sample variance over the questions remembered)."""
        effective = min(self.n, memory)
        if effective < 2:
            return 0.0
        sample_variance = self.variance * effective / (effective - 1)
        if sample_variance == 0.0:
            return math.copysign(math.inf, self.mean) if self.mean else 0.0
        return self.mean / math.sqrt(sample_variance / effective)

    def verdict(self, prior: bool, *, min_evidence: int = MIN_EVIDENCE, z: float = Z) -> bool:
        """Use the learned part? The prior until the evidence is clear either way."""
        if self.n < min_evidence:
            return prior
        t = self.t_statistic()
        if t > z:
            return True
        if t < -z:
            return False
        return prior

    def to_json(self) -> list[float]:
        return [self.n, self.mean, self.variance]

    @classmethod
    def from_json(cls, value: object) -> PairedGain:
        if not (isinstance(value, Sequence) and len(value) == 3):
            raise InvalidEvidence(f"expected [n, mean, variance], got {value!r}")
        n, mean, variance = value
        if isinstance(n, bool) or not isinstance(n, int | float) or int(n) != n:
            raise InvalidEvidence(f"evidence count must be an integer, got {n!r}")
        return cls(int(n), float(mean), float(variance))


def reciprocal_rank_gain(
    targets: Sequence[int], learned: Sequence[int], unlearned: Sequence[int]
) -> float | None:
    """Mean over `targets` of 1/rank in `learned` minus 1/rank in `unlearned` (0 when a list
    lacks it); None without targets."""
    if not targets:
        return None
    learned_ranks = {label: rank for rank, label in enumerate(learned, start=1)}
    unlearned_ranks = {label: rank for rank, label in enumerate(unlearned, start=1)}
    total = 0.0
    for target in targets:
        a, b = learned_ranks.get(target), unlearned_ranks.get(target)
        total += (1.0 / a if a else 0.0) - (1.0 / b if b else 0.0)
    return total / len(targets)
