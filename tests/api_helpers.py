"""A real `dreamcycle run` daemon with its local API on, for the client and MCP tests; and
the same operations opened in the test's own process, for the tests that call them there."""

from __future__ import annotations

import socket
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from dreamcycle.daemon import runtime
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import Unavailable
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from tests.daemon_helpers import Daemon, Peer, wait_until

TOKEN: Final = "token-for-tests"
SOCKET_NAME: Final = "api.sock"
#: Cycles every second, so what the next cycle applies shows within a test.
INTERVAL_S: Final = "1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class ApiDaemon:
    peer: Peer
    daemon: Daemon
    port: int

    @property
    def socket_path(self) -> str:
        return str(self.peer.data_dir / SOCKET_NAME)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def api_settings(port: int) -> dict[str, str]:
    return {
        "DREAMCYCLE_API_ENABLED": "true",
        "DREAMCYCLE_API_PORT": str(port),
        "DREAMCYCLE_API_TOKEN": TOKEN,
    }


def _ready(memory: MemoryClient) -> bool:
    try:
        memory.status()
    except Unavailable:
        return False
    return True


@contextmanager
def running_api(
    peer: Peer, settings: Mapping[str, str] | None = None, *, interval_s: str = INTERVAL_S
) -> Iterator[ApiDaemon]:
    """`peer`'s daemon with the API on (token on TCP), until it answers operations; stopped
    with SIGTERM afterwards, which must exit 0."""
    port = free_port()
    peer.settings.update({**api_settings(port), **(settings or {})})
    with peer.start("--interval", interval_s) as daemon:
        daemon.wait_ready()
        served = ApiDaemon(peer, daemon, port)
        with MemoryClient(served.socket_path) as memory:
            wait_until(lambda: _ready(memory), what="the API to answer", context=daemon.log_tail)
        yield served
        assert daemon.terminate() == 0, daemon.log_tail()


def wait_applied(served: ApiDaemon, entry_id: str) -> None:
    """Until a cycle has applied an entry this peer queued (an outcome, pulse, revision)."""
    wait_until(
        lambda: served.peer.query(
            "SELECT 1 FROM outbox WHERE entry_id = ? AND applied = 1", (entry_id,)
        ),
        what=f"entry {entry_id} to be applied",
        context=served.daemon.log_tail,
    )


@contextmanager
def opened_runtime(root: Path, peer_id: str, now_ms: int) -> Iterator[runtime.Runtime]:
    """A peer's runtime opened in this process under `root` (metrics off), its time a
    manual clock at `now_ms`. The directories' names are short: the API's Unix socket is
    made in the data directory."""
    config = load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(root / "d"),
            "peer.id": peer_id,
            "metrics.listen": "",
            "zeitgeist.dir": str(root / "z"),
        },
    )
    opened = runtime.Runtime.open(config, clock=ManualClock(now_ms))
    try:
        yield opened
    finally:
        opened.close()


@contextmanager
def attached_operations(rt: runtime.Runtime) -> Iterator[tuple[runtime.Peer, Operations]]:
    """The API's operations serving `rt`'s peer, as the daemon attaches them."""
    peer = rt.open_peer()
    operations = Operations(rt, embedder=rt.embedder)
    operations.attach(peer)
    try:
        yield peer, operations
    finally:
        operations.close()
        peer.close()
