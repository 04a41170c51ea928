"""Which recalled chunks an outcome credits, and by how much.

An agent that names the chunks it actually used (citations) gives the only
credit that can be trusted: those chunks, and only those, get the outcome.
Without citations every returned chunk is a suspect, and crediting them all
alike, or by rank, taught the wrong chunks and lowered held-out recall at every
strength measured; so the default without citations is to credit nothing. The
other rules stay selectable for the efficacy benchmark.

A miss is scaled by MISS_FACTOR < 1: a miss never weakens more than a hit of
the same size strengthens, because a miss says less about any single chunk
(the answer may simply not have been recalled).
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

#: A miss weakens a chunk by at most this fraction of what a hit of the same size adds.
MISS_FACTOR: Final = 0.5
#: Without citations, the step given by the `top` and `rank` rules.
UNCITED_STEP: Final = 0.1
#: Without citations, the `top` rule credits only outcomes at least this strong.
STRONG_OUTCOME: Final = 0.8


class CreditRule(enum.StrEnum):
    #: Without citations, nothing is credited (the default; see the module docstring).
    NONE = "none"
    #: Without citations, the top-ranked chunk gets UNCITED_STEP on strong outcomes.
    TOP = "top"
    #: Without citations, the chunk at rank r gets UNCITED_STEP / r.
    RANK = "rank"


class InvalidCredit(ValueError):
    """Citations that are not among the recalled chunks, or a bad reward; names them."""


@dataclass(frozen=True)
class Credit:
    chunk_hash: str
    #: Signed: reward times the chunk's share, misses scaled by MISS_FACTOR.
    amount: float


def assign_credit(
    ranked_hashes: Sequence[str],
    cited: Sequence[str],
    reward: float,
    rule: CreditRule = CreditRule.NONE,
    *,
    miss_factor: float = MISS_FACTOR,
    uncited_step: float = UNCITED_STEP,
) -> list[Credit]:
    """Credits in `ranked_hashes` order; cited chunks not recalled are ignored.

    `ranked_hashes` are the recalled chunks best first. A zero reward credits nothing.
    """
    if not math.isfinite(reward) or not -1.0 <= reward <= 1.0:
        raise InvalidCredit(f"reward must be finite and in [-1, 1], got {reward}")
    if not 0.0 <= miss_factor <= 1.0:
        raise InvalidCredit(f"miss_factor must be in [0, 1], got {miss_factor}")
    if reward == 0:
        return []
    scale = reward if reward > 0 else reward * miss_factor
    if cited:
        chosen = set(cited)
        return [Credit(h, scale) for h in _unique(ranked_hashes) if h in chosen]
    order = _unique(ranked_hashes)
    if rule is CreditRule.NONE or not order:
        return []
    if rule is CreditRule.TOP:
        if abs(reward) < STRONG_OUTCOME:
            return []
        return [Credit(order[0], scale * uncited_step)]
    return [Credit(h, scale * uncited_step / rank) for rank, h in enumerate(order, start=1)]


def uncited(ranked_hashes: Sequence[str], cited: Sequence[str]) -> list[str]:
    """Cited hashes that were not among the recalled chunks (a caller's mistake to report)."""
    known = set(ranked_hashes)
    return [h for h in cited if h not in known]


def _unique(hashes: Sequence[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for h in hashes:
        if h not in seen:
            seen.add(h)
            out.append(h)
    return out
