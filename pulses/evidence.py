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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

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


@dataclass(frozen=True)
class GridEvidence:
    """Per candidate value of one learned setting (`grid`), its paired gain over the
    unlearned value: the setting moves to the value whose gain is clearest, and only once
    it is clearly above zero."""

    grid: tuple[float, ...]
    gains: tuple[PairedGain, ...] = ()

    def __post_init__(self) -> None:
        if not self.gains:
            object.__setattr__(self, "gains", tuple(PairedGain() for _ in self.grid))
        if len(self.gains) != len(self.grid):
            raise InvalidEvidence(f"expected {len(self.grid)} gains, got {len(self.gains)}")

    @property
    def evidence(self) -> int:
        return max((g.n for g in self.gains), default=0)

    def observe(self, gains: Sequence[float]) -> GridEvidence:
        """After one question: `gains[i]` is what value `grid[i]` gained on it."""
        if len(gains) != len(self.grid):
            raise InvalidEvidence(f"expected {len(self.grid)} gains, got {len(gains)}")
        return GridEvidence(
            self.grid, tuple(g.add(x) for g, x in zip(self.gains, gains, strict=True))
        )

    def best(self, unlearned: float) -> float:
        """The value whose gain over `unlearned` is clearest; `unlearned` until one is
        clearly better (ties: the value closer to `unlearned`)."""
        better = [
            (gain.mean, -abs(value - unlearned), value)
            for value, gain in zip(self.grid, self.gains, strict=True)
            if gain.verdict(prior=False) and gain.mean > 0
        ]
        return max(better)[2] if better else unlearned

    def to_json(self) -> dict[str, object]:
        return {"grid": list(self.grid), "gains": [g.to_json() for g in self.gains]}

    @classmethod
    def from_json(cls, value: object, grid: tuple[float, ...]) -> GridEvidence:
        """What was stored; a fresh start when it was learned over another grid."""
        if not isinstance(value, Mapping) or list(value.get("grid", ())) != list(grid):
            return cls(grid)
        gains = value.get("gains")
        if not isinstance(gains, Sequence):
            raise InvalidEvidence(f"stored gains must be a list, got {gains!r}")
        return cls(grid, tuple(PairedGain.from_json(g) for g in gains))


def rescored_gains(
    targets: Sequence[int],
    base: npt.NDArray[np.float64],
    variants: Sequence[npt.NDArray[np.float64]],
) -> list[float] | None:
    """Per variant scoring of the same candidates, the mean over `targets` (candidate
    positions) of the reciprocal rank it gives minus the one `base` gives; ties count
    against the target. None without targets."""
    if not targets:
        return None
    gains = []
    for scores in variants:
        total = 0.0
        for target in targets:
            total += 1.0 / np.count_nonzero(scores >= scores[target])
            total -= 1.0 / np.count_nonzero(base >= base[target])
        gains.append(total / len(targets))
    return gains


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
