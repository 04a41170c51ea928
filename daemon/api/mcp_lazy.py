"""`/mcp`, set up by its first request.

The MCP SDK is the largest part of the API's start-up, in imports and in the models its
tools are described with. A daemon whose agents speak HTTP never needs it, and every
command that starts a daemon for a moment (`run --once`) would pay it, so the endpoint is
built when the first MCP request comes, in a worker thread while the event loop goes on
serving, and its session manager then runs in a task of the app's lifespan until the app
stops.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

if TYPE_CHECKING:
    from dreamcycle.daemon.api.mcp_server import StreamableHttp
    from dreamcycle.daemon.api.operations import Operations

_SERVER_MODULE: Final = "dreamcycle.daemon.api.mcp_server"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class LazyStreamableHttp:
    """The memory tools as streamable HTTP (mcp_server.StreamableHttp), built on first use."""

    def __init__(self, ops: Operations, limiter: trio.CapacityLimiter, *, host: str) -> None:
        self._ops = ops
        self._limiter = limiter
        self._host = host
        self._served: StreamableHttp | None = None
        self._nursery: trio.Nursery | None = None
        self._setting_up = trio.Lock()

    @asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """Keeps a task group for the session manager, once there is one."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            try:
                yield
            finally:
                self._nursery = None
                nursery.cancel_scope.cancel()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """An ASGI app (an object, not a function: a route hands it the raw request)."""
        served = self._served or await self._set_up()
        await served.asgi(scope, receive, send)

    async def _set_up(self) -> StreamableHttp:
        async with self._setting_up:
            if self._served is None:
                nursery = self._nursery
                if nursery is None:
                    raise RuntimeError("MCP was asked for outside the app's lifespan")
                served = await trio.to_thread.run_sync(self._build)
                await nursery.start(_run_sessions, served)
                self._served = served
            return self._served

    def _build(self) -> StreamableHttp:
        module = importlib.import_module(_SERVER_MODULE)
        served: StreamableHttp = module.StreamableHttp(
            module.InProcess(self._ops, self._limiter), host=self._host
        )
        return served


async def _run_sessions(
    served: StreamableHttp, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    async with served.lifespan(None):
        task_status.started()
        await trio.sleep_forever()
