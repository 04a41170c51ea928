"""`dreamcycle`: the daemon and its maintenance commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from daemon.cli import ingest, rebuild, recall, run, status, sweep


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dreamcycle",
        description="Peer-to-peer dream-cycle daemon: memory that learns from outcomes "
        "and forgets what does not help.",
        epilog="Exit codes: 0 ok, 1 unexpected failure, 2 bad arguments/config/input, "
        "3 cannot run here (data directory in use, peer id owned elsewhere, unusable database).",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="COMMAND")
    for module in (run, ingest, recall, status, sweep, rebuild):
        module.register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
