"""What an operation raises besides ValueError (a bad request), the HTTP status each is
answered with, and the body of every error answer: a problem detail (RFC 9457,
application/problem+json), whose `detail` is the reason in words and, for a request that
does not validate, whose `errors` name each field. The HTTP app answers with it, and the
MCP server, like the client, turns the status into the client's exception with the same
reason."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any, Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from dreamcycle.daemon.api.refusals import field_errors, summary
from dreamcycle.store.database import InvalidObservation

log = logging.getLogger("dreamcycle.api")

#: The media type of every error answer.
PROBLEM_JSON: Final = "application/problem+json"
#: A problem the status alone describes (RFC 9457, 4.2.1).
ABOUT_BLANK: Final = "about:blank"


class NotFound(LookupError):
    """The decision or chunk named is not known here."""


class Conflict(RuntimeError):
    """The request contradicts what is stored (saving a retracted chunk, say)."""


class NotReady(RuntimeError):
    """The index is not loaded yet (or no longer): try again shortly."""


#: What an operation raises on purpose, and the status it is answered with.
_STATUSES: Final[tuple[tuple[type[Exception] | tuple[type[Exception], ...], int], ...]] = (
    (NotFound, 404),
    (Conflict, 409),
    (NotReady, 503),
    ((ValueError, InvalidObservation), 422),
)


@dataclass(frozen=True)
class Refusal:
    """An error answer: its status, the reason in words and, for a request that does not
    validate, each field's reason (as http_problems.FieldError lists it)."""

    status: int
    detail: str
    errors: Sequence[dict[str, Any]] | None = None

    @classmethod
    def invalid(cls, errors: Sequence[ErrorDetails], *, part_first: bool = False) -> Refusal:
        """A request that does not validate (422); `part_first`: each location starts with
        the HTTP request's part (body, query, path)."""
        return cls(422, summary(errors, part_first=part_first), field_errors(errors))

    def body(self) -> bytes:
        """The problem detail, as JSON proper: a number JSON cannot hold, quoted from the
        request, is spelt as a string, and non-ASCII characters are escaped (a lone
        surrogate, which JSON allows in a string, has no UTF-8 form)."""
        problem: dict[str, Any] = {
            "type": ABOUT_BLANK,
            "title": _title(self.status),
            "status": self.status,
            "detail": self.detail,
        }
        if self.errors is not None:
            problem["errors"] = _finite_numbers(list(self.errors))
        return json.dumps(problem, ensure_ascii=True, allow_nan=False, default=str).encode()


def _title(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:  # a status Python has no name for
        return f"HTTP {status}"


def _finite_numbers(value: Any) -> Any:
    """`value` (JSON's types), with each infinity or NaN spelt as the string that JSON's
    extensions spell it with."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {key: _finite_numbers(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite_numbers(item) for item in value]
    return value


def problem(exc: Exception) -> Refusal:
    """The answer an operation's exception is given; anything the operations do not raise
    on purpose is logged and answered with a 500."""
    if isinstance(exc, ValidationError):
        # A model an operation builds (an update's new version, say): its fields in words.
        return Refusal.invalid(exc.errors(include_url=False))
    for raised, status in _STATUSES:
        if isinstance(exc, raised):
            return Refusal(status, str(exc))
    log.exception("request failed", exc_info=exc)
    return Refusal(500, f"internal error ({type(exc).__name__}); see the log")
