"""What an operation raises besides ValueError (a bad request), transport-neutral:
the HTTP app and the MCP server each map them onto their own error form."""


class NotFound(LookupError):
    """The decision or chunk named is not known here."""


class Conflict(RuntimeError):
    """The request contradicts what is stored (saving a retracted chunk, say)."""


class NotReady(RuntimeError):
    """The index is not loaded yet (or no longer): try again shortly."""
