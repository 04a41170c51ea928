"""Where FastAPI would do a request's JSON work on the event loop, done faster or elsewhere.

Every request passes through the one event loop, so what it spends per request delays all
of them: a body is parsed by pydantic's parser rather than json.loads, and an operation's
answer is serialized by `json_answer` in the worker thread that ran it. Both leave the
OpenAPI description as it was: the routes still declare their request and response models.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import pydantic_core
from fastapi import Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel

__all__ = ["PydanticJsonRoute", "json_answer"]

JSON = "application/json"


class _PydanticJsonRequest(Request):
    """A request whose JSON body pydantic's parser reads, faster than json.loads on the
    long number lists a recall by vector carries; it runs on the event loop that every
    request passes through."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = pydantic_core.from_json(body)
            except ValueError:
                # json.loads's error (FastAPI answers it with a 422), or what only json.loads
                # accepts (a lone surrogate in a string): the same answer either way.
                self._json = json.loads(body)
        return self._json


class PydanticJsonRoute(APIRoute):
    """FastAPI's route, given a `_PydanticJsonRequest`: set as a router's `route_class`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def parsed_by_pydantic(request: Request) -> Response:
            return await handler(_PydanticJsonRequest(request.scope, request.receive))

        return parsed_by_pydantic


def json_answer(model: BaseModel) -> Response:
    """`model` as the JSON answer FastAPI would give for a route whose response model it is."""
    return Response(model.model_dump_json(), media_type=JSON)
