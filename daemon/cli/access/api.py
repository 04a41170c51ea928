"""The API way: operations sent to the running daemon over its Unix socket; what it cannot
answer as the direct way would is handed to the direct way (see the package's docstring)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from dreamcycle.daemon.api import edit_models, recall_models
    from dreamcycle.daemon.api.client import MemoryClient
    from dreamcycle.daemon.intake.ingest import IngestReport
    from dreamcycle.daemon.intake.reingest import MetadataReport
    from dreamcycle.store.database import NewObservation

from dreamcycle.daemon.cli.access.direct import DirectAccess
from dreamcycle.daemon.cli.access.protocol import (
    DAEMON_ONLY_STATUS,
    WHOLE_HASH,
    ColdChunk,
    ColdPage,
    Progress,
    PulseSpec,
    Queued,
    Recalled,
    RecalledChunk,
    Via,
    not_cold,
)

log = logging.getLogger("dreamcycle.cli")
T = TypeVar("T")


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
        from dreamcycle.daemon.api.client_errors import BadRequest, NotFound, Unavailable

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
        from dreamcycle.daemon.api import recall_models
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import RECALL

        def send(request: recall_models.RecallRequest) -> Recalled:
            answer = self._client.send(RECALL, request)
            return Recalled(answer.decision_hash, [_recalled(hit) for hit in answer.hits])

        return self._served(
            # The daemon's own recall.top_k could differ from this command's config.
            lambda: request_model(
                recall_models.RecallRequest,
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
            return {k: v for k, v in report.items() if k not in DAEMON_ONLY_STATUS}

        return self._served(lambda: None, send, self._direct.status)

    def forgotten(self, *, limit: int, offset: int) -> ColdPage:
        from dreamcycle.daemon.api import report_models

        def send(_: None) -> ColdPage:
            chunks: list[ColdChunk] = []
            total = 0
            # The API lists a page at most; a longer list is read page by page.
            while len(chunks) < limit:
                want = min(report_models.MAX_FORGOTTEN_PAGE, limit - len(chunks))
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
        from dreamcycle.daemon.api import model_fields
        from dreamcycle.daemon.api.client_errors import BadRequest, Conflict, NotFound
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import REVIVE

        def build() -> model_fields.RefRequest:
            # A prefix goes the direct way, which resolves it in the words every command prints.
            if not WHOLE_HASH.fullmatch(content_hash):
                raise BadRequest(f"{content_hash!r} is not a whole hash")
            return request_model(model_fields.RefRequest, ref=content_hash)

        def send(request: model_fields.RefRequest) -> None:
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
        from dreamcycle.daemon.api import edit_models
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import OUTCOME

        return self._served(
            lambda: request_model(
                edit_models.OutcomeRequest,
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
        from dreamcycle.daemon.api import edit_models
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import PULSE

        return self._served(
            lambda: request_model(edit_models.PulseRequest, **asdict(spec)),
            lambda request: _queued(self._client.send(PULSE, request)),
            lambda: self._direct.pulse(spec),
        )

    def tombstone(
        self, *, content_hash: str, reason: str, ttl_s: float, held_elsewhere: bool = False
    ) -> Queued:
        from dreamcycle.daemon.api import edit_models
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import TOMBSTONE

        return self._served(
            lambda: request_model(
                edit_models.TombstoneRequest, content_hash=content_hash, reason=reason, ttl_s=ttl_s
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
        from dreamcycle.daemon.api import edit_models
        from dreamcycle.daemon.api.client_errors import BadRequest, Conflict, Unavailable
        from dreamcycle.daemon.api.client_requests import request_model
        from dreamcycle.daemon.api.contract import SAVE
        from dreamcycle.daemon.intake.ingest import IngestReport
        from dreamcycle.store.database import EFFICACY_TYPE

        items = [item for file in files for item in file]
        try:
            requests = [request_model(edit_models.SaveRequest, **_save_fields(i)) for i in items]
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
    from dreamcycle.daemon.api import edit_models

    return {name: getattr(item, name) for name in edit_models.SaveRequest.model_fields}


def _recalled(hit: recall_models.RecallHit) -> RecalledChunk:
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


def _queued(answer: edit_models.Queued) -> Queued:
    return Queued(answer.entry_id, answer.new)
