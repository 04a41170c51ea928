"""The API's routes: one per operation, as daemon/api/contract.py declares it (its
method, path, models, summary, the rules its models cannot state and its refusals), each
running its operation in a worker thread behind the API's limiter and answering with the
JSON serialized there; and the probes, /healthz while the process lives and /readyz once
the index is loaded and, in the daemon, while its database, backend and cycles are sound
(daemon/observe/health.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final, TypeVar, cast

import trio
from fastapi import FastAPI, Query
from fastapi import Path as PathParameter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.api.errors import problem
from dreamcycle.daemon.api.http_problems import BODY, GUARDED, error_responses, problem_response
from dreamcycle.daemon.api.json_route import json_answer
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.observe.health import Health

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Response]])


def operation_routes(app: FastAPI, ops: Operations, limiter: trio.CapacityLimiter) -> None:
    """A route on `app` for every operation, each run in a worker thread behind `limiter`."""

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
            return problem_response(problem(exc))

    def operation(spec: contract.Operation[Any, Any]) -> Callable[[Handler], Handler]:
        """The route of operation `spec` (daemon/api/contract.py): its method, path, answer
        (what `run` returns already serialized), summary, the rules its models cannot state,
        and its refusals besides the guard's and a 503 while the index loads."""
        return app.api_route(
            spec.path,
            methods=[spec.method],
            responses=error_responses(
                *GUARDED, 503, *(BODY if spec.takes_body else ()), *spec.refusals
            ),
            response_model=spec.response,
            summary=spec.summary,
            description=spec.rules or None,
        )

    for spec in contract.OPERATIONS:
        operation(spec)(_endpoint(spec, ops, run))


def _endpoint(
    spec: contract.Operation[Any, Any],
    ops: Operations,
    run: Callable[[Callable[[], BaseModel]], Awaitable[Response]],
) -> Callable[..., Awaitable[Response]]:
    """The route function of operation `spec`: its signature, made from the request model,
    is what FastAPI reads and validates (the path's fields as path parameters, a GET's
    others as its query, a POST's as its JSON body). Beside path fields, a body none of
    whose fields is required may be left out (a pin's floor has a default; an update that
    changes nothing is refused by the operation). Where the path carries fields, the
    request is made from them and the body in the worker thread, so that a rule across the
    two is refused as every refusal is."""
    sent_as = "query" if spec.method == "GET" else "body"
    if sent_as in spec.path_fields:
        raise TypeError(f"{spec.name}: a path field may not be named {sent_as!r}")
    parameters = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=_in_path(spec, name))
        for name in sorted(spec.path_fields)
    ]
    body = spec.body
    if spec.request is not None and spec.method == "GET":
        if spec.path_fields:
            if set(spec.request.model_fields) != spec.path_fields:
                raise TypeError(f"{spec.name}: a GET's path and query cannot be mixed")
        else:
            query = Annotated[spec.request, Query()]  # type: ignore[name-defined]
            parameters.append(
                inspect.Parameter(sent_as, inspect.Parameter.KEYWORD_ONLY, annotation=query)
            )
    elif body is not None:
        optional = spec.path_fields and not any(f.is_required() for f in body.model_fields.values())
        parameters.append(
            inspect.Parameter(
                sent_as,
                inspect.Parameter.KEYWORD_ONLY,
                annotation=body | None if optional else body,
                default=None if optional else inspect.Parameter.empty,
            )
        )

    async def endpoint(**given: Any) -> Response:
        def answer() -> BaseModel:
            call = getattr(ops, spec.name)
            sent = given.get(sent_as)
            if spec.request is None:
                return cast(BaseModel, call())
            if not spec.path_fields and sent is not None:
                return cast(BaseModel, call(sent))  # validated whole by FastAPI
            fields = {name: given[name] for name in spec.path_fields}
            if sent is not None:
                fields.update(sent.model_dump(exclude_unset=True))
            return cast(BaseModel, call(spec.request(**fields)))

        return await run(answer)

    endpoint.__name__ = spec.name
    endpoint.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]
    return endpoint


def _in_path(spec: contract.Operation[Any, Any], name: str) -> Any:
    """Request field `name`, as the path parameter it is, with its description and the
    bounds it states (a path carries text only)."""
    assert spec.request is not None
    if spec.request.model_fields[name].annotation is not str:
        raise TypeError(f"{spec.name}: path field {name!r} must be a str")
    stated = spec.request.model_json_schema()["properties"][name]
    bounds = {ours: stated[theirs] for ours, theirs in _PATH_BOUNDS.items() if theirs in stated}
    return Annotated[str, PathParameter(**bounds)]


#: A path field's description and bounds, as FastAPI's `Path` and JSON Schema name them.
_PATH_BOUNDS: Final = {
    "description": "description", "pattern": "pattern", "min_length": "minLength",
    "max_length": "maxLength",
}  # fmt: skip


def probe_routes(app: FastAPI, ops: Operations, health: Health | None) -> None:
    """/healthz and /readyz on `app`; readiness is `health`'s to judge once the index is
    loaded (None: the index alone)."""

    @app.get("/healthz", summary="the process is alive", responses=error_responses(413, 421))
    async def healthz() -> dict[str, str]:
        return {"status": "alive"}

    @app.get(
        "/readyz",
        summary="index loaded; in the daemon also database, backend and a recent cycle",
        responses={
            **error_responses(413, 421),
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
