"""`dreamcycle`: the daemon and its maintenance commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dreamcycle.daemon.cli import (
    backup,
    doctor,
    efficacy,
    forgotten,
    imports,
    ingest,
    install_unit,
    keys,
    mcp,
    operation_verbs,
    rebuild,
    recall,
    run,
    status,
    sweep,
)
from dreamcycle.daemon.cli.common import command_parser, dispatch


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser(
        "dreamcycle",
        "Peer-to-peer dream-cycle daemon: memory that learns from outcomes "
        "and forgets what does not help.",
        "Exit codes: 0 ok, 1 unexpected failure, 2 bad arguments/config/input, "
        "3 cannot run here (data directory in use, peer id owned elsewhere, unusable database).",
        "COMMAND",
        [
            run,
            ingest,
            imports,
            recall,
            status,
            sweep,
            forgotten,
            rebuild,
            efficacy,
            mcp,
            doctor,
            backup,
            install_unit,
            keys,
            operation_verbs,
        ],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dreamcycle")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
