"""The operations over HTTP: the FastAPI app put together, and served by Hypercorn's trio
worker.

Routes live under /v1 (daemon/api/http_routes.py); /openapi.json and /docs describe them;
/mcp serves them as MCP tools (daemon/api/mcp_server.py); /healthz answers while the
process lives, /readyz once the index is loaded and, in the daemon, while its database,
backend and cycles are sound (daemon/observe/health.py). Each operation runs in a worker
thread behind the API's own limiter, never the dream cycle's (a recall by vector that
records nothing may run on the event loop: daemon/api/hot_path.py), and its answer is
serialized there too; request bodies are parsed by pydantic's JSON parser
(daemon/api/json_route.py), so the event loop, which every request passes through, is left
the HTTP protocol. The calls agents make every turn (recall, context, save, outcome) go
around FastAPI's request machinery when well formed (daemon/api/hot_path.py), with the
same answers. Every request passes the guard first (daemon/api/http_guard.py): the Unix
socket's file mode (0600) is its access control; TCP requests (/mcp too) carry the
configured bearer token, and name this server in their Host header (localhost, a loopback
address or api.host), so that a web page cannot reach the port through a name of its own
that resolves to loopback (DNS rebinding). A bad request gets a 4xx with the reason;
anything unexpected a 500 with a short message, logged, and the server goes on. Every
error answer is a problem detail (RFC 9457, application/problem+json:
daemon/api/http_problems.py), whose `detail` names each field refused with the rule it
breaks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import Any, Final

import trio
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve as hypercorn_serve
from starlette.exceptions import HTTPException
from starlette.routing import Route

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import model_fields
from dreamcycle.daemon.api.errors import Refusal
from dreamcycle.daemon.api.hot_path import Asgi, hot_path
from dreamcycle.daemon.api.http_guard import guard
from dreamcycle.daemon.api.http_problems import problem_media_types, problem_response
from dreamcycle.daemon.api.http_routes import operation_routes, probe_routes
from dreamcycle.daemon.api.json_route import PydanticJsonRoute
from dreamcycle.daemon.api.mcp_lazy import LazyStreamableHttp
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.config import Config
from dreamcycle.daemon.observe.health import Health

log = logging.getLogger("dreamcycle.api")

#: Where the access log goes, with `api.access_log`.
ACCESS_LOGGER: Final = "dreamcycle.api.access"


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
    mcp = LazyStreamableHttp(ops, limiter, host=host)
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
            model_fields.bounds_named(document)
            problem_media_types(document)
        return document

    app.openapi = openapi  # type: ignore[method-assign]

    @app.exception_handler(RequestValidationError)
    async def invalid_request(_request: Request, exc: RequestValidationError) -> Response:
        """A request that does not validate: each field named with the rule it breaks."""
        return problem_response(Refusal.invalid(exc.errors(), part_first=True))

    @app.exception_handler(HTTPException)
    async def refused(_request: Request, exc: HTTPException) -> Response:
        """What the router refuses (an unknown path, a method a path does not take)."""
        return problem_response(Refusal(exc.status_code, str(exc.detail)), exc.headers)

    operation_routes(app, ops, limiter)

    # MCP's streamable HTTP transport: the same operations as tools, for agents (set up
    # by the first MCP request).
    app.router.routes.append(Route(defaults.MCP_PATH, mcp))

    probe_routes(app, ops, health)

    return app


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
    hypercorn.keep_alive_timeout = defaults.API_KEEP_ALIVE_S
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
