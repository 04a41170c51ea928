"""`dreamcycle mcp`: the running daemon's memory as MCP tools, over stdio, for one agent."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dreamcycle.daemon.cli.common import (
    EXIT_OK,
    EXIT_UNAVAILABLE,
    config_options,
    load,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "mcp",
        parents=[config_options()],
        help="serve memory to an agent over MCP (stdio), through the running daemon",
        description="Speak the Model Context Protocol on stdin/stdout: mem_save, mem_search, "
        "mem_context, mem_get_observation, mem_stats, mem_outcome, mem_forgotten, mem_update, "
        "mem_delete and mem_session_summary, each served by the running daemon's API (start "
        "`dreamcycle run` first: it serves the API unless [api] enabled = false). This "
        "process never opens the database. The daemon also serves the same tools as "
        "streamable HTTP at /mcp.",
        epilog="Exit codes: 0 the agent closed stdin, 3 no daemon answers.",
    )
    parser.add_argument(
        "--tcp",
        action="store_true",
        help="reach the daemon on api.host:api.port with api.token instead of its Unix socket",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _mcp(args)))


def _mcp(args: argparse.Namespace) -> int:
    import trio

    from dreamcycle.daemon.api.mcp_tools import build_server
    from dreamcycle.daemon.client import AsyncMemoryClient, Endpoint, Unavailable

    endpoint = Endpoint.from_config(load(args), tcp=args.tcp)

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
