"""The guard every request passes before any route: bodies over the bound are refused
and, on TCP, requests whose Host header names another server, and those without the
bearer token when one is set. The Unix socket's file mode (0600) is its access control.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
from collections.abc import Collection
from typing import Final

from dreamcycle.daemon.api.hot_path import Asgi, Receive, Scope, Send, read_body, send_problem

#: Paths a TCP client may reach without the token: liveness probes carry no secrets.
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
#: The host name every loopback interface answers to, besides its addresses.
LOOPBACK_NAME: Final = "localhost"
#: A Host header: a name or IPv4 address, or an IPv6 address in brackets; maybe a port.
_HOST_HEADER = re.compile(r"(?:\[(?P<v6>[^\]]+)\]|(?P<name>[^:\[\]]+))(?::[0-9]*)?")


def guard(app: Asgi, token: str, max_body_bytes: int, *, hosts: Collection[str] = ()) -> Asgi:
    """Refuse oversized bodies; and on TCP, requests whose Host header names neither
    localhost, a loopback address nor one of `hosts`, and those without the bearer token
    (when one is set).

    A browser sends a page's requests to the address its host name resolves to, naming
    that host: a page served from a name its owner then points at 127.0.0.1 (DNS
    rebinding) would otherwise read and write memory over loopback as same-origin, with
    no token set (the default). Hypercorn gives a Unix socket connection no server
    address: that is how TCP is told apart.
    """
    expected = token.encode()
    served = frozenset(_host_name(host) for host in hosts)

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        over_tcp = scope.get("server") is not None
        if over_tcp and not _names_this_server(headers.get(b"host"), served):
            await send_problem(
                send,
                421,
                f"this server answers requests for {LOOPBACK_NAME}, its loopback addresses "
                "and api.host only (the Host header names another)",
            )
            return
        length = headers.get(b"content-length", b"0")
        if not length.isdigit() or int(length) > max_body_bytes:
            await send_problem(send, 413, f"request body larger than {max_body_bytes} bytes")
            return
        needs_token = token and over_tcp and scope.get("path") not in OPEN_PATHS
        if needs_token and not _carries_token(headers.get(b"authorization", b""), expected):
            # Read first: a server that closes a connection with bytes unread in it
            # resets it, and the client may then lose the refusal (the length is bounded).
            await read_body(receive, max_body_bytes)
            await send_problem(
                send,
                401,
                "a bearer token is required on TCP",
                ((b"www-authenticate", b"Bearer"),),
            )
            return
        await app(scope, receive, send)

    return guarded


def _host_name(host: str) -> str:
    """`host` (api.host) as a Host header names it: lower case, an IPv6 address bare."""
    return host.strip("[]").lower()


def _names_this_server(header: bytes | None, served: frozenset[str]) -> bool:
    """Whether a Host header names localhost, a loopback address or one of `served`, with
    or without a port."""
    found = _HOST_HEADER.fullmatch((header or b"").decode("latin-1"))
    if found is None:
        return False
    name = (found["v6"] or found["name"]).lower()
    if name == LOOPBACK_NAME or name in served:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:  # a name, not an address
        return False


def _carries_token(authorization: bytes, token: bytes) -> bool:
    """Whether an Authorization header is the bearer `token`: the scheme's case does not
    matter (RFC 9110, 11.1); the token is compared in a time that does not tell how much
    of it matched."""
    scheme, _, credentials = authorization.partition(b" ")
    matches = hmac.compare_digest(credentials.lstrip(b" "), token)
    return scheme.lower() == b"bearer" and matches
