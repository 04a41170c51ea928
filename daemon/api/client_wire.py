"""Where the daemon is, and a request's way there and back, as both clients send it.

By default a client reaches the daemon over the Unix socket in the configured data
directory (`api.unix_socket`), whose file mode is its access control; with `url=` (or
`Endpoint.from_config(..., tcp=True)`) over loopback TCP with the bearer token. `ROUTES`
lists every operation once: the clients, and the MCP tools through them, know no other.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote, urlencode

from pydantic import BaseModel

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.api.client_errors import Unavailable, error_for, reason_of
from dreamcycle.daemon.api.client_requests import request_model
from dreamcycle.daemon.config import Config, load_config

Req = TypeVar("Req", bound=BaseModel | None)
Resp = TypeVar("Resp", bound=BaseModel)

#: The host name requests over the Unix socket carry (the socket, not DNS, picks the peer).
UNIX_HOST: Final = "localhost"


#: Every operation, as daemon/api/contract.py declares it: the clients know no other.
Route = contract.Operation
ROUTES: Final = contract.OPERATIONS


def decode(route: Route[Any, Resp], status: int, body: bytes) -> Resp:
    """An answer of `route`: its model, or the exception its error answer is raised as."""
    if status == 200:
        return route.response.model_validate_json(body)
    raise error_for(status)(reason_of(status, body), status)


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


def resolve_endpoint(
    config: Config | None, socket_path: Path | str | None, url: str | None, token: str
) -> Endpoint:
    """The endpoint a client's arguments name, else the configuration's Unix socket."""
    if socket_path is not None or url is not None:
        return Endpoint(
            socket_path=None if socket_path is None else Path(socket_path), url=url, token=token
        )
    return Endpoint.from_config(config or load_config())


Client = TypeVar("Client", bound=type)


def with_every_operation(client: Client) -> Client:
    """`client`, with a method for each operation it has none of its own for (named as the
    operation, taking the request's fields as keyword arguments, checked before anything
    is sent), so that an operation added to the table is a method of both clients.
    Whether the method is a coroutine follows the client's `send`."""
    asynchronous = inspect.iscoroutinefunction(client.send)  # type: ignore[attr-defined]
    for op in contract.OPERATIONS:
        if not hasattr(client, op.name):
            method = _async_method(op) if asynchronous else _method(op)
            method.__name__ = op.name
            method.__doc__ = op.sentence
            setattr(client, op.name, method)
    return client


def _request(route: Route[Any, Any], fields: dict[str, Any]) -> Any:
    if route.request is None:
        if fields:
            raise TypeError(f"{route.name}() takes no arguments, got {sorted(fields)}")
        return None
    return request_model(route.request, **fields)


def _method(route: Route[Any, Any]) -> Callable[..., Any]:
    def method(self: Any, **fields: Any) -> Any:
        return self.send(route, _request(route, fields))

    return method


def _async_method(route: Route[Any, Any]) -> Callable[..., Any]:
    async def method(self: Any, **fields: Any) -> Any:
        return await self.send(route, _request(route, fields))

    return method


@dataclass(frozen=True)
class Prepared:
    method: str
    #: The path, and a GET's query.
    target: str
    body: bytes | None


def prepare(route: Route[Req, Any], request: Req) -> Prepared:
    """`request` as `route` sends it: the path's fields in the path, a GET's others in its
    query, a POST's as its JSON body."""
    in_path = {name for _, name, _, _ in string.Formatter().parse(route.path) if name}
    path = route.path.format(
        **{name: quote(str(getattr(request, name)), safe="") for name in in_path}
    )
    if request is None:
        return Prepared(route.method, path, None)
    if route.method == "GET":
        fields = request.model_dump(mode="json", exclude=in_path, exclude_none=True)
        return Prepared(route.method, f"{path}?{urlencode(fields)}" if fields else path, None)
    # Serialised by pydantic in one step: a recall's vector is 384 floats.
    body = request.model_dump_json(exclude=in_path, exclude_none=True).encode()
    return Prepared(route.method, path, body)
