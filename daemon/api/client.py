"""Python clients of a running daemon's local API: `MemoryClient` (blocking, over
urllib3) and `AsyncMemoryClient` (trio or asyncio, over httpx).

One module of about 700 lines: the two clients mirror each other method for method, so
each reads alone beside the other, over the routes and request builders both share.

By default they reach the daemon over the Unix socket in the configured data
directory (`api.unix_socket`), whose file mode is its access control; with
`url=` (or `from_config(..., tcp=True)`) over loopback TCP with the bearer
token. Requests and answers are the models of daemon/api/models.py, so what a
client sends is validated before it leaves: arguments the models refuse (a misspelt
field, a number out of range, infinite or NaN, a recall's query that is neither a
text nor a sequence of numbers) raise `BadRequest` naming the field, and nothing is
sent. `ROUTES` lists every operation once: the clients, and the MCP tools through
them, know no other.

The blocking client is the one agents call around every step, and the CLIs with it: it
goes through urllib3, whose requests cost less than httpx's client's against the bare
server's floor (scripts/bench_recall.py compares the two). The asynchronous client needs
httpx for trio and asyncio alike; it is imported when that client is made.

The API's error answers become exceptions: `BadRequest` (422, 413, 401, 421, 400,
with the daemon's reason), `NotFound` (404), `Conflict` (409), `Unavailable` (503,
or no daemon answering), `ServerError` (anything else).
"""

from __future__ import annotations

import json
import socket
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Literal, Self, TypedDict, TypeVar, Unpack
from urllib.parse import quote, urlencode

import urllib3
from pydantic import BaseModel, ValidationError
from urllib3.connection import HTTPConnection
from urllib3.exceptions import NewConnectionError

if TYPE_CHECKING:
    import httpx

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, models, refusals
from dreamcycle.daemon.config import Config, load_config

Req = TypeVar("Req", bound=BaseModel | None)
Resp = TypeVar("Resp", bound=BaseModel)
Model = TypeVar("Model", bound=BaseModel)

#: The host name requests over the Unix socket carry (the socket, not DNS, picks the peer).
UNIX_HOST: Final = "localhost"


#: Every operation, as daemon/api/contract.py declares it: the clients know no other.
Route = contract.Operation
ROUTES: Final = contract.OPERATIONS


# ---- errors -------------------------------------------------------------------------------


class ApiError(Exception):
    """An operation the daemon refused or could not do; the message is its reason."""

    def __init__(self, reason: str, status: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


class BadRequest(ApiError):
    """The request is malformed, too large, lacks the token TCP requires or, over TCP,
    names a host the daemon does not answer for."""


class NotFound(ApiError):
    """The decision or chunk named is not known to the daemon."""


class Conflict(ApiError):
    """The request contradicts what is stored (saving retracted content, say)."""


class Unavailable(ApiError):
    """No daemon answers, or it is still loading its index."""


class ServerError(ApiError):
    """The daemon failed unexpectedly (its log says why)."""


_BY_STATUS: Final[dict[int, type[ApiError]]] = {
    400: BadRequest,
    401: BadRequest,
    404: NotFound,
    409: Conflict,
    413: BadRequest,
    421: BadRequest,
    422: BadRequest,
    503: Unavailable,
}


def error_for(status: int) -> type[ApiError]:
    """The exception an error answer of `status` is raised as."""
    return _BY_STATUS.get(status, ServerError)


def _reason(status: int, body: bytes) -> str:
    """An error answer's reason: its problem detail's `detail`, which names each field
    refused."""
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    detail = answer.get("detail") if isinstance(answer, dict) else None
    if isinstance(detail, str):
        return detail
    if isinstance(detail, list):  # an older daemon's validation errors: one per field
        return "; ".join(
            f"{'.'.join(str(part) for part in error.get('loc', ())[1:]) or 'request'}: "
            f"{error.get('msg', '')}"
            for error in detail
            if isinstance(error, dict)
        )
    return f"HTTP {status}: {body[:200].decode(errors='replace')}"


def _decode(route: Route[Any, Resp], status: int, body: bytes) -> Resp:
    if status == 200:
        return route.response.model_validate_json(body)
    raise error_for(status)(_reason(status, body), status)


# ---- where the daemon is -----------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """The daemon's Unix socket, or its TCP address with the token TCP requires."""

    socket_path: Path | None = None
    url: str | None = None
    token: str = ""

    def __post_init__(self) -> None:
        if (self.socket_path is None) == (self.url is None):
            raise ValueError("give exactly one of socket_path and url")

    @classmethod
    def from_config(cls, config: Config, *, tcp: bool = False) -> Endpoint:
        if tcp:
            if not config.api.port:
                raise ValueError("api.port is 0: the daemon listens on no TCP port")
            host = f"[{config.api.host}]" if ":" in config.api.host else config.api.host
            return cls(url=f"http://{host}:{config.api.port}", token=config.api.bearer_token())
        socket_path = config.api_socket_path
        if socket_path is None:
            raise ValueError("api.unix_socket is empty: connect over TCP instead")
        return cls(socket_path=socket_path)

    def __str__(self) -> str:
        return f"unix:{self.socket_path}" if self.socket_path is not None else str(self.url)

    @property
    def base_url(self) -> str:
        return self.url or f"http://{UNIX_HOST}"

    @property
    def headers(self) -> dict[str, str]:
        """What every request carries: bodies are JSON, and TCP needs the token."""
        token = {"authorization": f"Bearer {self.token}"} if self.token else {}
        return {"content-type": "application/json", **token}

    def unreachable(self, exc: Exception, *, timed_out: bool) -> Unavailable:
        if timed_out:
            return Unavailable(f"the daemon at {self} did not answer in time ({exc!r})")
        return Unavailable(
            f"no dreamcycle daemon answers at {self} ({exc}): start `dreamcycle run` "
            "(it serves the API unless [api] enabled = false)"
        )


def _endpoint(
    config: Config | None, socket_path: Path | str | None, url: str | None, token: str
) -> Endpoint:
    if socket_path is not None or url is not None:
        return Endpoint(
            socket_path=None if socket_path is None else Path(socket_path), url=url, token=token
        )
    return Endpoint.from_config(config or load_config())


@dataclass(frozen=True)
class _Prepared:
    method: str
    #: The path, and a GET's query.
    target: str
    body: bytes | None


def _prepare(route: Route[Req, Any], request: Req) -> _Prepared:
    in_path = {name for _, name, _, _ in string.Formatter().parse(route.path) if name}
    path = route.path.format(
        **{name: quote(str(getattr(request, name)), safe="") for name in in_path}
    )
    if request is None:
        return _Prepared(route.method, path, None)
    if route.method == "GET":
        fields = request.model_dump(mode="json", exclude=in_path, exclude_none=True)
        return _Prepared(route.method, f"{path}?{urlencode(fields)}" if fields else path, None)
    # Serialised by pydantic in one step: a recall's vector is 384 floats.
    body = request.model_dump_json(exclude=in_path, exclude_none=True).encode()
    return _Prepared(route.method, path, body)


# ---- the blocking client's connections -----------------------------------------------------


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


# ---- requests from arguments (shared by both clients) -------------------------------------


def request_model(model: type[Model], **fields: Any) -> Model:
    """The request model, or BadRequest naming each bad field with the rule it breaks, as
    the daemon would (nothing is sent)."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise BadRequest(refusals.text_of(exc)) from None


class SaveFields(TypedDict, total=False):
    title: str
    type: str
    kind: models.Kind
    project: str | None
    scope: str
    topic_key: str | None
    session_id: str | None
    tool_name: str | None
    pin_floor: float
    importance: int
    deletion_policy: models.DeletionPolicy
    confidence: float | None
    stability: float | None


class UpdateFields(TypedDict, total=False):
    content: str
    title: str
    type: str
    kind: models.Kind
    project: str
    scope: str
    topic_key: str
    importance: int
    reason: str


class TimelineFields(TypedDict, total=False):
    project: str
    scope: str
    session_id: str
    kind: models.Kind
    topic_key_prefix: str
    created_after_ms: int
    created_before_ms: int
    around_ms: int
    span_s: float
    limit: int
    offset: int


class PulseFields(TypedDict, total=False):
    kind: Literal["reward", "decay"]
    strength: float
    sigma: float
    k: int
    max_hops: int
    decay_per_hop: float
    ttl_s: float
    reason: str
    nonce: str


def _recall_request(
    query: str | Sequence[float],
    filters: models.RecallFilters | Mapping[str, Any] | None,
    top_k: int | None,
    record: bool,
    decision: str | None,
    min_relevance: float,
    explain: bool,
    min_confidence: float = 0.0,
) -> models.RecallRequest:
    by_text = isinstance(query, str)
    if isinstance(filters, Mapping):
        filters = request_model(models.RecallFilters, **filters)
    return request_model(
        models.RecallRequest,
        query=query if by_text else None,
        vector=None if by_text else _vector(query),
        filters=filters or models.RecallFilters(),
        top_k=top_k,
        record=record,
        decision=decision,
        min_relevance=min_relevance,
        min_confidence=min_confidence,
        explain=explain,
    )


def _vector(query: object) -> list[Any]:
    """A recall's query that is not a text, as the embedding it must be; its items are
    the request model's to check (numbers, finite), which names the bad one."""
    if isinstance(query, Iterable) and not isinstance(query, bytes | bytearray | Mapping):
        try:
            return list(query)
        except TypeError:  # iterable in type only, as a 0-d numpy array is
            pass
    raise BadRequest(
        f"query: give a text, or an embedding as a sequence of numbers; not {type(query).__name__}"
    )


def _tombstone_request(
    content_hash: str, reason: str, ttl_s: float | None
) -> models.TombstoneRequest:
    extra = {} if ttl_s is None else {"ttl_s": ttl_s}
    return request_model(models.TombstoneRequest, content_hash=content_hash, reason=reason, **extra)


def _forgotten_request(limit: int | None, offset: int) -> models.ForgottenRequest:
    extra = {} if limit is None else {"limit": limit}
    return request_model(models.ForgottenRequest, offset=offset, **extra)


def _outcome_request(
    decision: str, reward: float, reason: str, cited: Sequence[str]
) -> models.OutcomeRequest:
    return request_model(
        models.OutcomeRequest, decision_hash=decision, reward=reward, reason=reason, cited=cited
    )


def _context_request(
    task: str,
    filters: models.RecallFilters | Mapping[str, Any] | None,
    budget_tokens: int | None,
    record: bool,
    decision: str | None,
) -> models.ContextRequest:
    if isinstance(filters, Mapping):
        filters = request_model(models.RecallFilters, **filters)
    extra = {} if budget_tokens is None else {"budget_tokens": budget_tokens}
    return request_model(
        models.ContextRequest,
        task=task,
        filters=filters or models.RecallFilters(),
        record=record,
        decision=decision,
        **extra,
    )


def _pin_request(ref: str, pin_floor: float | None) -> models.PinRequest:
    extra = {} if pin_floor is None else {"pin_floor": pin_floor}
    return request_model(models.PinRequest, ref=ref, **extra)


def _feedback_request(
    ref: str, reason: str, strength: float | None, nonce: str
) -> models.FeedbackRequest:
    extra = {} if strength is None else {"strength": strength}
    return request_model(models.FeedbackRequest, ref=ref, reason=reason, nonce=nonce, **extra)


def _supersede_request(
    old_hash: str, content: str, reason: str, fields: SaveFields
) -> models.SupersedeRequest:
    memory = request_model(models.SaveRequest, content=content, **fields)
    return request_model(models.SupersedeRequest, old_hash=old_hash, memory=memory, reason=reason)


# ---- the clients ----------------------------------------------------------------------------


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
        self.endpoint = endpoint or _endpoint(config, socket_path, url, token)
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
        prepared = _prepare(route, request)
        return _decode(route, *self._exchange(prepared.method, prepared.target, prepared.body))

    def ping(self) -> None:
        """Returns when a daemon answers (maybe still loading its index); else Unavailable."""
        status, _ = self._exchange("GET", "/healthz")
        if status != 200:
            raise self.endpoint.unreachable(RuntimeError(f"HTTP {status}"), timed_out=False)

    def recall(
        self,
        query: str | Sequence[float],
        *,
        filters: models.RecallFilters | Mapping[str, Any] | None = None,
        top_k: int | None = None,
        record: bool = True,
        decision: str | None = None,
        min_relevance: float = 0.0,
        explain: bool = False,
        min_confidence: float = 0.0,
    ) -> models.RecallResponse:
        """Chunks for a text (or an embedding, a sequence of finite numbers); `record` returns
        a decision hash for outcomes. Any other query, like any argument the request model
        refuses, raises BadRequest naming it, before anything is sent."""
        return self.send(
            contract.RECALL,
            _recall_request(
                query, filters, top_k, record, decision, min_relevance, explain, min_confidence
            ),
        )

    def save(self, content: str, **fields: Unpack[SaveFields]) -> models.SaveResponse:
        return self.send(
            contract.SAVE, request_model(models.SaveRequest, content=content, **fields)
        )

    def outcome(
        self, decision: str, reward: float, reason: str, cited: Sequence[str] = ()
    ) -> models.Queued:
        """How a recalled decision turned out; `cited` names (or prefixes) the chunks it used."""
        return self.send(contract.OUTCOME, _outcome_request(decision, reward, reason, cited))

    def pulse(self, text: str, **fields: Unpack[PulseFields]) -> models.Queued:
        return self.send(contract.PULSE, request_model(models.PulseRequest, text=text, **fields))

    def tombstone(
        self, content_hash: str, reason: str, ttl_s: float | None = None
    ) -> models.Queued:
        return self.send(contract.TOMBSTONE, _tombstone_request(content_hash, reason, ttl_s))

    def status(self) -> models.StatusResponse:
        return self.send(contract.STATUS, None)

    def memory(self, ref: str) -> models.Memory:
        """One chunk, by its hash or a prefix only it has."""
        return self.send(contract.MEMORY, request_model(models.MemoryRequest, ref=ref))

    def forgotten(self, limit: int | None = None, offset: int = 0) -> models.ForgottenResponse:
        return self.send(contract.FORGOTTEN, _forgotten_request(limit, offset))

    def supersede(
        self, old_hash: str, content: str, reason: str, **fields: Unpack[SaveFields]
    ) -> models.SupersedeResponse:
        return self.send(contract.SUPERSEDE, _supersede_request(old_hash, content, reason, fields))

    def context(
        self,
        task: str,
        *,
        filters: models.RecallFilters | Mapping[str, Any] | None = None,
        budget_tokens: int | None = None,
        record: bool = True,
        decision: str | None = None,
    ) -> models.ContextResponse:
        """Pinned, previously successful and relevant memories for a task, in one budget."""
        return self.send(
            contract.CONTEXT, _context_request(task, filters, budget_tokens, record, decision)
        )

    def explain(self, ref: str) -> models.ExplainResponse:
        """Why a memory stands where it does: salience steps, decisions, learned keys."""
        return self.send(contract.EXPLAIN, request_model(models.RefRequest, ref=ref))

    def pin(self, ref: str, pin_floor: float | None = None) -> models.ChunkQueued:
        return self.send(contract.PIN, _pin_request(ref, pin_floor))

    def unpin(self, ref: str) -> models.ChunkQueued:
        return self.send(contract.UNPIN, request_model(models.RefRequest, ref=ref))

    def reinforce(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> models.ChunkQueued:
        return self.send(contract.REINFORCE, _feedback_request(ref, reason, strength, nonce))

    def penalize(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> models.ChunkQueued:
        return self.send(contract.PENALIZE, _feedback_request(ref, reason, strength, nonce))

    def revive(self, ref: str) -> models.Revival:
        """Bring a cold memory back to the live tier at the next cycle."""
        return self.send(contract.REVIVE, request_model(models.RefRequest, ref=ref))

    def update(self, ref: str, **fields: Unpack[UpdateFields]) -> models.UpdateResponse:
        return self.send(contract.UPDATE, request_model(models.UpdateRequest, ref=ref, **fields))

    def timeline(self, **fields: Unpack[TimelineFields]) -> models.TimelineResponse:
        return self.send(contract.TIMELINE, request_model(models.TimelineRequest, **fields))

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

        self.endpoint = endpoint or _endpoint(config, socket_path, url, token)
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
        prepared = _prepare(route, request)
        answered = await self._exchange(prepared.method, prepared.target, prepared.body)
        return _decode(route, *answered)

    async def ping(self) -> None:
        status, _ = await self._exchange("GET", "/healthz")
        if status != 200:
            raise self.endpoint.unreachable(RuntimeError(f"HTTP {status}"), timed_out=False)

    async def recall(
        self,
        query: str | Sequence[float],
        *,
        filters: models.RecallFilters | Mapping[str, Any] | None = None,
        top_k: int | None = None,
        record: bool = True,
        decision: str | None = None,
        min_relevance: float = 0.0,
        explain: bool = False,
        min_confidence: float = 0.0,
    ) -> models.RecallResponse:
        return await self.send(
            contract.RECALL,
            _recall_request(
                query, filters, top_k, record, decision, min_relevance, explain, min_confidence
            ),
        )

    async def save(self, content: str, **fields: Unpack[SaveFields]) -> models.SaveResponse:
        return await self.send(
            contract.SAVE, request_model(models.SaveRequest, content=content, **fields)
        )

    async def outcome(
        self, decision: str, reward: float, reason: str, cited: Sequence[str] = ()
    ) -> models.Queued:
        return await self.send(contract.OUTCOME, _outcome_request(decision, reward, reason, cited))

    async def pulse(self, text: str, **fields: Unpack[PulseFields]) -> models.Queued:
        return await self.send(
            contract.PULSE, request_model(models.PulseRequest, text=text, **fields)
        )

    async def tombstone(
        self, content_hash: str, reason: str, ttl_s: float | None = None
    ) -> models.Queued:
        return await self.send(contract.TOMBSTONE, _tombstone_request(content_hash, reason, ttl_s))

    async def status(self) -> models.StatusResponse:
        return await self.send(contract.STATUS, None)

    async def memory(self, ref: str) -> models.Memory:
        return await self.send(contract.MEMORY, request_model(models.MemoryRequest, ref=ref))

    async def forgotten(
        self, limit: int | None = None, offset: int = 0
    ) -> models.ForgottenResponse:
        return await self.send(contract.FORGOTTEN, _forgotten_request(limit, offset))

    async def supersede(
        self, old_hash: str, content: str, reason: str, **fields: Unpack[SaveFields]
    ) -> models.SupersedeResponse:
        return await self.send(
            contract.SUPERSEDE, _supersede_request(old_hash, content, reason, fields)
        )

    async def context(
        self,
        task: str,
        *,
        filters: models.RecallFilters | Mapping[str, Any] | None = None,
        budget_tokens: int | None = None,
        record: bool = True,
        decision: str | None = None,
    ) -> models.ContextResponse:
        return await self.send(
            contract.CONTEXT, _context_request(task, filters, budget_tokens, record, decision)
        )

    async def explain(self, ref: str) -> models.ExplainResponse:
        return await self.send(contract.EXPLAIN, request_model(models.RefRequest, ref=ref))

    async def pin(self, ref: str, pin_floor: float | None = None) -> models.ChunkQueued:
        return await self.send(contract.PIN, _pin_request(ref, pin_floor))

    async def unpin(self, ref: str) -> models.ChunkQueued:
        return await self.send(contract.UNPIN, request_model(models.RefRequest, ref=ref))

    async def reinforce(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> models.ChunkQueued:
        return await self.send(contract.REINFORCE, _feedback_request(ref, reason, strength, nonce))

    async def penalize(
        self, ref: str, reason: str, strength: float | None = None, nonce: str = ""
    ) -> models.ChunkQueued:
        return await self.send(contract.PENALIZE, _feedback_request(ref, reason, strength, nonce))

    async def revive(self, ref: str) -> models.Revival:
        return await self.send(contract.REVIVE, request_model(models.RefRequest, ref=ref))

    async def update(self, ref: str, **fields: Unpack[UpdateFields]) -> models.UpdateResponse:
        return await self.send(
            contract.UPDATE, request_model(models.UpdateRequest, ref=ref, **fields)
        )

    async def timeline(self, **fields: Unpack[TimelineFields]) -> models.TimelineResponse:
        return await self.send(contract.TIMELINE, request_model(models.TimelineRequest, **fields))

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
