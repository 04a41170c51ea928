"""`AsyncMemoryClient`: the blocking client's operations awaited, under trio or asyncio,
over httpx (which no other part of the daemon needs, so it is imported only when such a
client is made). It mirrors `MemoryClient` (client.py) method for method, over the same
routes and request builders.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack

if TYPE_CHECKING:
    import httpx

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, edit_models, model_fields, recall_models, report_models
from dreamcycle.daemon.api.client_requests import (
    PulseFields,
    SaveFields,
    TimelineFields,
    UpdateFields,
    context_request,
    feedback_request,
    forgotten_request,
    outcome_request,
    pin_request,
    recall_request,
    request_model,
    supersede_request,
    tombstone_request,
)
from dreamcycle.daemon.api.client_wire import (
    Endpoint,
    Req,
    Resp,
    Route,
    decode,
    prepare,
    resolve_endpoint,
    with_every_operation,
)
from dreamcycle.daemon.config import Config


@with_every_operation
class AsyncMemoryClient:
    """The same operations awaited, under trio or asyncio:
    `async with AsyncMemoryClient() as memory: await memory.recall("...")`."""

    def __init__(
        self,
        socket_path: Path | str | None = None,
        *,
        url: str | None = None,
        token: str = "",
        config: Config | None = None,
        endpoint: Endpoint | None = None,
        timeout_s: float = defaults.CLIENT_TIMEOUT_S,
    ) -> None:
        import httpx

        self.endpoint = endpoint or resolve_endpoint(config, socket_path, url, token)
        uds = None if self.endpoint.socket_path is None else str(self.endpoint.socket_path)
        self._http: httpx.AsyncClient = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=uds),
            base_url=self.endpoint.base_url,
            headers=self.endpoint.headers,
            timeout=timeout_s,
        )
        self._httpx = httpx

    async def _exchange(
        self, method: str, target: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        try:
            response = await self._http.request(method, target, content=body)
        except self._httpx.TransportError as exc:
            timed_out = isinstance(exc, self._httpx.TimeoutException)
            raise self.endpoint.unreachable(exc, timed_out=timed_out) from None
        return response.status_code, response.content

    async def send(self, route: Route[Req, Resp], request: Req) -> Resp:
        prepared = prepare(route, request)
        answered = await self._exchange(prepared.method, prepared.target, prepared.body)
        return decode(route, *answered)

    async def ping(self) -> None:
        status, _ = await self._exchange("GET", "/healthz")
        if status != 200:
            raise self.endpoint.unreachable(RuntimeError(f"HTTP {status}"), timed_out=False)

    async def recall(
        self,
        query: str | Sequence[float],
        *,
        filters: recall_models.RecallFilters | Mapping[str, Any] | None = None,
        top_k: int | None = None,
        record: bool = True,
        decision: str | None = None,
        min_relevance: float = 0.0,
        explain: bool = False,
        min_confidence: float = 0.0,
    ) -> recall_models.RecallResponse:
        return await self.send(
            contract.RECALL,
            recall_request(
                query, filters, top_k, record, decision, min_relevance, explain, min_confidence
            ),
        )

    async def save(self, content: str, **fields: Unpack[SaveFields]) -> edit_models.SaveResponse:
        return await self.send(
            contract.SAVE, request_model(edit_models.SaveRequest, content=content, **fields)
        )

    async def outcome(
        self, decision: str, reward: float, reason: str, cited: Sequence[str] = ()
    ) -> edit_models.Queued:
        return await self.send(contract.OUTCOME, outcome_request(decision, reward, reason, cited))

    async def pulse(self, text: str, **fields: Unpack[PulseFields]) -> edit_models.Queued:
        return await self.send(
            contract.PULSE, request_model(edit_models.PulseRequest, text=text, **fields)
        )

    async def tombstone(
        self, content_hash: str, reason: str, ttl_s: float | None = None
    ) -> edit_models.Queued:
        return await self.send(contract.TOMBSTONE, tombstone_request(content_hash, reason, ttl_s))

    async def status(self) -> report_models.StatusResponse:
        return await self.send(contract.STATUS, None)

    async def memory(self, ref: str) -> report_models.Memory:
        return await self.send(contract.MEMORY, request_model(report_models.MemoryRequest, ref=ref))

    async def forgotten(
        self, limit: int | None = None, offset: int = 0
    ) -> report_models.ForgottenResponse:
        return await self.send(contract.FORGOTTEN, forgotten_request(limit, offset))

    async def supersede(
        self, old_hash: str, content: str, reason: str, **fields: Unpack[SaveFields]
    ) -> edit_models.SupersedeResponse:
        return await self.send(
            contract.SUPERSEDE, supersede_request(old_hash, content, reason, fields)
        )

    async def context(
        self,
        task: str,
        *,
        filters: recall_models.RecallFilters | Mapping[str, Any] | None = None,
        budget_tokens: int | None = None,
        record: bool = True,
        decision: str | None = None,
    ) -> recall_models.ContextResponse:
        return await self.send(
            contract.CONTEXT, context_request(task, filters, budget_tokens, record, decision)
        )

    async def explain(self, ref: str) -> report_models.ExplainResponse:
        return await self.send(contract.EXPLAIN, request_model(model_fields.RefRequest, ref=ref))

    async def pin(self, ref: str, pin_floor: float | None = None) -> edit_models.ChunkQueued:
        return await self.send(contract.PIN, pin_request(ref, pin_floor))

    async def unpin(self, ref: str) -> edit_models.ChunkQueued:
        return await self.send(contract.UNPIN, request_model(model_fields.RefRequest, ref=ref))

    async def reinforce(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> edit_models.ChunkQueued:
        return await self.send(contract.REINFORCE, feedback_request(ref, reason, strength, nonce))

    async def penalize(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> edit_models.ChunkQueued:
        return await self.send(contract.PENALIZE, feedback_request(ref, reason, strength, nonce))

    async def revive(self, ref: str) -> edit_models.Revival:
        return await self.send(contract.REVIVE, request_model(model_fields.RefRequest, ref=ref))

    async def update(self, ref: str, **fields: Unpack[UpdateFields]) -> edit_models.UpdateResponse:
        return await self.send(
            contract.UPDATE, request_model(edit_models.UpdateRequest, ref=ref, **fields)
        )

    async def timeline(self, **fields: Unpack[TimelineFields]) -> report_models.TimelineResponse:
        return await self.send(
            contract.TIMELINE, request_model(report_models.TimelineRequest, **fields)
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
