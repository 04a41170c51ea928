"""Packing a context bundle: three tiers of memories in, one bundle within a token budget out.

The tiers arrive in priority order (pinned, then chunks credited by past successes, then
chunks relevant to the task). A chunk found by more than one tier is kept once, in the
tier of highest priority. The budget is then spent globally by salience: candidates are
taken best first (pinned ones at no less than `pinned_salience`, so pressure from the
other tiers cannot crowd them out), each kept if it still fits. What does not fit is
returned as references, at most `max_overflow` of them. At least one memory is always
kept: when even the best one is larger than the whole budget, it is cut to the budget.

Tokens are an estimate: `estimate_tokens` (see its docstring for why not a tokenizer).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

#: Characters per token of the estimate: English prose runs close to 4 with the usual
#: subword tokenizers.
CHARS_PER_TOKEN: Final = 4
#: Marks content cut to fit the budget.
CUT_MARK: Final = " [...]"
#: The smallest budget: room for the cut mark of a memory cut to fit.
MIN_BUDGET: Final = 8


class Tier(StrEnum):
    PINNED = "pinned"
    OUTCOMES = "outcomes"
    RELEVANT = "relevant"


#: Highest priority first: dedup keeps a chunk in the first of these that holds it.
TIER_PRIORITY: Final = (Tier.PINNED, Tier.OUTCOMES, Tier.RELEVANT)


class InvalidBundle(ValueError):
    """A packing argument that makes no sense; the message names it."""


@dataclass(frozen=True)
class Candidate:
    content_hash: str
    title: str
    content: str
    salience: float


@dataclass(frozen=True)
class Member:
    """A kept memory: its tier, the salience it was ranked by, its tokens (after any cut)."""

    candidate: Candidate
    tier: Tier
    rank_salience: float
    tokens: int
    truncated: bool = False


@dataclass(frozen=True)
class Reference:
    content_hash: str
    title: str


@dataclass(frozen=True)
class Bundle:
    #: Kept memories by tier (priority order), each tier in the order it was given.
    members: tuple[Member, ...]
    #: Memories that did not fit, best first, at most max_overflow.
    overflow: tuple[Reference, ...]
    #: How many did not fit (overflow lists only the first max_overflow).
    dropped: int
    budget: int

    def tier(self, tier: Tier) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.tier is tier)

    def tokens(self, tier: Tier | None = None) -> int:
        return sum(m.tokens for m in self.members if tier is None or m.tier is tier)


def estimate_tokens(text: str) -> int:
    """max(words, ceil(chars / 4)): never less than one token per word, and about a
    subword tokenizer's count on prose. A tokenizer would be closer but costs far more
    per chunk than this arithmetic, and the reader's model tokenizes differently
    anyway."""
    return max(len(text.split()), math.ceil(len(text) / CHARS_PER_TOKEN))


def member_text(candidate: Candidate) -> str:
    """What a kept memory contributes to the bundle (what its tokens count)."""
    return f"{candidate.title}\n{candidate.content}" if candidate.title else candidate.content


def dedup(tiers: dict[Tier, Sequence[Candidate]]) -> list[tuple[Tier, int, Candidate]]:
    """(tier, position within the tier, candidate), each content hash once, in the tier of
    highest priority and its first position there."""
    seen: set[str] = set()
    out: list[tuple[Tier, int, Candidate]] = []
    for tier in TIER_PRIORITY:
        for position, candidate in enumerate(tiers.get(tier, ())):
            if candidate.content_hash in seen:
                continue
            seen.add(candidate.content_hash)
            out.append((tier, position, candidate))
    return out


def pack(
    tiers: dict[Tier, Sequence[Candidate]],
    *,
    budget: int,
    pinned_salience: float,
    max_overflow: int,
) -> Bundle:
    if budget < MIN_BUDGET:
        raise InvalidBundle(f"budget {budget} is below {MIN_BUDGET} tokens")
    if not 0.0 <= pinned_salience <= 1.0:
        raise InvalidBundle(f"pinned_salience {pinned_salience} is outside [0, 1]")
    if max_overflow < 0:
        raise InvalidBundle(f"max_overflow {max_overflow} is negative")
    unique = dedup(tiers)

    def rank_salience(tier: Tier, candidate: Candidate) -> float:
        if tier is Tier.PINNED:
            return max(candidate.salience, pinned_salience)
        return candidate.salience

    # Best first; ties go to the tier of higher priority, then to the order it was given.
    ordered = sorted(
        unique,
        key=lambda item: (
            -rank_salience(item[0], item[2]),
            TIER_PRIORITY.index(item[0]),
            item[1],
        ),
    )
    kept: dict[str, Member] = {}
    dropped: list[Reference] = []
    left = budget
    for tier, _position, candidate in ordered:
        tokens = estimate_tokens(member_text(candidate))
        if tokens <= left:
            kept[candidate.content_hash] = Member(
                candidate, tier, rank_salience(tier, candidate), tokens
            )
            left -= tokens
        else:
            dropped.append(Reference(candidate.content_hash, candidate.title))
    if not kept and ordered:
        tier, _position, best = ordered[0]
        cut = _cut(best, budget)
        kept[best.content_hash] = Member(
            cut, tier, rank_salience(tier, best), estimate_tokens(member_text(cut)), True
        )
        dropped = dropped[1:]
    members = tuple(
        kept[candidate.content_hash]
        for _tier, _position, candidate in unique
        if candidate.content_hash in kept
    )
    return Bundle(
        members=members,
        overflow=tuple(dropped[:max_overflow]),
        dropped=len(dropped),
        budget=budget,
    )


def _cut(candidate: Candidate, budget: int) -> Candidate:
    """The candidate shortened until its text fits `budget` tokens: its content first, then,
    if the title alone is too long, its title."""
    content, title = candidate.content, candidate.title
    while True:
        trimmed = replace(candidate, title=title, content=content.rstrip() + CUT_MARK)
        over = estimate_tokens(member_text(trimmed)) - budget
        if over <= 0:
            return trimmed
        # Each token over is at least one character too many: shrink by at least that much.
        excess = max(1, over * CHARS_PER_TOKEN)
        if content:
            content = content[: max(0, len(content) - excess)]
        else:
            title = title[: max(0, len(title) - excess)]


def render(bundle: Bundle, header: str) -> str:
    """The bundle as text to read: the header, each tier under its heading, each memory
    titled with its hash's first 12 digits, then the references that did not fit."""
    headings = {
        Tier.PINNED: "Pinned",
        Tier.OUTCOMES: "Worked before",
        Tier.RELEVANT: "Relevant",
    }
    parts = [header]
    for tier in TIER_PRIORITY:
        members = bundle.tier(tier)
        if not members:
            continue
        parts.append(f"\n# {headings[tier]}")
        for member in members:
            candidate = member.candidate
            label = candidate.title or candidate.content.split("\n", 1)[0][:80]
            cut = " (cut to fit)" if member.truncated else ""
            parts.append(f"\n## {label} [{candidate.content_hash[:12]}]{cut}\n{candidate.content}")
    if bundle.dropped:
        parts.append(f"\n# Not included ({bundle.dropped}, over the budget)")
        parts.extend(
            f"- {ref.title or '(untitled)'} [{ref.content_hash[:12]}]" for ref in bundle.overflow
        )
    return "\n".join(parts)
