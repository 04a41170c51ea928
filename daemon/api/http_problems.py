"""The API's error answers as HTTP sends and describes them: every one is a problem
detail (RFC 9457, application/problem+json: `Problem`, whose body daemon/api/errors.py
makes), and the OpenAPI document lists, for each route, the statuses it may answer and
why, each with that media type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from fastapi.responses import Response
from pydantic import BaseModel, Field

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.errors import PROBLEM_JSON, Refusal

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
GUARDED: Final = (401, 413, 421)
#: What any route with a body may answer besides its operation's own refusals.
BODY: Final = (400, 422)


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route, for the OpenAPI document: each a problem detail
    (`problem_media_types` gives them their media type)."""
    return {
        status: {"model": Problem, "description": _ERROR_REASONS[status]}
        for status in sorted(set(statuses))
    }


def problem_media_types(document: dict[str, Any]) -> dict[str, Any]:
    """`document` (the OpenAPI description), each error answer described as what it is
    sent as, application/problem+json: FastAPI describes every answer's model as JSON."""
    for methods in document.get("paths", {}).values():
        for operation in methods.values():
            for status, answer in operation.get("responses", {}).items():
                content = answer.get("content", {})
                if status[:1] in "45" and "application/json" in content:
                    content[PROBLEM_JSON] = content.pop("application/json")
    return document


def problem_response(refusal: Refusal, headers: Mapping[str, str] | None = None) -> Response:
    return Response(
        refusal.body(), status_code=refusal.status, media_type=PROBLEM_JSON, headers=headers
    )


class FieldError(BaseModel):
    """One field of a request that does not validate, and the rule it breaks."""

    loc: list[str | int] = Field(
        description='where: "body", "query" or "path" over HTTP, then the field'
    )
    msg: str = Field(description="the rule it breaks, in words")
    type: str = Field(description="the rule's name, e.g. less_than_equal, missing")
    input: Any = Field(
        default=None, description="what was given (a number JSON cannot hold, as a string)"
    )
    ctx: dict[str, Any] | None = Field(
        default=None, description="the rule's terms, e.g. its bound or pattern"
    )


class Problem(BaseModel):
    """The body of every error answer: a problem detail (RFC 9457,
    application/problem+json)."""

    type: str = Field(
        default="about:blank",
        description="about:blank: the status says what kind of problem it is",
    )
    title: str = Field(description="the status's name, e.g. Not Found")
    status: int
    detail: str = Field(
        description="why, in words; for a request that does not validate, each field "
        "named with the rule it breaks"
    )
    errors: list[FieldError] | None = Field(
        default=None, description="for a request that does not validate: each field's reason"
    )
