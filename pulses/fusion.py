"""How much recall trusts vectors against words, learned from what agents cite.

Recall fuses a BM25 list and a cosine list by reciprocal rank. Which of the two
finds the chunks that answer a store's questions depends on the store:
conversations full of names and dates favour words, notes written in other
words than the questions favour vectors. A fixed split is right for neither, so
the split is learned.

Each cited success is a question no split was chosen on: given the two lists recall
had for it, every candidate split (SHARES) is scored by the fused reciprocal rank it
would have given the cited chunks, against the configured split on the same question
(a paired difference, pulses.evidence). Recall moves to the split with the best mean
gain only once that gain is clearly above zero (more than Z standard errors, after
MIN_EVIDENCE questions); until then, and whenever the evidence is mixed, the
configured split stays. Scoring the fused outcome rather than which list ranked the
cited chunk higher matters: counting wins settled where the two lists win equally
often (0.5 on conversations where 0.2 was 3 points of recall better).

Only successes that no learned key helped find are evidence: a chunk found through a
key was found by the question it learned, and its own cosine to that question is high
because an earlier question found it the same way, so those successes make the vector
list look better with every key learned (the split went to 0.8 on a store where words
find more, and to 0.2 on the same store without keys). The candidate splits stay inside
[0.2, 0.8], so neither list is ever switched off, and the total weight of the two lists
is kept, so fusion with the learned keys' list is unchanged in scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from dreamcycle.pulses.evidence import GridEvidence, InvalidEvidence, PairedGain

#: The vector shares recall may learn to use (a grid: a handful of outcomes a day cannot
#: resolve finer differences).
SHARES: Final = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


class InvalidFusion(ValueError):
    """A share or list out of range; the message names it."""


@dataclass(frozen=True)
class SplitEvidence:
    """Per candidate split, its paired gain over the configured split `configured`."""

    configured: float
    grid: GridEvidence = field(default_factory=lambda: GridEvidence(SHARES))

    def __post_init__(self) -> None:
        _check_share(self.configured)
        if self.grid.grid != SHARES:
            raise InvalidFusion(f"expected gains for the shares {SHARES}, got {self.grid.grid}")

    @property
    def gains(self) -> tuple[PairedGain, ...]:
        return self.grid.gains

    @property
    def evidence(self) -> int:
        """Cited chunks seen so far."""
        return self.grid.evidence

    def to_json(self) -> dict[str, object]:
        return {"configured": self.configured, **self.grid.to_json()}

    @classmethod
    def from_json(cls, value: object, configured: float) -> SplitEvidence:
        """What was stored; a fresh start when it was learned against another configured
        split (its gains are differences from that one)."""
        if not isinstance(value, Mapping) or "gains" not in value:
            raise InvalidFusion("stored split evidence has no gains")
        if value.get("configured") != configured:
            return cls(configured)
        try:
            return cls(configured, GridEvidence.from_json(value, SHARES))
        except InvalidEvidence as exc:
            raise InvalidFusion(str(exc)) from None


def fused_rank(
    target: int,
    vector_list: Sequence[int],
    lexical_list: Sequence[int],
    share: float,
    rrf_k: float,
) -> int | None:
    """The 1-based rank of `target` when the two lists (best first) are fused at `share`.

    None when neither list holds it. Ties go against the target, so a split earns
    nothing by tying.
    """
    vector_ranks = _ranks(vector_list)
    lexical_ranks = _ranks(lexical_list)
    if target not in vector_ranks and target not in lexical_ranks:
        return None

    def score(label: int) -> float:
        total = 0.0
        if label in vector_ranks:
            total += share / (rrf_k + vector_ranks[label])
        if label in lexical_ranks:
            total += (1.0 - share) / (rrf_k + lexical_ranks[label])
        return total

    mine = score(target)
    others = (set(vector_ranks) | set(lexical_ranks)) - {target}
    return 1 + sum(1 for label in others if score(label) >= mine)


def observe(
    state: SplitEvidence,
    cited: Sequence[int],
    vector_list: Sequence[int],
    lexical_list: Sequence[int],
    *,
    rrf_k: float,
) -> SplitEvidence:
    """`state` after the cited chunks of one decision (chunks neither list holds are skipped)."""
    if not (math.isfinite(rrf_k) and rrf_k >= 0):
        raise InvalidFusion(f"rrf_k must be finite and >= 0, got {rrf_k}")
    grid = state.grid
    for target in cited:
        base = fused_rank(target, vector_list, lexical_list, state.configured, rrf_k)
        if base is None:
            continue
        ranks = [fused_rank(target, vector_list, lexical_list, share, rrf_k) for share in SHARES]
        grid = grid.observe([1.0 / rank - 1.0 / base for rank in ranks if rank is not None])
    return SplitEvidence(state.configured, grid)


def best_share(state: SplitEvidence) -> float:
    """The split whose gain over the configured one is clearest; the configured one until
    some split is clearly better (ties: the split closer to the configured one)."""
    return state.grid.best(state.configured)


def split_weights(share: float, total: float) -> tuple[float, float]:
    """(vector weight, lexical weight) for a vector `share` of `total`."""
    _check_share(share)
    return share * total, (1.0 - share) * total


def _check_share(share: float) -> None:
    if not (math.isfinite(share) and 0.0 <= share <= 1.0):
        raise InvalidFusion(f"share must be in [0, 1], got {share}")


def _ranks(labels: Sequence[int]) -> Mapping[int, int]:
    ranks: dict[int, int] = {}
    for rank, label in enumerate(labels, start=1):
        ranks.setdefault(label, rank)
    return ranks
