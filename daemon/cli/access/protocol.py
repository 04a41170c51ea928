"""What both ways of reaching memory answer in: `MemoryAccess` and the values it returns."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

if TYPE_CHECKING:
    from dreamcycle.daemon.intake.ingest import IngestReport
    from dreamcycle.daemon.intake.reingest import MetadataReport
    from dreamcycle.store.database import NewObservation

log = logging.getLogger("dreamcycle.cli")

Progress = Callable[[str, int], None]
Via = Literal["api", "direct"]

#: A whole content hash (blake3, 256 bits, in lowercase hex).
WHOLE_HASH: Final = re.compile(r"[0-9a-f]{64}")
#: Status fields only the daemon knows (its live index): left out so both ways print alike.
DAEMON_ONLY_STATUS: Final = frozenset({"index_live", "index_capacity"})


@dataclass(frozen=True)
class RecalledChunk:
    content_hash: str
    title: str
    content: str
    similarity: float
    salience: float
    score: float
    relevance: float
    cold: bool
    vector_rank: int
    lexical_rank: int | None
    learned_rank: int | None
    key_similarity: float | None
    confidence: float
    stability: float


@dataclass(frozen=True)
class Recalled:
    decision_hash: str | None
    hits: list[RecalledChunk]


@dataclass(frozen=True)
class ColdChunk:
    content_hash: str
    cold_at: str
    reason: str
    salience: float
    text: str


@dataclass(frozen=True)
class ColdPage:
    cold: int
    chunks: list[ColdChunk]


@dataclass(frozen=True)
class Queued:
    entry_id: str
    new: bool


@dataclass(frozen=True)
class PulseSpec:
    text: str
    kind: str
    strength: float
    sigma: float
    k: int
    max_hops: int
    decay_per_hop: float
    ttl_s: float
    reason: str
    nonce: str


class MemoryAccess(Protocol):
    """What the memory commands do, whichever way memory is reached."""

    via: Via

    def recall(
        self,
        query: str,
        *,
        top_k: int | None,
        decision: str | None,
        record: bool,
        min_confidence: float = 0.0,
    ) -> Recalled: ...

    def status(self) -> dict[str, Any]: ...

    def forgotten(self, *, limit: int, offset: int) -> ColdPage: ...

    def revive(self, content_hash: str) -> None: ...

    def outcome(
        self,
        *,
        decision: str,
        reward: float,
        reason: str,
        cited: Sequence[str],
        decided_elsewhere: bool = False,
    ) -> Queued: ...

    def pulse(self, spec: PulseSpec) -> Queued: ...

    def tombstone(
        self, *, content_hash: str, reason: str, ttl_s: float, held_elsewhere: bool = False
    ) -> Queued: ...

    def ingest(
        self,
        files: Sequence[Sequence[NewObservation]],
        *,
        embed: bool,
        progress: Progress | None,
    ) -> IngestReport: ...

    def check_metadata(self, files: Sequence[Sequence[NewObservation]]) -> None: ...

    def apply_metadata(self, files: Sequence[Sequence[NewObservation]]) -> MetadataReport: ...


def not_cold(content_hash: str) -> str:
    """Why a revival is refused, in the same words whichever way memory is reached."""
    return f"{content_hash!r} is not the hash of a chunk in the cold tier"
