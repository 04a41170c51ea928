"""What a client raises for the API's error answers, one exception per kind of refusal:
`BadRequest` (422, 413, 401, 421, 400, with the daemon's reason), `NotFound` (404),
`Conflict` (409), `Unavailable` (503, or no daemon answering), `ServerError` (anything
else). Both clients raise them, and the MCP tools reached inside the daemon raise them
too, so that a refusal reads the same whichever way it came.
"""

from __future__ import annotations

import json
from typing import Final


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


def reason_of(status: int, body: bytes) -> str:
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
