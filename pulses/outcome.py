"""Attribution, outcomes, and the outcome -> pulses conversion."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import blake3
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.constants import (
    ATTRIBUTION_MAX_CHUNKS,
    DECISION_TEXT_MAX_CHARS,
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_PULSE_TTL_S,
    OUTCOME_SIGMA,
    PEER_ID_MAX_CHARS,
    REASON_MAX_CHARS,
)
from dreamcycle.pulses.credit import Credit
from dreamcycle.pulses.pulse import PulseKind, SalientPulse, check_length, preview

#: Rewards are scores of one decision, from fully wrong to fully right.
REWARD_MIN: Final = -1.0
REWARD_MAX: Final = 1.0
#: A decision hash is the full 32-byte blake3 digest in lowercase hex.
DECISION_HASH_HEX_CHARS: Final = 64
_DECISION_HASH_PATTERN: Final = re.compile(r"[0-9a-f]{64}")
#: Chunks are named by their blake3 content hash, as decisions are.
_CHUNK_HASH_PATTERN: Final = _DECISION_HASH_PATTERN

EmbeddingLookup = Callable[[str], npt.NDArray[np.float32] | None]


class InvalidOutcome(ValueError):
    """An outcome or attribution that cannot be credited; the message names the field."""


def decision_hash(peer: str, ts: int, chunk_hashes: Iterable[str], decision_text: str) -> str:
    """Content address of one decision: blake3 (32 bytes, lowercase hex) of its inputs.

    The hashed bytes are the UTF-8 of the canonical JSON array
    ``[peer, ts, sorted_unique_chunk_hashes, decision_text]`` written by
    ``json.dumps(..., ensure_ascii=True, separators=(",", ":"))``: JSON string
    escaping makes the field boundaries unambiguous, and sorting (with duplicates
    removed) makes the hash independent of the order in which chunks were recalled.
    """
    if isinstance(ts, bool) or not isinstance(ts, int):
        raise InvalidOutcome(f"decision ts must be an integer, got {ts!r}")
    encoded = json.dumps(
        [peer, ts, sorted(set(chunk_hashes)), decision_text],
        ensure_ascii=True,
        separators=(",", ":"),
    ).encode("utf-8")
    return blake3.blake3(encoded).hexdigest()


def _check_decision_hash(value: str, where: str) -> None:
    if not isinstance(value, str) or not _DECISION_HASH_PATTERN.fullmatch(value):
        raise InvalidOutcome(
            f"{where}.decision_hash must be {DECISION_HASH_HEX_CHARS} lowercase hex characters, "
            f"got {value!r}"
        )


@dataclass(frozen=True)
class Attribution:
    """Which chunks (by content hash) were in context when `peer` made a decision."""

    decision_hash: str
    chunk_hashes: tuple[str, ...]
    peer: str
    ts: int
    decision_text: str = ""

    @classmethod
    def for_decision(
        cls, peer: str, ts: int, chunk_hashes: Iterable[str], decision_text: str = ""
    ) -> Attribution:
        """The attribution of a decision, its hash derived, chunk hashes sorted and unique."""
        unique = tuple(sorted(set(chunk_hashes)))
        return cls(
            decision_hash=decision_hash(peer, ts, unique, decision_text),
            chunk_hashes=unique,
            peer=peer,
            ts=ts,
            decision_text=decision_text,
        )

    def validate(self) -> None:
        """The decision hash, the peer and the chunks, each bounded (pulses/constants.py):
        recall returns at most 100 chunks and a context bundle a few hundred, so
        ATTRIBUTION_MAX_CHUNKS (1024) holds any decision the project records; a decision's
        text is its query or task, at most 100 000 characters through the API."""
        _check_decision_hash(self.decision_hash, "attribution")
        if not self.peer:
            raise InvalidOutcome("attribution.peer must not be empty")
        check_length("attribution.peer", self.peer, PEER_ID_MAX_CHARS, InvalidOutcome)
        check_length(
            "attribution.decision_text", self.decision_text, DECISION_TEXT_MAX_CHARS, InvalidOutcome
        )
        check_chunk_hashes("attribution.chunk_hashes", self.chunk_hashes)


@dataclass(frozen=True)
class Outcome:
    """A judgement of one decision, published by the peer that observed it."""

    decision_hash: str
    reward: float
    observer_peer: str
    ts: int
    reason: str
    #: The recalled chunks the decision used, as full content hashes.
    cited: tuple[str, ...] = ()

    def validate(self) -> None:
        if not (math.isfinite(self.reward) and REWARD_MIN <= self.reward <= REWARD_MAX):
            raise InvalidOutcome(
                f"outcome.reward must be finite and in [{REWARD_MIN}, {REWARD_MAX}], "
                f"got {self.reward}"
            )
        _check_decision_hash(self.decision_hash, "outcome")
        if not self.reason:
            raise InvalidOutcome("outcome.reason must not be empty")
        # The reason travels on in the outcome's pulses, so it obeys their limit.
        check_length("outcome.reason", self.reason, REASON_MAX_CHARS, InvalidOutcome)
        if not self.observer_peer:
            raise InvalidOutcome("outcome.observer_peer must not be empty")
        check_length("outcome.observer_peer", self.observer_peer, PEER_ID_MAX_CHARS, InvalidOutcome)
        check_chunk_hashes("outcome.cited", self.cited)


def check_chunk_hashes(name: str, hashes: Sequence[str]) -> None:
    """At most ATTRIBUTION_MAX_CHUNKS content hashes (a decision cannot cite more chunks
    than it recalled); InvalidOutcome names the first that is not one."""
    if len(hashes) > ATTRIBUTION_MAX_CHUNKS:
        raise InvalidOutcome(
            f"{name} lists {len(hashes)} chunks, more than the limit of {ATTRIBUTION_MAX_CHUNKS}"
        )
    for position, chunk in enumerate(hashes):
        if not isinstance(chunk, str) or not _CHUNK_HASH_PATTERN.fullmatch(chunk):
            raise InvalidOutcome(
                f"{name}[{position}] must be a chunk hash (64 lowercase hex digits), "
                f"got {preview(chunk)}"
            )


def outcome_to_pulses(
    outcome: Outcome,
    attribution: Attribution,
    embedding_of: EmbeddingLookup,
    *,
    index_version: str,
    ttl_s: float = OUTCOME_PULSE_TTL_S,
    credits: Sequence[Credit] | None = None,
) -> list[SalientPulse]:
    """One pulse per credited chunk whose embedding is known, in sorted chunk-hash order.

    `credits` (pulses.credit) say which chunks and how strongly; None credits every
    attributed chunk with the whole reward, as the protocol's outcome conversion
    was first written.

    Every field comes from the outcome, the attribution and the chunk's stored
    embedding, never from the converting peer's clock or identity, so peers holding
    bit-identical embeddings derive the same pulse ids and dedupe works across them.
    A zero reward credits nothing.
    """
    outcome.validate()
    attribution.validate()
    if outcome.decision_hash != attribution.decision_hash:
        raise InvalidOutcome(
            f"outcome for decision {outcome.decision_hash} paired with the attribution of "
            f"decision {attribution.decision_hash}"
        )
    if outcome.reward == 0:
        return []
    if credits is None:
        amounts = dict.fromkeys(attribution.chunk_hashes, float(outcome.reward))
    else:
        attributed = set(attribution.chunk_hashes)
        amounts = {c.chunk_hash: c.amount for c in credits if c.chunk_hash in attributed}
    pulses: list[SalientPulse] = []
    for chunk in sorted(amounts):
        embedding = embedding_of(chunk)
        amount = amounts[chunk]
        if embedding is None or amount == 0:
            continue
        pulse = SalientPulse(
            seed_embedding=np.ascontiguousarray(embedding, dtype=np.float32),
            kind=PulseKind.REWARD if amount > 0 else PulseKind.DECAY,
            strength=abs(amount),
            sigma=OUTCOME_SIGMA,
            max_hops=OUTCOME_MAX_HOPS,
            k=OUTCOME_K,
            decay_per_hop=OUTCOME_DECAY_PER_HOP,
            ts=outcome.ts,
            origin_peer=attribution.peer,
            reason=outcome.reason,
            ttl_s=float(ttl_s),
            index_version=index_version,
            seed_hash=chunk,
        ).with_id()
        pulse.validate()
        pulses.append(pulse)
    return pulses
