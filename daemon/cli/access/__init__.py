"""How a command reaches memory: through the running daemon's API, or by opening the
database in its own process.

A daemon serving its API keeps the model, the index and the database open, so a
command it serves skips what costs a command most (loading the model and the index:
seconds, and hundreds of megabytes). `memory_access` picks the way once per command:
the daemon's Unix socket when one is there, else the database directly, as every
command did before the API (still safe beside a daemon without one). Both ways
implement `MemoryAccess` and answer alike, so a command prints the same either way.

The API way imports neither the embedding model's libraries nor recall, the index or
the cycle: `DirectAccess` imports them inside its methods.

Where the API cannot answer as the direct way would, the API way hands the request to
the direct one, so both ways accept and refuse the same requests:

* a request the API's models refuse (the API bounds some values tighter): the direct
  way then accepts it, or refuses it with its own message;
* an outcome for a decision, or a tombstone for a chunk, the daemon does not hold (the
  API answers 404; the direct way refuses them in the words every command prints, finds
  a chunk only tombstoned here, or queues them when told they are known elsewhere);
* reviving by anything but a whole hash (the API would resolve a prefix in its own words),
  and ingesting without embedding (the API embeds every chunk it saves);
* no daemon answering, or one still loading its index, at any point of a command.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config
    from dreamcycle.daemon.ingest import IngestReport
    from dreamcycle.daemon.reingest import MetadataReport
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


@contextmanager
def memory_access(config: Config, *, direct: bool = False) -> Iterator[MemoryAccess]:
    """The daemon's API when its socket is there (`direct` False), else the database."""
    from dreamcycle.daemon.cli.access.direct import DirectAccess

    opened = DirectAccess(config)
    socket_path = config.api_socket_path
    if direct or socket_path is None or not socket_path.exists():
        log.debug("memory opened directly", extra={"database": str(config.database_path)})
        yield opened
        return
    from dreamcycle.daemon.cli.access.api import ApiAccess
    from dreamcycle.daemon.client import Endpoint, MemoryClient

    with MemoryClient(endpoint=Endpoint(socket_path=socket_path)) as client:
        log.debug(
            "memory through the daemon's API, if it answers", extra={"socket": str(socket_path)}
        )
        yield ApiAccess(client, opened)


def not_cold(content_hash: str) -> str:
    """Why a revival is refused, in the same words whichever way memory is reached."""
    return f"{content_hash!r} is not the hash of a chunk in the cold tier"
