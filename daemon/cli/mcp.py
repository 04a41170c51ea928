"""`dreamcycle mcp`: this peer's memory as MCP tools, over stdio, for one agent.

The tools are served by the daemon's API: when no daemon answers on the data directory's
socket, this command starts one (`dreamcycle run`, in a session of its own, logging to
the data directory) and relays to it once it serves memory, so an MCP client configured
once always gets memory. The daemon goes on running when the agent leaves, as it would
under systemd; a daemon started later by other means finds the data directory taken and
says so, and this command relays to whichever daemon answers. `--print-config CLIENT`
prints the entry an agent client needs instead (daemon/cli/mcp_clients.py).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract
from dreamcycle.daemon.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    announce_first_key,
    config_options,
    load,
    run_guarded,
)
from dreamcycle.daemon.cli.mcp_clients import (
    CLIENT_NAMES,
    client_config,
    installed_program,
    where_it_goes,
)

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config

#: Every tool served, as daemon/api/contract.py lists them.
TOOL_NAMES = contract.tool_names()
#: How often a daemon being started is asked whether it serves memory yet.
_START_POLL_S = 0.25
#: Lines of a started daemon's log shown when it does not come up.
_LOG_TAIL_LINES = 20


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "mcp",
        parents=[config_options()],
        help="serve memory to an agent over MCP (stdio); starts the daemon if none runs",
        description="Speak the Model Context Protocol on stdin/stdout. Tools: "
        f"{', '.join(TOOL_NAMES)}; each is served by the daemon's API. When no daemon "
        "answers on the data directory's socket, one is started (`dreamcycle run` with the "
        f"same configuration, logging to {defaults.STARTED_DAEMON_LOG_FILE} in the data "
        "directory) and goes on running after the agent leaves. This process never opens "
        "the database. The daemon also serves the same tools as streamable HTTP at /mcp.",
        epilog="Exit codes: 0 the agent closed stdin (or the entry was printed), 2 bad "
        "arguments or config, 3 no daemon answers and none could be started.",
    )
    parser.add_argument(
        "--tcp",
        action="store_true",
        help="reach the daemon on api.host:api.port with api.token instead of its Unix "
        "socket (never starts one)",
    )
    parser.add_argument(
        "--no-start",
        action="store_true",
        help="do not start a daemon when none answers: exit 3",
    )
    parser.add_argument(
        "--print-config",
        choices=CLIENT_NAMES,
        metavar="CLIENT",
        help=f"print the MCP server entry for CLIENT ({', '.join(CLIENT_NAMES)}), with "
        "absolute paths and this data directory, and exit",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _mcp(args)))


def _mcp(args: argparse.Namespace) -> int:
    config = load(args)
    if args.print_config is not None:
        print(client_config(args.print_config, config.data_dir, args.config), end="")
        print(f"(put it in {where_it_goes(args.print_config)})", file=sys.stderr)
        return EXIT_OK

    import trio

    from dreamcycle.daemon.api.async_client import AsyncMemoryClient
    from dreamcycle.daemon.api.client_errors import Unavailable
    from dreamcycle.daemon.api.client_wire import Endpoint
    from dreamcycle.daemon.api.mcp_server import build_server

    endpoint = Endpoint.from_config(config, tcp=args.tcp)
    if not (args.tcp or args.no_start):
        ensure_daemon(config, endpoint, _run_arguments(args))

    async def serve() -> int:
        async with AsyncMemoryClient(endpoint=endpoint) as memory:
            try:
                await memory.ping()
            except Unavailable as exc:
                print(f"error: {exc}", file=sys.stderr)
                return EXIT_UNAVAILABLE
            await build_server(memory).run_stdio_async()
        return EXIT_OK

    return trio.run(serve)


def _run_arguments(args: argparse.Namespace) -> list[str]:
    """The configuration options given to this command, for the daemon it starts."""
    given = []
    for option, value in (
        ("--config", args.config),
        ("--data-dir", args.data_dir),
        ("--peer-id", args.peer_id),
        ("--zeitgeist-dir", args.zeitgeist_dir),
    ):
        if value is not None:
            given += [option, str(value)]
    return given


def ensure_daemon(config: Config, endpoint: Any, run_arguments: list[str]) -> None:
    """Return once a daemon serves memory on `endpoint`, starting one if none answers;
    Unavailable (naming its log) if it cannot be started or does not come up in time."""
    from dreamcycle.daemon.api.client import MemoryClient
    from dreamcycle.daemon.api.client_errors import Unavailable

    def serving() -> bool:
        try:
            with MemoryClient(endpoint=endpoint) as client:
                client.status()  # answered once the index is loaded
            return True
        except Unavailable:
            return False

    if serving():
        return
    if not config.api.enabled or config.api_socket_path is None:
        raise Unavailable(
            "no daemon answers, and one started here would not serve its API on a socket "
            "([api] enabled = false, or api.unix_socket empty): start `dreamcycle run` "
            "with the API, or use --tcp"
        )
    log_path = config.data_dir / defaults.STARTED_DAEMON_LOG_FILE
    config.data_dir.mkdir(parents=True, exist_ok=True)
    announce_first_key(config)
    with open(log_path, "ab") as log:
        daemon = subprocess.Popen(
            [*installed_program(), "run", *run_arguments],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    print(f"started a daemon (pid {daemon.pid}), logging to {log_path}", file=sys.stderr)
    deadline = time.monotonic() + defaults.MCP_DAEMON_START_TIMEOUT_S
    while time.monotonic() < deadline:
        if serving():
            return
        code = daemon.poll()
        # Exited: unless another process won the data directory (it answers, or soon will).
        if code is not None and "in use by" not in _tail(log_path) and not serving():
            raise Unavailable(f"the daemon started here exited with {code}:\n{_tail(log_path)}")
        time.sleep(_START_POLL_S)
    raise Unavailable(
        f"the daemon started here serves no memory after "
        f"{defaults.MCP_DAEMON_START_TIMEOUT_S:g} s; its log:\n{_tail(log_path)}"
    )


def _tail(path: Path) -> str:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-_LOG_TAIL_LINES:])
