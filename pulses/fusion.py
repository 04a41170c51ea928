"""How much recall trusts vectors against words, learned from what agents cite.

Recall fuses a BM25 list and a cosine list. Which of the two finds the chunks
that answer a store's questions depends on the store: conversations full of
names and dates favour words, notes written in other words than the questions
favour vectors. A fixed split is right for neither, so the split is learned.

Every cited success is a vote: the retriever that ranked the cited chunk higher
(among its own candidates) wins it; a tie, or a chunk neither list found, votes
for neither. The vector share of the fusion weight moves towards the votes by an
exponential moving average (step ALPHA) and stays inside [MIN_SHARE, MAX_SHARE], so neither retriever is ever
switched off and one unusual week cannot flip the store. The total weight of the
two lists is kept, so fusion with the learned keys' list is unchanged in scale.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

#: Step of the moving average per vote.
ALPHA: Final = 0.05
#: The vector share never leaves these bounds: each list keeps a voice.
MIN_SHARE: Final = 0.2
MAX_SHARE: Final = 0.8


class InvalidFusion(ValueError):
    """A share, step or rank out of range; the message names it."""


@dataclass(frozen=True)
class RankPair:
    """Where each retriever placed one cited chunk (1-based; None: not among its candidates)."""

    vector_rank: int | None
    lexical_rank: int | None


def vote(pair: RankPair) -> float | None:
    """1.0 when vectors ranked the chunk higher, 0.0 when words did, None when neither won."""
    for rank in (pair.vector_rank, pair.lexical_rank):
        if rank is not None and rank < 1:
            raise InvalidFusion(f"ranks are 1-based, got {rank}")
    vector = pair.vector_rank if pair.vector_rank is not None else math.inf
    lexical = pair.lexical_rank if pair.lexical_rank is not None else math.inf
    if vector == lexical:
        return None
    return 1.0 if vector < lexical else 0.0


def learn_share(
    share: float,
    pairs: Iterable[RankPair],
    *,
    alpha: float = ALPHA,
    lowest: float = MIN_SHARE,
    highest: float = MAX_SHARE,
) -> float:
    """The vector share after the votes of `pairs`, one moving-average step each."""
    if not 0.0 < alpha <= 1.0:
        raise InvalidFusion(f"alpha must be in (0, 1], got {alpha}")
    if not 0.0 <= lowest <= highest <= 1.0:
        raise InvalidFusion(f"share bounds must satisfy 0 <= {lowest} <= {highest} <= 1")
    if not math.isfinite(share):
        raise InvalidFusion(f"share must be finite, got {share}")
    for pair in pairs:
        ballot = vote(pair)
        if ballot is not None:
            share = (1.0 - alpha) * share + alpha * ballot
    return min(highest, max(lowest, share))


def split_weights(share: float, total: float) -> tuple[float, float]:
    """(vector weight, lexical weight) for a vector `share` of `total`."""
    if not (math.isfinite(share) and 0.0 <= share <= 1.0):
        raise InvalidFusion(f"share must be in [0, 1], got {share}")
    return share * total, (1.0 - share) * total
