"""The API's routes: one per operation, as daemon/api/contract.py declares it (its
method, path, models, summary, the rules its models cannot state and its refusals), each
running its operation in a worker thread behind the API's limiter and answering with the
JSON serialized there; and the probes, /healthz while the process lives and /readyz once
the index is loaded and, in the daemon, while its database, backend and cycles are sound
(daemon/observe/health.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

import trio
from fastapi import FastAPI, Query
from fastapi import Path as PathParameter
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from dreamcycle.daemon.api import contract, edit_models, model_fields, recall_models, report_models
from dreamcycle.daemon.api.errors import problem
from dreamcycle.daemon.api.http_problems import BODY, GUARDED, error_responses, problem_response
from dreamcycle.daemon.api.json_route import json_answer
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.observe.health import Health

Handler = TypeVar("Handler", bound=Callable[..., Awaitable[Response]])

#: A chunk named in the path: its hash, or a prefix only it has.
Ref = Annotated[str, PathParameter(pattern=model_fields.HASH_OR_UNIQUE_PREFIX)]


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

    @operation(contract.RECALL)
    async def recall(request: recall_models.RecallRequest) -> Response:
        return await run(lambda: ops.recall(request))

    @operation(contract.SAVE)
    async def save(request: edit_models.SaveRequest) -> Response:
        return await run(lambda: ops.save(request))

    @operation(contract.OUTCOME)
    async def outcome(request: edit_models.OutcomeRequest) -> Response:
        return await run(lambda: ops.outcome(request))

    @operation(contract.PULSE)
    async def pulse(request: edit_models.PulseRequest) -> Response:
        return await run(lambda: ops.pulse(request))

    @operation(contract.TOMBSTONE)
    async def tombstone(request: edit_models.TombstoneRequest) -> Response:
        return await run(lambda: ops.tombstone(request))

    @operation(contract.STATUS)
    async def status() -> Response:
        return await run(ops.status)

    @operation(contract.MEMORY)
    async def memory(ref: Ref) -> Response:
        return await run(lambda: ops.memory(report_models.MemoryRequest(ref=ref)))

    @operation(contract.FORGOTTEN)
    async def forgotten(request: Annotated[report_models.ForgottenRequest, Query()]) -> Response:
        return await run(lambda: ops.forgotten(request))

    @operation(contract.SUPERSEDE)
    async def supersede(request: edit_models.SupersedeRequest) -> Response:
        return await run(lambda: ops.supersede(request))

    @operation(contract.CONTEXT)
    async def context(request: recall_models.ContextRequest) -> Response:
        return await run(lambda: ops.context(request))

    @operation(contract.EXPLAIN)
    async def explain(ref: Ref) -> Response:
        return await run(lambda: ops.explain(model_fields.RefRequest(ref=ref)))

    @operation(contract.PIN)
    async def pin(ref: Ref, body: edit_models.PinBody | None = None) -> Response:
        floor = {} if body is None else body.model_dump()
        return await run(lambda: ops.pin(edit_models.PinRequest(ref=ref, **floor)))

    @operation(contract.UNPIN)
    async def unpin(ref: Ref) -> Response:
        return await run(lambda: ops.unpin(model_fields.RefRequest(ref=ref)))

    @operation(contract.REINFORCE)
    async def reinforce(ref: Ref, body: edit_models.FeedbackBody) -> Response:
        return await run(
            lambda: ops.reinforce(edit_models.FeedbackRequest(ref=ref, **body.model_dump()))
        )

    @operation(contract.PENALIZE)
    async def penalize(ref: Ref, body: edit_models.FeedbackBody) -> Response:
        return await run(
            lambda: ops.penalize(edit_models.FeedbackRequest(ref=ref, **body.model_dump()))
        )

    @operation(contract.REVIVE)
    async def revive(ref: Ref) -> Response:
        return await run(lambda: ops.revive(model_fields.RefRequest(ref=ref)))

    @operation(contract.UPDATE)
    async def update(ref: Ref, body: edit_models.UpdateBody) -> Response:
        return await run(
            lambda: ops.update(edit_models.UpdateRequest(ref=ref, **body.model_dump()))
        )

    @operation(contract.TIMELINE)
    async def timeline(request: Annotated[report_models.TimelineRequest, Query()]) -> Response:
        return await run(lambda: ops.timeline(request))


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
