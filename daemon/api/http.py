"""The operations over HTTP: a FastAPI app served by Hypercorn's trio worker.

Routes live under /v1; /openapi.json and /docs describe them; /mcp serves them as MCP
tools (daemon/api/mcp_tools.py); /healthz answers while the process lives, /readyz
once the index is loaded and, in the daemon, while its database, backend and cycles are
sound (daemon/service/health.py). Each operation runs in a worker thread behind the API's own
limiter, never the dream cycle's (a recall by vector that records nothing may run on the
event loop: daemon/api/hot_path.py), and its answer is serialized there too; request bodies
are parsed by pydantic's JSON parser (daemon/api/json_route.py), so the event loop, which
every request passes through, is left the HTTP protocol. The calls agents make every turn
(recall, context, save, outcome) go around FastAPI's request machinery when well formed
(daemon/api/hot_path.py), with the same answers. The Unix socket's file mode
(0600) is its access control; TCP requests (/mcp too) carry the configured bearer
token, and name this server in their Host header (localhost, a loopback address or
api.host), so that a web page cannot reach the port through a name of its own that
resolves to loopback (DNS rebinding). A bad request gets a 4xx with the reason; anything
unexpected a 500 with a short message, logged, and the server goes on. Every error answer
is a problem detail (RFC 9457, application/problem+json: daemon/api/errors.py), whose
`detail` names each field refused with the rule it breaks.

One module of about 550 lines: the routes, the guard every request passes first and the
errors each route documents are read together, since the OpenAPI document is made from
all three.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import os
import re
import stat
from collections.abc import Awaitable, Callable, Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Final, TypeVar

import trio
from fastapi import FastAPI, Query, Request
from fastapi import Path as PathParameter
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import Route

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, models
from dreamcycle.daemon.api.errors import PROBLEM_JSON, Refusal, problem
from dreamcycle.daemon.api.hot_path import Asgi, Receive, Scope, Send, hot_path, send_problem
from dreamcycle.daemon.api.json_route import PydanticJsonRoute, json_answer
from dreamcycle.daemon.api.mcp_tools import MCP_PATH, InProcess, StreamableHttp
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.config import Config
from dreamcycle.daemon.service.health import Health

log = logging.getLogger("dreamcycle.api")

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Response]])

#: Where the access log goes, with `api.access_log`.
ACCESS_LOGGER: Final = "dreamcycle.api.access"
#: Paths a TCP client may reach without the token: liveness probes carry no secrets.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: The host name every loopback interface answers to, besides its addresses.
LOOPBACK_NAME: Final = "localhost"
#: A Host header: a name or IPv4 address, or an IPv6 address in brackets; maybe a port.
_HOST_HEADER = re.compile(r"(?:\[(?P<v6>[^\]]+)\]|(?P<name>[^:\[\]]+))(?::[0-9]*)?")

#: Each error status a route may answer, as the OpenAPI document describes it.
_ERROR_REASONS: Final[dict[int, str]] = {
    400: "the body is not text JSON can be read from (not UTF-8, say)",
    401: "over TCP without the bearer token, when api.token is set",
    404: "unknown decision or chunk",
    409: "contradicts what is stored",
    413: f"a body over {defaults.API_MAX_BODY_BYTES} bytes",
    421: "over TCP, a Host header naming neither localhost, a loopback address nor api.host",
    422: "a bad request: each field named with the rule it breaks (in `detail`, and one by "
    "one in `errors`), or the operation's reason",
    503: "the index is still loading",
}
#: Answered by the guard, before any route: a foreign Host, a body too large, no token.
_GUARDED: Final = (401, 413, 421)
#: What any route with a body may answer besides its operation's own refusals.
_BODY: Final = (400, 422)


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route, for the OpenAPI document: each a problem detail
    (`_problem_media_types` gives them their media type)."""
    return {
        status: {"model": models.Problem, "description": _ERROR_REASONS[status]}
        for status in sorted(set(statuses))
    }


def _problem_media_types(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (the OpenAPI description), each error answer described as what it is
    sent as, application/problem+json: FastAPI describes every answer's model as JSON."""
    for methods in document.get("paths", {}).values():
        for operation in methods.values():
            for status, answer in operation.get("responses", {}).items():
                content = answer.get("content", {})
                if status[:1] in "45" and "application/json" in content:
                    content[PROBLEM_JSON] = content.pop("application/json")
    return document


def _problem(refusal: Refusal, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        refusal.body(), status_code=refusal.status, media_type=PROBLEM_JSON, headers=headers
    )


#: A chunk named in the path: its hash, or a prefix only it has.
Ref = Annotated[str, PathParameter(pattern=models.HASH_OR_UNIQUE_PREFIX)]


class ApiUnavailable(RuntimeError):
    """The API cannot listen where it is configured to (port taken, socket path unusable)."""


def create_app(
    ops: Operations,
    limiter: trio.CapacityLimiter,
    *,
    host: str = defaults.API_HOST,
    health: Health | None = None,
) -> FastAPI:
    """The FastAPI app; its operations run in worker threads behind `limiter`."""
    mcp = StreamableHttp(InProcess(ops, limiter), host=host)
    app = FastAPI(
        title="dreamcycle",
        summary="Recall and teach this peer's memory.",
        version="1",
        lifespan=mcp.lifespan,
        # The guard refuses a declared length over the bound; this bounds a body sent
        # without one (chunked) while it is read.
        max_body_size=defaults.API_MAX_BODY_BYTES,
    )
    app.router.route_class = PydanticJsonRoute

    described = app.openapi

    def openapi() -> dict[str, Any]:
        """FastAPI's description (made once and kept), its error answers as problem details."""
        made = app.openapi_schema is None
        document = described()
        if made:
            # A GET's query parameters are described field by field, outside their model.
            models.bounds_named(document)
            _problem_media_types(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        """A request that does not validate: each field named with the rule it breaks."""
        return _problem(Refusal.invalid(exc.errors(), part_first=True))

    @app.exception_handler(HTTPException)
    async def refused(_request: Request, exc: HTTPException) -> Response:
        """What the router refuses (an unknown path, a method a path does not take)."""
        return _problem(Refusal(exc.status_code, str(exc.detail)), exc.headers)

    async def run(operation: Callable[[], BaseModel]) -> Response:
        """The operation's answer, serialized in the worker thread too: the event loop,
        which every request passes through, only sends the bytes."""
        try:
            # In flight from here: the trip to the worker thread and back is on its path too.
            with ops.requests_first.serving():
                return await trio.to_thread.run_sync(
                    lambda: json_answer(operation()), limiter=limiter
                )
        except Exception as exc:
            return _problem(problem(exc))

    def operation(spec: contract.Operation[Any, Any]) -> Callable[[Handler], Handler]:
        """The route of operation `spec` (daemon/api/contract.py): its method, path, answer
        (what `run` returns already serialized), summary, the rules its models cannot state,
        and its refusals besides the guard's and a 503 while the index loads."""
        return app.api_route(
            spec.path,
            methods=[spec.method],
            responses=_responses(
                *_GUARDED, 503, *(_BODY if spec.takes_body else ()), *spec.refusals
            ),
            response_model=spec.response,
            summary=spec.summary,
            description=spec.rules or None,
        )

    @operation(contract.RECALL)
    async def recall(request: models.RecallRequest) -> Response:
        return await run(lambda: ops.recall(request))

    @operation(contract.SAVE)
    async def save(request: models.SaveRequest) -> Response:
        return await run(lambda: ops.save(request))

    @operation(contract.OUTCOME)
    async def outcome(request: models.OutcomeRequest) -> Response:
        return await run(lambda: ops.outcome(request))

    @operation(contract.PULSE)
    async def pulse(request: models.PulseRequest) -> Response:
        return await run(lambda: ops.pulse(request))

    @operation(contract.TOMBSTONE)
    async def tombstone(request: models.TombstoneRequest) -> Response:
        return await run(lambda: ops.tombstone(request))

    @operation(contract.STATUS)
    async def status() -> Response:
        return await run(ops.status)

    @operation(contract.MEMORY)
    async def memory(ref: Ref) -> Response:
        return await run(lambda: ops.memory(models.MemoryRequest(ref=ref)))

    @operation(contract.FORGOTTEN)
    async def forgotten(request: Annotated[models.ForgottenRequest, Query()]) -> Response:
        return await run(lambda: ops.forgotten(request))

    @operation(contract.SUPERSEDE)
    async def supersede(request: models.SupersedeRequest) -> Response:
        return await run(lambda: ops.supersede(request))

    @operation(contract.CONTEXT)
    async def context(request: models.ContextRequest) -> Response:
        return await run(lambda: ops.context(request))

    @operation(contract.EXPLAIN)
    async def explain(ref: Ref) -> Response:
        return await run(lambda: ops.explain(models.RefRequest(ref=ref)))

    @operation(contract.PIN)
    async def pin(ref: Ref, body: models.PinBody | None = None) -> Response:
        floor = {} if body is None else body.model_dump()
        return await run(lambda: ops.pin(models.PinRequest(ref=ref, **floor)))

    @operation(contract.UNPIN)
    async def unpin(ref: Ref) -> Response:
        return await run(lambda: ops.unpin(models.RefRequest(ref=ref)))

    @operation(contract.REINFORCE)
    async def reinforce(ref: Ref, body: models.FeedbackBody) -> Response:
        return await run(
            lambda: ops.reinforce(models.FeedbackRequest(ref=ref, **body.model_dump()))
        )

    @operation(contract.PENALIZE)
    async def penalize(ref: Ref, body: models.FeedbackBody) -> Response:
        return await run(lambda: ops.penalize(models.FeedbackRequest(ref=ref, **body.model_dump())))

    @operation(contract.REVIVE)
    async def revive(ref: Ref) -> Response:
        return await run(lambda: ops.revive(models.RefRequest(ref=ref)))

    @operation(contract.UPDATE)
    async def update(ref: Ref, body: models.UpdateBody) -> Response:
        return await run(lambda: ops.update(models.UpdateRequest(ref=ref, **body.model_dump())))

    @operation(contract.TIMELINE)
    async def timeline(request: Annotated[models.TimelineRequest, Query()]) -> Response:
        return await run(lambda: ops.timeline(request))

    # MCP's streamable HTTP transport: the same operations as tools, for agents.
    app.router.routes.append(Route(MCP_PATH, mcp.asgi))

    @app.get("/healthz", summary="the process is alive", responses=_responses(413, 421))
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @app.get(
        "/readyz",
        summary="index loaded; in the daemon also database, backend and a recent cycle",
        responses={
            **_responses(413, 421),
            503: {"description": "not ready: the failing checks are named"},
        },
    )
    async def readyz() -> JSONResponse:
        if not ops.ready:
            loading = {"ok": False, "error": "loading the index"}
            return JSONResponse(
                {"status": "not ready", "checks": {"index": loading}}, status_code=503
            )
        if health is None:
            return JSONResponse({"status": "ready", "checks": {"index": {"ok": True}}})
        # It opens the database: off the event loop.
        status, document = await trio.to_thread.run_sync(health.readiness)
        return JSONResponse(document, status_code=status)

    return app


def guard(app: Asgi, token: str, max_body_bytes: int, *, hosts: Collection[str] = ()) -> Asgi:
    """Refuse oversized bodies; and on TCP, requests whose Host header names neither
    localhost, a loopback address nor one of `hosts`, and those without the bearer token
    (when one is set).

    A browser sends a page's requests to the address its host name resolves to, naming
    that host: a page served from a name its owner then points at 127.0.0.1 (DNS
    rebinding) would otherwise read and write memory over loopback as same-origin, with
    no token set (the default). Hypercorn gives a Unix socket connection no server
    address: that is how TCP is told apart.
    """
    expected = token.encode()
    served = frozenset(_host_name(host) for host in hosts)

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        over_tcp = scope.get("server") is not None
        if over_tcp and not _names_this_server(headers.get(b"host"), served):
            await send_problem(
                send,
                421,
                f"this server answers requests for {LOOPBACK_NAME}, its loopback addresses "
                "and api.host only (the Host header names another)",
            )
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > max_body_bytes:
            await send_problem(send, 413, f"request body larger than {max_body_bytes} bytes")
            return
        needs_token = token and over_tcp and scope.get("path") not in OPEN_PATHS
        if needs_token and not _carries_token(headers.get(b"authorization", b""), expected):
            await send_problem(
                send,
                401,
                "a bearer token is required on TCP",
                ((b"www-authenticate", b"Bearer"),),
            )
            return
        await app(scope, receive, send)

    return guarded


def _host_name(host: str) -> str:
    """`host` (api.host) as a Host header names it: lower case, an IPv6 address bare."""
    return host.strip("[]").lower()


def _names_this_server(header: bytes | None, served: frozenset[str]) -> bool:
    """Whether a Host header names localhost, a loopback address or one of `served`, with
    or without a port."""
    found = _HOST_HEADER.fullmatch((header or b"").decode("latin-1"))
    if found is None:
        return False
    name = (found["v6"] or found["name"]).lower()
    if name == LOOPBACK_NAME or name in served:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a name, not an address
        return False


def _carries_token(authorization: bytes, token: bytes) -> bool:
    """Whether an Authorization header is the bearer `token`: the scheme's case does not
    matter (RFC 9110, 11.1); the token is compared in a time that does not tell how much
    of it matched."""
    scheme, _, credentials = authorization.partition(b" ")
    matches = hmac.compare_digest(credentials.lstrip(b" "), token)
    return scheme.lower() == b"bearer" and matches


def served_app(ops: Operations, config: Config, *, health: Health | None = None) -> Asgi:
    """What the server runs: the guard, then the hot path, then FastAPI, the last two
    sharing one limiter of `api.workers` threads (in a Trio run)."""
    api = config.api
    limiter = trio.CapacityLimiter(api.workers)
    return guard(
        hot_path(
            create_app(ops, limiter, host=api.host, health=health),
            ops,
            limiter,
            defaults.API_MAX_BODY_BYTES,
        ),
        api.bearer_token(),
        defaults.API_MAX_BODY_BYTES,
        hosts=(api.host,),
    )


def binds(config: Config) -> list[str]:
    api = config.api
    out = []
    if api.port:
        out.append(f"{api.host}:{api.port}")
    socket_path = config.api_socket_path
    if socket_path is not None:
        out.append(f"unix:{socket_path}")
    return out


async def serve(
    ops: Operations,
    config: Config,
    *,
    shutdown: trio.Event,
    health: Health | None = None,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve until `shutdown` is set (or cancelled); reports the addresses once listening."""
    hypercorn = HypercornConfig()
    hypercorn.bind = binds(config)
    # The socket is created with no access for group and others: only this user connects.
    hypercorn.umask = 0o777 & ~defaults.API_SOCKET_MODE
    # A line per request only when asked for: requests come many a second.
    hypercorn.accesslog = logging.getLogger(ACCESS_LOGGER) if config.api.access_log else None
    hypercorn.errorlog = logging.getLogger("dreamcycle.api.server")
    socket_path = config.api_socket_path
    if socket_path is not None:
        Path(socket_path).parent.mkdir(parents=True, exist_ok=True)
    app = served_app(ops, config, health=health)

    async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
        await hypercorn_serve(
            app,  # type: ignore[arg-type]  # hypercorn types scopes narrower than ASGI allows
            hypercorn,
            shutdown_trigger=shutdown.wait,
            task_status=task_status,
        )

    listened = False
    try:
        async with trio.open_nursery() as nursery:
            try:
                listening: list[str] = await nursery.start(serving)
            except (OSError, BaseExceptionGroup) as exc:
                cause = _os_error(exc)
                if cause is None:
                    raise
                raise ApiUnavailable(
                    f"cannot listen on {', '.join(hypercorn.bind)}: {cause}"
                ) from None
            listened = True
            if socket_path is not None:
                os.chmod(socket_path, defaults.API_SOCKET_MODE)
            log.info("api listening", extra={"addresses": listening})
            task_status.started(listening)
    finally:
        if listened and socket_path is not None:
            # Served no more: the socket's file goes too (a copy of the data directory,
            # or a command looking for the daemon, would meet it).
            _remove_socket(Path(socket_path))


def _remove_socket(path: Path) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISSOCK(path.lstat().st_mode):
            path.unlink()


def _os_error(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _os_error(inner)
            if found is not None:
                return found
    return None
