"""Python clients of a running daemon's local API: `MemoryClient` (blocking, over
urllib3), here, and `AsyncMemoryClient` (trio or asyncio, over httpx: async_client.py),
which mirror each other method for method. This module is the clients' public face:
`from dreamcycle.daemon.api.client import MemoryClient, NotFound`, as README.md shows,
so the asynchronous client and the exceptions (client_errors.py) are importable from it.

Both reach the daemon over its Unix socket or over TCP with the token (client_wire.py),
and validate what they send before it leaves (client_requests.py).

The blocking client is the one agents call around every step, and the CLIs with it: it
goes through urllib3, whose requests cost less than httpx's client's against the bare
server's floor (scripts/bench_recall.py compares the two). The asynchronous client needs
httpx for trio and asyncio alike; it is imported when that client is made.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Self, Unpack

import urllib3
from urllib3.connection import HTTPConnection
from urllib3.exceptions import NewConnectionError

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, edit_models, model_fields, recall_models, report_models
from dreamcycle.daemon.api.async_client import AsyncMemoryClient
from dreamcycle.daemon.api.client_errors import (
    ApiError,
    BadRequest,
    Conflict,
    NotFound,
    ServerError,
    Unavailable,
)
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
    UNIX_HOST,
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

#: The public face: the clients and what they raise.
__all__ = [
    "ApiError",
    "AsyncMemoryClient",
    "BadRequest",
    "Conflict",
    "MemoryClient",
    "NotFound",
    "ServerError",
    "Unavailable",
]


class _UnixConnection(HTTPConnection):
    """An HTTP connection to the daemon's Unix socket (the host name is only its Host
    header)."""

    def __init__(self, *args: Any, socket_path: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        if isinstance(self.timeout, int | float):
            sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError as exc:
            sock.close()
            raise NewConnectionError(self, f"cannot connect to {self.socket_path}: {exc}") from exc
        self.sock = sock


class _UnixConnectionPool(urllib3.HTTPConnectionPool):
    ConnectionCls = _UnixConnection


def _connection_pool(endpoint: Endpoint, timeout_s: float) -> urllib3.HTTPConnectionPool:
    """Kept-alive connections to the daemon, shared by any number of threads (beyond
    CLIENT_CONNECTIONS at once, a thread waits for one to be free: the daemon serves only
    a few requests at a time anyway); never retried, so that a failure is the caller's
    to see (a save is not safe to send twice). A connection the daemon closed, by
    restarting say, is noticed and replaced before a request is sent on it."""
    options: dict[str, Any] = {
        "timeout": urllib3.Timeout(connect=timeout_s, read=timeout_s),
        "maxsize": defaults.CLIENT_CONNECTIONS,
        "block": True,
        "retries": False,
        "headers": endpoint.headers,
    }
    if endpoint.socket_path is not None:
        return _UnixConnectionPool(UNIX_HOST, socket_path=str(endpoint.socket_path), **options)
    pool = urllib3.connection_from_url(endpoint.base_url, **options)
    assert isinstance(pool, urllib3.HTTPConnectionPool)
    return pool


@with_every_operation
class MemoryClient:
    """Blocking client: `with MemoryClient() as memory: memory.recall("...")`."""

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
        self.endpoint = endpoint or resolve_endpoint(config, socket_path, url, token)
        self._pool = _connection_pool(self.endpoint, timeout_s)

    def _exchange(self, method: str, target: str, body: bytes | None = None) -> tuple[int, bytes]:
        try:
            response = self._pool.urlopen(method, target, body=body)
        except urllib3.exceptions.HTTPError as exc:
            # urllib3 derives a refused connection from its connect timeout's class.
            timed_out = isinstance(exc, urllib3.exceptions.TimeoutError) and not isinstance(
                exc, NewConnectionError
            )
            raise self.endpoint.unreachable(exc, timed_out=timed_out) from None
        return response.status, response.data

    def send(self, route: Route[Req, Resp], request: Req) -> Resp:
        """Any operation of `ROUTES`, with its request model."""
        prepared = prepare(route, request)
        return decode(route, *self._exchange(prepared.method, prepared.target, prepared.body))

    def ping(self) -> None:
        """Returns when a daemon answers (maybe still loading its index); else Unavailable."""
        status, _ = self._exchange("GET", "/healthz")
        if status != 200:
            raise self.endpoint.unreachable(RuntimeError(f"HTTP {status}"), timed_out=False)

    def recall(
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
        """Chunks for a text (or an embedding, a sequence of finite numbers); `record` returns
        a decision hash for outcomes. Any other query, like any argument the request model
        refuses, raises BadRequest naming it, before anything is sent."""
        return self.send(
            contract.RECALL,
            recall_request(
                query, filters, top_k, record, decision, min_relevance, explain, min_confidence
            ),
        )

    def save(self, content: str, **fields: Unpack[SaveFields]) -> edit_models.SaveResponse:
        return self.send(
            contract.SAVE, request_model(edit_models.SaveRequest, content=content, **fields)
        )

    def outcome(
        self, decision: str, reward: float, reason: str, cited: Sequence[str] = ()
    ) -> edit_models.Queued:
        """How a recalled decision turned out; `cited` names (or prefixes) the chunks it used."""
        return self.send(contract.OUTCOME, outcome_request(decision, reward, reason, cited))

    def pulse(self, text: str, **fields: Unpack[PulseFields]) -> edit_models.Queued:
        return self.send(
            contract.PULSE, request_model(edit_models.PulseRequest, text=text, **fields)
        )

    def tombstone(
        self, content_hash: str, reason: str, ttl_s: float | None = None
    ) -> edit_models.Queued:
        return self.send(contract.TOMBSTONE, tombstone_request(content_hash, reason, ttl_s))

    def status(self) -> report_models.StatusResponse:
        return self.send(contract.STATUS, None)

    def memory(self, ref: str) -> report_models.Memory:
        """One chunk, by its hash or a prefix only it has."""
        return self.send(contract.MEMORY, request_model(report_models.MemoryRequest, ref=ref))

    def forgotten(
        self, limit: int | None = None, offset: int = 0
    ) -> report_models.ForgottenResponse:
        return self.send(contract.FORGOTTEN, forgotten_request(limit, offset))

    def supersede(
        self, old_hash: str, content: str, reason: str, **fields: Unpack[SaveFields]
    ) -> edit_models.SupersedeResponse:
        return self.send(contract.SUPERSEDE, supersede_request(old_hash, content, reason, fields))

    def context(
        self,
        task: str,
        *,
        filters: recall_models.RecallFilters | Mapping[str, Any] | None = None,
        budget_tokens: int | None = None,
        record: bool = True,
        decision: str | None = None,
    ) -> recall_models.ContextResponse:
        """Pinned, previously successful and relevant memories for a task, in one budget."""
        return self.send(
            contract.CONTEXT, context_request(task, filters, budget_tokens, record, decision)
        )

    def explain(self, ref: str) -> report_models.ExplainResponse:
        """Why a memory stands where it does: salience steps, decisions, learned keys."""
        return self.send(contract.EXPLAIN, request_model(model_fields.RefRequest, ref=ref))

    def pin(self, ref: str, pin_floor: float | None = None) -> edit_models.ChunkQueued:
        return self.send(contract.PIN, pin_request(ref, pin_floor))

    def unpin(self, ref: str) -> edit_models.ChunkQueued:
        return self.send(contract.UNPIN, request_model(model_fields.RefRequest, ref=ref))

    def reinforce(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> edit_models.ChunkQueued:
        return self.send(contract.REINFORCE, feedback_request(ref, reason, strength, nonce))

    def penalize(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> edit_models.ChunkQueued:
        return self.send(contract.PENALIZE, feedback_request(ref, reason, strength, nonce))

    def revive(self, ref: str) -> edit_models.Revival:
        """Bring a cold memory back to the live tier at the next cycle."""
        return self.send(contract.REVIVE, request_model(model_fields.RefRequest, ref=ref))

    def update(self, ref: str, **fields: Unpack[UpdateFields]) -> edit_models.UpdateResponse:
        return self.send(
            contract.UPDATE, request_model(edit_models.UpdateRequest, ref=ref, **fields)
        )

    def timeline(self, **fields: Unpack[TimelineFields]) -> report_models.TimelineResponse:
        return self.send(contract.TIMELINE, request_model(report_models.TimelineRequest, **fields))

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
