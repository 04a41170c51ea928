"""What an operation raises besides ValueError (a bad request), and the HTTP status each
is answered with: the HTTP app answers with it, and the MCP server, like the client,
turns the status into the client's exception."""

from __future__ import annotations

import logging
from typing import Final

from dreamcycle.store.database import InvalidObservation

log = logging.getLogger("dreamcycle.api")


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


def problem(exc: Exception) -> tuple[int, str]:
    """The status and reason an operation's exception is answered with; anything the
    operations do not raise on purpose is logged and answered with a 500."""
    for raised, status in _STATUSES:
        if isinstance(exc, raised):
            return status, str(exc)
    log.exception("request failed", exc_info=exc)
    return 500, f"internal error ({type(exc).__name__}); see the log"
