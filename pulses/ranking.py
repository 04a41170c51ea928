"""Recall ranking: relevance first, then bounded adjustments (salience, the cold tier).

Relevance fuses ranked lists by reciprocal rank: BM25 over a chunk's words; the
exact cosine of the query to the chunk's embedding or to one of its learned
keys; and BM25 over the words of the questions it learned to answer, for chunks
whose key is close enough to the query to be used. Every candidate of
either list is re-scored on both, so a chunk that only one retriever found still
gets the other's opinion.

Salience then multiplies relevance by a factor in [1 - bound, 1 + bound], confidence
(how sure the store is that the memory is accurate) by one in [1 - confidence_bound,
1 + confidence_bound], the learned prior over the candidates' sizes (pulses.intrinsic)
by one in [1 - |strength|, 1 + |strength|], and a chunk in the cold tier (swept, not
deleted) by `cold_factor` on top. Hence the two guarantees that tests check:

* a chunk that neither retriever returned is never ranked at all, whatever its
  salience;
* a chunk outranks another only if its relevance is at least
  ``(1 - bound) / (1 + bound)`` of the other's (the product of that ratio for every
  bound set), so a popular, a certain or a long chunk cannot bury a clearly more
  relevant one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.intrinsic import InvalidPrior, check_strength, multipliers, size_percentiles

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
#: Weights of the fused lists (BM25 over content, cosine to the chunk or a learned key,
#: BM25 over the words of usable learned keys). Cosine at 0.7 against content BM25 at 1
#: is a vector share of 0.41, the split recall uses until it has learned one from cited
#: chunks (pulses/fusion.py; the shares measured are in docs/efficacy.md).
DEFAULT_LEXICAL_WEIGHT: Final = 1.0
DEFAULT_VECTOR_WEIGHT: Final = 0.7
DEFAULT_LEARNED_WEIGHT: Final = 1.0


class InvalidRanking(ValueError):
    """A ranking parameter out of range; the message names it."""


@dataclass(frozen=True)
class RankingWeights:
    rrf_k: float = DEFAULT_RRF_K
    salience_bound: float = DEFAULT_SALIENCE_BOUND
    key_weight: float = DEFAULT_KEY_WEIGHT
    cold_factor: float = DEFAULT_COLD_FACTOR
    lexical_weight: float = DEFAULT_LEXICAL_WEIGHT
    vector_weight: float = DEFAULT_VECTOR_WEIGHT
    learned_weight: float = DEFAULT_LEARNED_WEIGHT
    confidence_bound: float = DEFAULT_CONFIDENCE_BOUND
    #: The learned prior over the candidates' sizes (pulses.intrinsic); 0 is none.
    intrinsic_strength: float = 0.0

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
        try:
            check_strength(self.intrinsic_strength)
        except InvalidPrior as exc:
            raise InvalidRanking(str(exc)) from None

    @property
    def overtake_ratio(self) -> float:
        """The least relevance ratio at which salience, confidence and the intrinsic prior
        can reorder two chunks."""
        salience = (1.0 - self.salience_bound) / (1.0 + self.salience_bound)
        prior = abs(self.intrinsic_strength)
        return (
            salience
            * (1.0 - self.confidence_bound)
            / (1.0 + self.confidence_bound)
            * (1.0 - prior)
            / (1.0 + prior)
        )


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


@dataclass(frozen=True)
class CandidateColumns:
    """The fields of many Candidates, one array each, in the same order.

    Recall builds these straight from its rows; ranking them is a few array operations
    instead of a loop over objects. A missing rank is 0 and a missing key similarity NaN.
    """

    labels: npt.NDArray[np.int64]
    cosines: npt.NDArray[np.float64]
    saliences: npt.NDArray[np.float64]
    lexical_ranks: npt.NDArray[np.int64]
    key_similarities: npt.NDArray[np.float64]
    cold: npt.NDArray[np.bool_]
    learned_ranks: npt.NDArray[np.int64]
    confidences: npt.NDArray[np.float64]
    #: Each candidate's length, where the intrinsic prior needs it (None: it is off).
    lengths: npt.NDArray[np.float64] | None = None

    @classmethod
    def of(cls, candidates: Iterable[Candidate]) -> CandidateColumns:
        """The columns of `candidates`, refusing what the columns cannot tell apart from a
        missing value (a rank below one, a key similarity that is not finite)."""
        pool = list(candidates)
        for c in pool:
            if c.key_similarity is not None and not math.isfinite(c.key_similarity):
                raise InvalidRanking(f"candidate {c.label} has key similarity {c.key_similarity}")
            for name in ("lexical_rank", "learned_rank"):
                rank = getattr(c, name)
                if rank is not None and rank < 1:
                    raise InvalidRanking(f"candidate {c.label} has {name.replace('_', ' ')} {rank}")
        return cls(
            labels=np.array([c.label for c in pool], dtype=np.int64),
            cosines=np.array([c.cosine for c in pool], dtype=np.float64),
            saliences=np.array([c.salience for c in pool], dtype=np.float64),
            lexical_ranks=np.array([c.lexical_rank or 0 for c in pool], dtype=np.int64),
            key_similarities=np.array(
                [np.nan if c.key_similarity is None else c.key_similarity for c in pool],
                dtype=np.float64,
            ),
            cold=np.array([c.cold for c in pool], dtype=np.bool_),
            learned_ranks=np.array([c.learned_rank or 0 for c in pool], dtype=np.int64),
            confidences=np.array([c.confidence for c in pool], dtype=np.float64),
        )


def rank_candidates(
    candidates: Iterable[Candidate], weights: RankingWeights, top_k: int | None = None
) -> list[Ranked]:
    """Candidates ordered by score (ties: smaller label first), at most `top_k` of them."""
    return rank_columns(CandidateColumns.of(candidates), weights, top_k)


def rank_columns(
    columns: CandidateColumns, weights: RankingWeights, top_k: int | None = None
) -> list[Ranked]:
    """`rank_candidates` over columns: the same arithmetic in the same order, so the
    same scores to the last bit."""
    weights.validate()
    if top_k is not None and top_k < 0:
        raise InvalidRanking(f"top_k must be >= 0, got {top_k}")
    _check(columns)
    c = columns
    # Each step below that could not change a value is skipped (no keys, no word ranks,
    # a bound of 0, nothing cold): adding 0.0 to or multiplying by 1.0 a finite
    # non-negative number gives it back to the last bit, so the scores are the same.
    keyed = ~np.isnan(c.key_similarities)
    similarity = (
        np.where(
            keyed,
            np.maximum(c.cosines, weights.key_weight * np.nan_to_num(c.key_similarities)),
            c.cosines,
        )
        if keyed.any()
        else c.cosines
    )
    by_vector = np.lexsort((c.labels, -similarity))
    vector_ranks = np.empty(len(c.labels), dtype=np.int64)
    vector_ranks[by_vector] = np.arange(1, len(c.labels) + 1)
    relevance = weights.vector_weight * _reciprocal_ranks(vector_ranks, weights.rrf_k)
    for weight, ranks in (
        (weights.lexical_weight, c.lexical_ranks),
        (weights.learned_weight, c.learned_ranks),
    ):
        if ranks.any():
            relevance = relevance + weight * _reciprocal_ranks(ranks, weights.rrf_k)
    score = relevance
    for values, bound, neutral in (
        (c.saliences, weights.salience_bound, NEUTRAL_SALIENCE),
        (c.confidences, weights.confidence_bound, NEUTRAL_CONFIDENCE),
    ):
        if bound != 0:
            score = score * _multipliers(values, bound, neutral)
    if weights.intrinsic_strength != 0 and c.lengths is not None:
        score = score * multipliers(size_percentiles(c.lengths), weights.intrinsic_strength)
    if c.cold.any():
        score = np.where(c.cold, score * weights.cold_factor, score)
    order = np.lexsort((c.labels, -score))
    if top_k is not None:
        order = order[:top_k]
    return [
        Ranked(
            label=int(c.labels[i]),
            relevance=float(relevance[i]),
            score=float(score[i]),
            similarity=float(similarity[i]),
            vector_rank=int(vector_ranks[i]),
            lexical_rank=int(c.lexical_ranks[i]) or None,
            cold=bool(c.cold[i]),
        )
        for i in order.tolist()
    ]


def _reciprocal_ranks(ranks: npt.NDArray[np.int64], k: float) -> npt.NDArray[np.float64]:
    """reciprocal_rank for each rank, 0 where there is none."""
    present = ranks > 0
    return np.where(present, 1.0 / (k + np.where(present, ranks, 1)), 0.0)


def _multipliers(
    values: npt.NDArray[np.float64], bound: float, neutral: float
) -> npt.NDArray[np.float64]:
    """salience_multiplier / confidence_multiplier for each value."""
    clamped = np.minimum(1.0, np.maximum(0.0, values))
    result: npt.NDArray[np.float64] = 1.0 + bound * (clamped - neutral) / neutral
    return result


def _check(c: CandidateColumns) -> None:
    """Refuse duplicates, non-finite numbers and ranks below one, naming the candidate."""
    labels = c.labels
    listed = labels.tolist()
    if len(set(listed)) != len(listed):
        seen: set[int] = set()
        for label in listed:
            if label in seen:
                raise InvalidRanking(f"candidate {label} appears twice")
            seen.add(label)
    for name, values in (
        ("cosine", c.cosines),
        ("salience", c.saliences),
        ("confidence", c.confidences),
    ):
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidRanking(f"candidate {labels[i]} has {name} {values[i]}")
    bad = np.isinf(c.key_similarities)
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidRanking(f"candidate {labels[i]} has key similarity {c.key_similarities[i]}")
    for name, ranks in (("lexical rank", c.lexical_ranks), ("learned rank", c.learned_ranks)):
        bad = ranks < 0
        if bad.any():
            i = int(np.argmax(bad))
            raise InvalidRanking(f"candidate {labels[i]} has {name} {ranks[i]}")


def lexical_ranks(labels_best_first: Sequence[int]) -> dict[int, int]:
    """1-based ranks of a full-text result list (a label listed twice keeps its best rank)."""
    ranks: dict[int, int] = {}
    for rank, label in enumerate(labels_best_first, start=1):
        ranks.setdefault(label, rank)
    return ranks


def best_labels(
    labels: npt.NDArray[np.int64], scores: npt.NDArray[np.floating], n: int
) -> list[int]:
    """The `n` labels of highest score, best first, ties to the lower label (the order
    rank_columns gives): the vector retrievers' exact searches."""
    if n <= 0 or len(labels) == 0:
        return []
    if len(labels) > n:
        # Every label tied with the n-th best stays in, so ties break by label alone.
        cut = np.partition(scores, len(scores) - n)[len(scores) - n]
        close = scores >= cut
        labels, scores = labels[close], scores[close]
    order = np.lexsort((labels, -scores))[:n]
    best: list[int] = np.asarray(labels[order], dtype=np.int64).tolist()
    return best


@dataclass(frozen=True)
class Measured:
    """Labels a vector retriever found and, where its search measured them against its own
    copy of each vector, their cosines to the query (empty when it did not)."""

    labels: npt.NDArray[np.int64]
    cosines: npt.NDArray[np.float64]

    @classmethod
    def unmeasured(cls, labels: list[int]) -> Measured:
        return cls(np.array(labels, dtype=np.int64), np.zeros(0, dtype=np.float64))
