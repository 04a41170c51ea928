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
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol, TypeVar

if TYPE_CHECKING:
    from dreamcycle.daemon.api import models
    from dreamcycle.daemon.client import MemoryClient
    from dreamcycle.daemon.config import Config
    from dreamcycle.daemon.ingest import IngestReport
    from dreamcycle.daemon.reingest import MetadataReport
    from dreamcycle.store.database import NewObservation

log = logging.getLogger("dreamcycle.cli")
T = TypeVar("T")

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
    opened = DirectAccess(config)
    socket_path = config.api_socket_path
    if direct or socket_path is None or not socket_path.exists():
        log.debug("memory opened directly", extra={"database": str(config.database_path)})
        yield opened
        return
    from dreamcycle.daemon.client import Endpoint, MemoryClient

    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        # A line per request on a command's stderr is noise: its answer is its output.
        logging.getLogger("httpx").setLevel(logging.WARNING)
    with MemoryClient(endpoint=Endpoint(socket_path=socket_path)) as client:
        log.debug(
            "memory through the daemon's API, if it answers", extra={"socket": str(socket_path)}
        )
        yield ApiAccess(client, opened)


def not_cold(content_hash: str) -> str:
    """Why a revival is refused, in the same words whichever way memory is reached."""
    return f"{content_hash!r} is not the hash of a chunk in the cold tier"


# ---- the database, opened here ----------------------------------------------------------


class DirectAccess:
    """Each operation opens the database (and loads the model when it embeds), then closes."""

    via: Via = "direct"

    def __init__(self, config: Config) -> None:
        self.config = config

    def recall(
        self,
        query: str,
        *,
        top_k: int | None,
        decision: str | None,
        record: bool,
        min_confidence: float = 0.0,
    ) -> Recalled:
        from dreamcycle.daemon.recall import recall
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            result = recall(
                rt,
                query,
                top_k=top_k,
                decision_text=decision,
                record=record,
                min_confidence=min_confidence,
            )
        finally:
            rt.close()
        names = [f.name for f in fields(RecalledChunk)]
        return Recalled(
            result.decision_hash,
            [RecalledChunk(**{name: getattr(hit, name) for name in names}) for hit in result.hits],
        )

    def status(self) -> dict[str, Any]:
        from dreamcycle.daemon.status import status_report
        from dreamcycle.store.database import Database

        if not self.config.database_path.exists():
            raise ValueError(
                f"no database at {self.config.database_path}: nothing ingested or run yet"
            )
        db = Database(self.config.database_path)
        try:
            return status_report(db, self.config.peer.id)
        finally:
            db.close()

    def forgotten(self, *, limit: int, offset: int) -> ColdPage:
        from dreamcycle.daemon.runtime import Runtime
        from dreamcycle.store import tiers

        rt = Runtime.open(self.config)
        try:
            rows = tiers.cold_chunks(rt.db, limit=limit, offset=offset)
            total = rt.db.counts()["cold"]
        finally:
            rt.close()
        return ColdPage(
            total,
            [ColdChunk(r.content_hash, r.cold_at, r.reason, r.salience, r.text) for r in rows],
        )

    def revive(self, content_hash: str) -> None:
        from dreamcycle.daemon.emit import UnknownHash, resolve_hash
        from dreamcycle.daemon.runtime import Runtime
        from dreamcycle.store import tiers

        rt = Runtime.open(self.config)
        try:
            try:
                digest = resolve_hash(rt, "chunk", content_hash)
            except UnknownHash:
                raise ValueError(not_cold(content_hash)) from None
            rowid = tiers.cold_rowid_of_hash(rt.db, digest)
            if rowid is None:
                raise ValueError(not_cold(digest))
            with rt.db.transaction():
                tiers.request_revival(rt.db, rowid, now_ms=rt.clock.now_ms())
        finally:
            rt.close()

    def outcome(
        self,
        *,
        decision: str,
        reward: float,
        reason: str,
        cited: Sequence[str],
        decided_elsewhere: bool = False,
    ) -> Queued:
        from dreamcycle.daemon.emit import emit_outcome

        return self._emit(
            lambda rt: emit_outcome(
                rt,
                decision=decision,
                reward=reward,
                reason=reason,
                cited=cited,
                decided_elsewhere=decided_elsewhere,
            )
        )

    def pulse(self, spec: PulseSpec) -> Queued:
        from dreamcycle.daemon.emit import PulseRequest, emit_pulse
        from dreamcycle.pulses.pulse import PulseKind

        request = PulseRequest(**{**asdict(spec), "kind": PulseKind(spec.kind)})
        return self._emit(lambda rt: emit_pulse(rt, request))

    def tombstone(
        self, *, content_hash: str, reason: str, ttl_s: float, held_elsewhere: bool = False
    ) -> Queued:
        from dreamcycle.daemon.emit import emit_tombstone

        return self._emit(
            lambda rt: emit_tombstone(
                rt, digest=content_hash, reason=reason, ttl_s=ttl_s, held_elsewhere=held_elsewhere
            )
        )

    def ingest(
        self,
        files: Sequence[Sequence[NewObservation]],
        *,
        embed: bool,
        progress: Progress | None,
    ) -> IngestReport:
        from dreamcycle.daemon.ingest import ingest
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            return ingest(rt, files, embed=embed, progress=progress)
        finally:
            rt.close()

    def check_metadata(self, files: Sequence[Sequence[NewObservation]]) -> None:
        """Refuse content stored before with metadata that cannot change (daemon/reingest.py)."""
        from dreamcycle.daemon.reingest import check_fixed
        from dreamcycle.daemon.runtime import Runtime

        if not self.config.database_path.exists():
            return  # nothing is stored yet, and a check creates nothing
        rt = Runtime.open(self.config)
        try:
            check_fixed(rt.db, [item for file in files for item in file])
        finally:
            rt.close()

    def apply_metadata(self, files: Sequence[Sequence[NewObservation]]) -> MetadataReport:
        """Content ingested again gets the metadata its files give now (daemon/reingest.py)."""
        from dreamcycle.daemon.reingest import apply_metadata
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            return apply_metadata(rt, [item for file in files for item in file])
        finally:
            rt.close()

    def _emit(self, emit: Callable[[Any], Any]) -> Queued:
        from dreamcycle.daemon.runtime import Runtime

        rt = Runtime.open(self.config)
        try:
            emitted = emit(rt)
        finally:
            rt.close()
        return Queued(emitted.entry_id, emitted.new)


# ---- the running daemon's API -------------------------------------------------------------


class ApiAccess:
    """Operations sent to the daemon; what it cannot answer as `DirectAccess` would, goes there."""

    via: Via = "api"

    def __init__(self, client: MemoryClient, direct: DirectAccess) -> None:
        self._client = client
        self._direct = direct
        #: Set once the daemon stopped answering: the rest of the command goes direct.
        self._gone = False

    def _served(
        self,
        build: Callable[[], Any],
        send: Callable[[Any], T],
        direct: Callable[[], T],
        *,
        unknown_here_goes_direct: bool = False,
    ) -> T:
        """`send` the request `build` makes, or do it `direct`ly: when the API's models refuse
        the request, when the daemon does not answer, and (with `unknown_here_goes_direct`)
        when the daemon does not hold what the request names."""
        from dreamcycle.daemon.client import BadRequest, NotFound, Unavailable

        if self._gone:
            return direct()
        try:
            request = build()
        except BadRequest:
            return direct()
        try:
            return send(request)
        except Unavailable as exc:
            self._went_away(exc)
            return direct()
        except NotFound:
            if unknown_here_goes_direct:
                return direct()
            raise

    def _went_away(self, exc: Exception) -> None:
        log.debug("the daemon does not answer; going on directly", extra={"reason": str(exc)})
        self._gone = True

    def recall(
        self,
        query: str,
        *,
        top_k: int | None,
        decision: str | None,
        record: bool,
        min_confidence: float = 0.0,
    ) -> Recalled:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import RECALL, request_model

        def send(request: models.RecallRequest) -> Recalled:
            answer = self._client.send(RECALL, request)
            return Recalled(answer.decision_hash, [_recalled(hit) for hit in answer.hits])

        return self._served(
            # The daemon's own recall.top_k could differ from this command's config.
            lambda: request_model(
                models.RecallRequest,
                query=query,
                top_k=top_k or self._direct.config.recall.top_k,
                decision=decision,
                record=record,
                min_confidence=min_confidence,
                explain=True,
            ),
            send,
            lambda: self._direct.recall(
                query,
                top_k=top_k,
                decision=decision,
                record=record,
                min_confidence=min_confidence,
            ),
        )

    def status(self) -> dict[str, Any]:
        def send(_: None) -> dict[str, Any]:
            report = self._client.status().model_dump()
            for bucket in report["salience_histogram"]:
                bucket["chunks"] = int(bucket["chunks"])
            return {k: v for k, v in report.items() if k not in DAEMON_ONLY_STATUS}

        return self._served(lambda: None, send, self._direct.status)

    def forgotten(self, *, limit: int, offset: int) -> ColdPage:
        from dreamcycle.daemon.api import models

        def send(_: None) -> ColdPage:
            chunks: list[ColdChunk] = []
            total = 0
            # The API lists a page at most; a longer list is read page by page.
            while len(chunks) < limit:
                want = min(models.MAX_FORGOTTEN_PAGE, limit - len(chunks))
                page = self._client.forgotten(limit=want, offset=offset + len(chunks))
                total = page.cold
                chunks += [
                    ColdChunk(c.content_hash, c.cold_at, c.reason, c.salience, c.text)
                    for c in page.chunks
                ]
                if len(page.chunks) < want:
                    break
            return ColdPage(total, chunks)

        return self._served(
            lambda: None, send, lambda: self._direct.forgotten(limit=limit, offset=offset)
        )

    def revive(self, content_hash: str) -> None:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import REVIVE, BadRequest, Conflict, NotFound, request_model

        def build() -> models.RefRequest:
            # A prefix goes the direct way, which resolves it in the words every command prints.
            if not WHOLE_HASH.fullmatch(content_hash):
                raise BadRequest(f"{content_hash!r} is not a whole hash")
            return request_model(models.RefRequest, ref=content_hash)

        def send(request: models.RefRequest) -> None:
            try:
                self._client.send(REVIVE, request)
            except (NotFound, Conflict):
                raise ValueError(not_cold(content_hash)) from None

        self._served(build, send, lambda: self._direct.revive(content_hash))

    def outcome(
        self,
        *,
        decision: str,
        reward: float,
        reason: str,
        cited: Sequence[str],
        decided_elsewhere: bool = False,
    ) -> Queued:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import OUTCOME, request_model

        return self._served(
            lambda: request_model(
                models.OutcomeRequest,
                decision_hash=decision,
                reward=reward,
                reason=reason,
                cited=list(cited),
            ),
            lambda request: _queued(self._client.send(OUTCOME, request)),
            lambda: self._direct.outcome(
                decision=decision,
                reward=reward,
                reason=reason,
                cited=cited,
                decided_elsewhere=decided_elsewhere,
            ),
            unknown_here_goes_direct=True,
        )

    def pulse(self, spec: PulseSpec) -> Queued:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import PULSE, request_model

        return self._served(
            lambda: request_model(models.PulseRequest, **asdict(spec)),
            lambda request: _queued(self._client.send(PULSE, request)),
            lambda: self._direct.pulse(spec),
        )

    def tombstone(
        self, *, content_hash: str, reason: str, ttl_s: float, held_elsewhere: bool = False
    ) -> Queued:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import TOMBSTONE, request_model

        return self._served(
            lambda: request_model(
                models.TombstoneRequest, content_hash=content_hash, reason=reason, ttl_s=ttl_s
            ),
            lambda request: _queued(self._client.send(TOMBSTONE, request)),
            lambda: self._direct.tombstone(
                content_hash=content_hash,
                reason=reason,
                ttl_s=ttl_s,
                held_elsewhere=held_elsewhere,
            ),
            unknown_here_goes_direct=True,
        )

    def ingest(
        self,
        files: Sequence[Sequence[NewObservation]],
        *,
        embed: bool,
        progress: Progress | None,
    ) -> IngestReport:
        from dreamcycle.daemon.api import models
        from dreamcycle.daemon.client import SAVE, BadRequest, Conflict, Unavailable, request_model
        from dreamcycle.daemon.ingest import IngestReport
        from dreamcycle.store.database import EFFICACY_TYPE

        items = [item for file in files for item in file]
        try:
            requests = [request_model(models.SaveRequest, **_save_fields(i)) for i in items]
        except BadRequest:
            requests = []
        # Checked whole before the first save: a file either goes through the daemon or
        # directly, never half each because of an item in the middle.
        if (
            not embed
            or self._gone
            or len(requests) != len(items)
            or any(i.type == EFFICACY_TYPE for i in items)
        ):
            return self._direct.ingest(files, embed=embed, progress=progress)
        created = duplicates = 0
        for done, request in enumerate(requests):
            try:
                created_now = self._client.send(SAVE, request).created
            except Conflict:
                # Retracted content: ingesting it stores nothing, as the direct way counts it.
                created_now = False
            except Unavailable as exc:
                self._went_away(exc)
                rest = self._direct.ingest([items[done:]], embed=True, progress=progress)
                return IngestReport(
                    files=len(files),
                    read=len(items),
                    created=created + rest.created,
                    duplicates=duplicates + rest.duplicates,
                    embedded=created + rest.embedded,
                )
            created += created_now
            duplicates += not created_now
            if progress:
                progress("saved", 1)
        # The daemon embeds every chunk it creates before answering.
        return IngestReport(len(files), len(items), created, duplicates, embedded=created)

    # The API has no operation for these: they go the direct way, safe beside the daemon.
    def check_metadata(self, files: Sequence[Sequence[NewObservation]]) -> None:
        self._direct.check_metadata(files)

    def apply_metadata(self, files: Sequence[Sequence[NewObservation]]) -> MetadataReport:
        return self._direct.apply_metadata(files)


def _save_fields(item: NewObservation) -> dict[str, Any]:
    """The chunk as the API's save takes it: every field but the file and line it came
    from (`source_ref`), which only the direct way records."""
    from dreamcycle.daemon.api import models

    return {name: getattr(item, name) for name in models.SaveRequest.model_fields}


def _recalled(hit: models.RecallHit) -> RecalledChunk:
    factors = hit.factors
    assert factors is not None, "recall was asked to explain its ranking"
    return RecalledChunk(
        content_hash=hit.content_hash,
        title=hit.title,
        content=hit.content,
        similarity=hit.similarity,
        salience=hit.salience,
        score=hit.score,
        relevance=factors.relevance,
        cold=hit.cold,
        vector_rank=factors.vector_rank,
        lexical_rank=factors.lexical_rank,
        learned_rank=factors.learned_rank,
        key_similarity=factors.key_similarity,
        confidence=hit.confidence,
        stability=hit.stability,
    )


def _queued(answer: models.Queued) -> Queued:
    return Queued(answer.entry_id, answer.new)
