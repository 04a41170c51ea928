"""How much recall trusts vectors against words, learned from what agents cite.

Recall fuses a BM25 list and a cosine list by reciprocal rank. Which of the two
finds the chunks that answer a store's questions depends on the store:
conversations full of names and dates favour words, notes written in other
words than the questions favour vectors. A fixed split is right for neither, so
the split is learned.

Each cited success is evidence: given the two lists recall had for the question,
the fused rank each candidate split (SHARES) would have given the cited chunk.
Every split keeps an average of the reciprocal rank it would have achieved, and
recall uses the split with the best average: the one that would have put the
chunks agents actually used highest, on their own questions. Counting which
list ranked a cited chunk higher instead, a first version, settled where the
two lists win equally often (0.5 on conversations where 0.2 was 3 points of
recall better); scoring the fused outcome does not.

The average is the plain mean of everything seen until 1/ALPHA cited chunks,
then a moving average of step ALPHA, so a store whose questions change can still
move it. A faster step (0.05, a memory of some 20 chunks) let the split wander:
the splits' averages differ by a few percent, and on the same conversations the
learned share ended at 0.2 with the sweep on and at 0.6 with it off (held-out
recall@5 58.4 against 47.0). Since what recall finds is what agents can cite, a
wander feeds itself; the mean, on the same citations, stays at 0.2 throughout.

Until MIN_EVIDENCE cited chunks have been seen the configured split stays, so
a handful of outcomes cannot move it; the candidate splits stay inside
[0.2, 0.8], so neither list is ever switched off. The total weight of the two
lists is kept, so fusion with the learned keys' list is unchanged in scale.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

#: The vector shares recall may learn to use (a grid: a handful of outcomes a day cannot
#: resolve finer differences).
SHARES: Final = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
#: Step of each split's moving average per cited chunk, once 1/ALPHA chunks were seen
#: (the plain mean before).
ALPHA: Final = 0.01
#: Cited chunks seen before the learned split replaces the configured one.
MIN_EVIDENCE: Final = 20


class InvalidFusion(ValueError):
    """A share, step or list out of range; the message names it."""


@dataclass(frozen=True)
class SplitScores:
    """Per candidate split, the average of the cited chunks' reciprocal fused rank."""

    scores: tuple[float, ...] = tuple(0.0 for _ in SHARES)
    evidence: int = 0

    def __post_init__(self) -> None:
        if len(self.scores) != len(SHARES):
            raise InvalidFusion(f"expected {len(SHARES)} split scores, got {len(self.scores)}")
        if not all(math.isfinite(s) and 0.0 <= s <= 1.0 for s in self.scores):
            raise InvalidFusion(f"split scores must be in [0, 1], got {self.scores}")
        if self.evidence < 0:
            raise InvalidFusion(f"evidence must be >= 0, got {self.evidence}")


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
    state: SplitScores,
    cited: Sequence[int],
    vector_list: Sequence[int],
    lexical_list: Sequence[int],
    *,
    rrf_k: float,
    alpha: float = ALPHA,
) -> SplitScores:
    """`state` after the cited chunks of one decision (chunks neither list holds are skipped)."""
    if not 0.0 < alpha <= 1.0:
        raise InvalidFusion(f"alpha must be in (0, 1], got {alpha}")
    if not (math.isfinite(rrf_k) and rrf_k >= 0):
        raise InvalidFusion(f"rrf_k must be finite and >= 0, got {rrf_k}")
    scores, evidence = list(state.scores), state.evidence
    for target in cited:
        ranks = [fused_rank(target, vector_list, lexical_list, s, rrf_k) for s in SHARES]
        if ranks[0] is None:
            continue
        step = max(alpha, 1.0 / (evidence + 1))
        for i, rank in enumerate(ranks):
            assert rank is not None
            scores[i] = (1.0 - step) * scores[i] + step / rank
        evidence += 1
    return SplitScores(tuple(scores), evidence)


def best_share(state: SplitScores, configured: float) -> float:
    """The split with the best score; the configured one until MIN_EVIDENCE.

    Among equal scores the split closest to the configured one wins.
    """
    if not (math.isfinite(configured) and 0.0 <= configured <= 1.0):
        raise InvalidFusion(f"share must be in [0, 1], got {configured}")
    if state.evidence < MIN_EVIDENCE:
        return configured
    best = max(state.scores)
    return min(
        (s for s, score in zip(SHARES, state.scores, strict=True) if score == best),
        key=lambda s: (abs(s - configured), s),
    )


def split_weights(share: float, total: float) -> tuple[float, float]:
    """(vector weight, lexical weight) for a vector `share` of `total`."""
    if not (math.isfinite(share) and 0.0 <= share <= 1.0):
        raise InvalidFusion(f"share must be in [0, 1], got {share}")
    return share * total, (1.0 - share) * total


def _ranks(labels: Sequence[int]) -> Mapping[int, int]:
    ranks: dict[int, int] = {}
    for rank, label in enumerate(labels, start=1):
        ranks.setdefault(label, rank)
    return ranks
