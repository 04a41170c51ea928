"""The calls an agent makes every turn, answered without FastAPI's per-request machinery.

FastAPI takes each request through half a dozen middlewares, resolves its route's
dependencies and validates its body, all on the event loop, which every request passes
through. For the operations here, the loop only reads the body and sends the answer; the
body's validation, the operation and its answer's JSON happen in one trip to a worker
thread, behind the same limiter as FastAPI's routes. That halves the server's own part of
a recall above a bare ASGI app's (scripts/bench_recall.py measures it against the bare
server's floor, scripts/http_floor.py).

A recall that `Operations.recall_at_once` allows (by vector, recording nothing, unfiltered,
with nothing written to the index meanwhile) is answered on the event loop itself: it
waits on nothing and is short, and on two cores the trip to a worker and back costs about
as much as the recall itself. Whatever embeds, writes, may wait or must read again
what recall keeps per database state still goes to a worker, so the loop is never held
for long.

The routes stay declared in the FastAPI app: it describes them in the OpenAPI document, and
answers whatever this path does not take as it is (another method, a body that is not JSON
or does not validate), so a bad request gets FastAPI's own 422 and reasons either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from dataclasses import dataclass
from email.message import Message as MimeHeader
from typing import Any, Final

import pydantic_core
import trio
from pydantic import BaseModel

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.api.errors import PROBLEM_JSON, Refusal, problem
from dreamcycle.daemon.api.operations import Operations

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Asgi = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True)
class HotRoute:
    """A POST route whose whole request is one body model."""

    body: type[BaseModel]
    operation: Callable[[Operations, Any], BaseModel]
    #: Which requests the event loop answers itself (their bodies are then validated there).
    at_once: Callable[[Operations, Any], bool] | None = None


def _hot(
    op: contract.Operation[Any, Any], at_once: Callable[[Operations, Any], bool] | None = None
) -> tuple[str, HotRoute]:
    assert op.body is op.request is not None, f"{op.name}: its request is not its whole body"
    return op.path, HotRoute(op.request, getattr(Operations, op.name), at_once)


#: The per-turn operations, by path: what agents call around every step they take.
HOT_ROUTES: Final[Mapping[str, HotRoute]] = dict(
    (
        _hot(contract.RECALL, Operations.recall_at_once),
        _hot(contract.CONTEXT),
        _hot(contract.SAVE),
        _hot(contract.OUTCOME),
    )
)


def hot_path(
    app: Asgi, ops: Operations, limiter: trio.CapacityLimiter, max_body_bytes: int
) -> Asgi:
    """`app` (the FastAPI app), with HOT_ROUTES' well-formed requests answered here."""

    async def served(scope: Scope, receive: Receive, send: Send) -> None:
        route = HOT_ROUTES.get(scope["path"]) if scope["type"] == "http" else None
        if route is None or scope["method"] != "POST" or not _json_body(scope):
            await app(scope, receive, send)
            return
        body = await read_body(receive, max_body_bytes)
        if body is None:
            return  # the client left
        if len(body) > max_body_bytes:
            # A body without a declared length passes the guard: it is bounded here.
            await send_problem(send, 413, f"request body larger than {max_body_bytes} bytes")
            return

        def answer(request: BaseModel | None = None) -> tuple[int, bytes, bytes] | None:
            if request is None:
                request = _validated(route.body, body)
                if request is None:
                    return None
            try:
                return 200, route.operation(ops, request).model_dump_json().encode(), JSON
            except Exception as exc:
                refused = problem(exc)
                return refused.status, refused.body(), PROBLEM

        with ops.requests_first.serving():
            if route.at_once is None:
                answered = await trio.to_thread.run_sync(answer, limiter=limiter)
            elif (request := _validated(route.body, body)) is None:
                answered = None
            elif route.at_once(ops, request):
                answered = answer(request)
            else:
                answered = await trio.to_thread.run_sync(answer, request, limiter=limiter)
        if answered is None:
            await app(scope, _replaying(body, receive), send)
            return
        status, payload, media_type = answered
        await send_json(send, status, payload, media_type=media_type)

    return served


JSON: Final = b"application/json"
PROBLEM: Final = PROBLEM_JSON.encode()


async def send_json(
    send: Send,
    status: int,
    payload: bytes,
    headers: tuple[tuple[bytes, bytes], ...] = (),
    *,
    media_type: bytes = JSON,
) -> None:
    """Answer with `payload`, a JSON document (of `media_type`)."""
    start = [(b"content-type", media_type), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": status, "headers": [*start, *headers]})
    await send({"type": "http.response.body", "body": payload})


async def send_problem(
    send: Send, status: int, detail: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """Answer with an error and its reason, as every error answer is shaped (a problem
    detail)."""
    await send_json(send, status, Refusal(status, detail).body(), headers, media_type=PROBLEM)


def _validated(model: type[BaseModel], body: bytes) -> BaseModel | None:
    """`body` as a `model`; None if it is not JSON or not a valid one (FastAPI answers it)."""
    try:
        # Parsed, then validated as FastAPI does (daemon/api/json_route.py): pydantic's
        # JSON mode alone reads an integer too long for a float as infinity.
        return model.model_validate(pydantic_core.from_json(body))
    except ValueError:  # not JSON, or not a valid request (ValidationError)
        return None


def _json_body(scope: Scope) -> bool:
    """Whether the body is declared JSON as FastAPI requires before it reads one as such:
    application/json or application/...+json."""
    for name, value in scope.get("headers") or ():
        if name == b"content-type":
            header = MimeHeader()
            header["content-type"] = value.decode("latin-1")
            subtype = header.get_content_subtype()
            return header.get_content_maintype() == "application" and (
                subtype == "json" or subtype.endswith("+json")
            )
    return False


async def read_body(receive: Receive, max_body_bytes: int) -> bytes | None:
    """The body, read no further than one chunk past `max_body_bytes`; None if the client
    disconnected first."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        size += len(chunks[-1])
        if size > max_body_bytes or not message.get("more_body", False):
            return b"".join(chunks)


def _replaying(body: bytes, receive: Receive) -> Receive:
    """`receive`, giving the body already read once more first."""
    replayed = False

    async def again() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return again
