"""Recall ranking: relevance first, then bounded adjustments (salience, the cold tier).

Relevance fuses ranked lists by reciprocal rank: BM25 over a chunk's words; the
exact cosine of the query to the chunk's embedding or to one of its learned
keys; and BM25 over the words of the questions it learned to answer, for chunks
whose key is close enough to the query to be used. Every candidate of
either list is re-scored on both, so a chunk that only one retriever found still
gets the other's opinion.

Salience then multiplies relevance by a factor in [1 - bound, 1 + bound], confidence
(how sure the store is that the memory is accurate) by one in [1 - confidence_bound,
1 + confidence_bound], and a chunk in the cold tier (swept, not deleted) by
`cold_factor` on top. Hence the two guarantees that tests check:

* a chunk that neither retriever returned is never ranked at all, whatever its
  salience;
* a chunk outranks another only if its relevance is at least
  ``(1 - bound) / (1 + bound)`` of the other's (the product of that ratio for both
  bounds when both are set), so a popular or a certain chunk cannot bury a clearly
  more relevant one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

#: Reciprocal-rank fusion constant of Cormack et al.; larger flattens the lists.
DEFAULT_RRF_K: Final = 60.0
#: Salience moves relevance by at most this fraction either way.
DEFAULT_SALIENCE_BOUND: Final = 0.0
#: A learned key's similarity counts at this fraction of the chunk's own.
DEFAULT_KEY_WEIGHT: Final = 0.9
#: Relevance of a swept (cold) chunk is multiplied by this: it wins only when the
#: live results are clearly weaker.
DEFAULT_COLD_FACTOR: Final = 0.98
#: Salience at which the multiplier is exactly 1 (new chunks of default importance).
NEUTRAL_SALIENCE: Final = 0.5
#: Confidence moves relevance by at most this fraction either way.
DEFAULT_CONFIDENCE_BOUND: Final = 0.0
#: Confidence at which its multiplier is exactly 1: as sure as unsure.
NEUTRAL_CONFIDENCE: Final = 0.5


class InvalidRanking(ValueError):
    """A ranking parameter out of range; the message names it."""


@dataclass(frozen=True)
class RankingWeights:
    rrf_k: float = DEFAULT_RRF_K
    salience_bound: float = DEFAULT_SALIENCE_BOUND
    key_weight: float = DEFAULT_KEY_WEIGHT
    cold_factor: float = DEFAULT_COLD_FACTOR
    lexical_weight: float = 1.0
    vector_weight: float = 1.0
    learned_weight: float = 1.0
    confidence_bound: float = DEFAULT_CONFIDENCE_BOUND

    def validate(self) -> None:
        if not (math.isfinite(self.rrf_k) and self.rrf_k >= 0):
            raise InvalidRanking(f"rrf_k must be finite and >= 0, got {self.rrf_k}")
        if not 0.0 <= self.salience_bound < 1.0:
            raise InvalidRanking(f"salience_bound must be in [0, 1), got {self.salience_bound}")
        if not 0.0 <= self.confidence_bound < 1.0:
            raise InvalidRanking(f"confidence_bound must be in [0, 1), got {self.confidence_bound}")
        if not 0.0 <= self.key_weight <= 1.0:
            raise InvalidRanking(f"key_weight must be in [0, 1], got {self.key_weight}")
        if not 0.0 < self.cold_factor <= 1.0:
            raise InvalidRanking(f"cold_factor must be in (0, 1], got {self.cold_factor}")
        for name in ("lexical_weight", "vector_weight", "learned_weight"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise InvalidRanking(f"{name} must be finite and >= 0, got {value}")

    @property
    def overtake_ratio(self) -> float:
        """The least relevance ratio at which salience and confidence can reorder two chunks."""
        salience = (1.0 - self.salience_bound) / (1.0 + self.salience_bound)
        return salience * (1.0 - self.confidence_bound) / (1.0 + self.confidence_bound)


@dataclass(frozen=True)
class Candidate:
    """What recall knows of one chunk for one query.

    `lexical_rank` is the 1-based rank among full-text matches (None: no match);
    `key_similarity` is the best cosine of the query to a usable learned key
    (None: the chunk has none); `learned_rank` the 1-based rank among matches of
    the query's words against the words of the chunk's usable keys.
    """

    label: int
    cosine: float
    salience: float
    lexical_rank: int | None = None
    key_similarity: float | None = None
    cold: bool = False
    learned_rank: int | None = None
    confidence: float = NEUTRAL_CONFIDENCE


@dataclass(frozen=True)
class Ranked:
    label: int
    relevance: float
    score: float
    similarity: float
    vector_rank: int
    lexical_rank: int | None
    cold: bool


def vector_similarity(candidate: Candidate, key_weight: float) -> float:
    """The chunk's own cosine, or its best learned key's at `key_weight`, whichever is higher."""
    if candidate.key_similarity is None:
        return candidate.cosine
    return max(candidate.cosine, key_weight * candidate.key_similarity)


def salience_multiplier(salience: float, bound: float) -> float:
    """1 at NEUTRAL_SALIENCE, 1 - bound at 0, 1 + bound at 1; linear in between."""
    clamped = min(1.0, max(0.0, salience))
    return 1.0 + bound * (clamped - NEUTRAL_SALIENCE) / NEUTRAL_SALIENCE


def confidence_multiplier(confidence: float, bound: float) -> float:
    """1 at NEUTRAL_CONFIDENCE, 1 - bound at 0, 1 + bound at 1; linear in between."""
    clamped = min(1.0, max(0.0, confidence))
    return 1.0 + bound * (clamped - NEUTRAL_CONFIDENCE) / NEUTRAL_CONFIDENCE


def reciprocal_rank(rank: int | None, k: float) -> float:
    return 0.0 if rank is None else 1.0 / (k + rank)


def rank_candidates(
    candidates: Iterable[Candidate], weights: RankingWeights, top_k: int | None = None
) -> list[Ranked]:
    """Candidates ordered by score (ties: smaller label first), at most `top_k` of them."""
    weights.validate()
    if top_k is not None and top_k < 0:
        raise InvalidRanking(f"top_k must be >= 0, got {top_k}")
    pool = _unique(candidates)
    by_vector = sorted(pool, key=lambda c: (-vector_similarity(c, weights.key_weight), c.label))
    ranked: list[Ranked] = []
    for vector_rank, candidate in enumerate(by_vector, start=1):
        relevance = (
            weights.vector_weight * reciprocal_rank(vector_rank, weights.rrf_k)
            + weights.lexical_weight * reciprocal_rank(candidate.lexical_rank, weights.rrf_k)
            + weights.learned_weight * reciprocal_rank(candidate.learned_rank, weights.rrf_k)
        )
        score = relevance * salience_multiplier(candidate.salience, weights.salience_bound)
        score *= confidence_multiplier(candidate.confidence, weights.confidence_bound)
        if candidate.cold:
            score *= weights.cold_factor
        ranked.append(
            Ranked(
                label=candidate.label,
                relevance=relevance,
                score=score,
                similarity=vector_similarity(candidate, weights.key_weight),
                vector_rank=vector_rank,
                lexical_rank=candidate.lexical_rank,
                cold=candidate.cold,
            )
        )
    ranked.sort(key=lambda r: (-r.score, r.label))
    return ranked if top_k is None else ranked[:top_k]


def _unique(candidates: Iterable[Candidate]) -> list[Candidate]:
    seen: set[int] = set()
    out: list[Candidate] = []
    for candidate in candidates:
        if candidate.label in seen:
            raise InvalidRanking(f"candidate {candidate.label} appears twice")
        for name in ("cosine", "salience", "confidence"):
            if not math.isfinite(getattr(candidate, name)):
                raise InvalidRanking(
                    f"candidate {candidate.label} has {name} {getattr(candidate, name)}"
                )
        if candidate.key_similarity is not None and not math.isfinite(candidate.key_similarity):
            raise InvalidRanking(
                f"candidate {candidate.label} has key similarity {candidate.key_similarity}"
            )
        for name in ("lexical_rank", "learned_rank"):
            rank = getattr(candidate, name)
            if rank is not None and rank < 1:
                raise InvalidRanking(
                    f"candidate {candidate.label} has {name.replace('_', ' ')} {rank}"
                )
        seen.add(candidate.label)
        out.append(candidate)
    return out


def lexical_ranks(labels_best_first: Sequence[int]) -> dict[int, int]:
    """1-based ranks of a full-text result list (a label listed twice keeps its best rank)."""
    ranks: dict[int, int] = {}
    for rank, label in enumerate(labels_best_first, start=1):
        ranks.setdefault(label, rank)
    return ranks
