"""`dreamcycle forgotten`: what the sweep moved to the cold tier, and why; bring one back."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any, Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    bounded,
    config_options,
    existing_data_epilog,
    load_existing,
    print_table,
    run_guarded,
)

#: SQLite binds integers as signed 64-bit: a larger LIMIT or OFFSET cannot even be sent.
SQLITE_INTEGER_MAX: Final = (1 << 63) - 1


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "forgotten",
        parents=[config_options(), access_options()],
        help="list chunks the sweep moved to the cold tier, and why",
        description="Swept chunks are not deleted: they leave the live index and default "
        "recall, recall still falls back to them when live results are weak, and they come "
        "back when their content is ingested again, when a Reward is seeded at them, or "
        "with --revive. After sweep.cold_retention_s they become permanent tombstones. "
        "Safe while the daemon runs.",
        epilog=existing_data_epilog(),
    )
    parser.add_argument(
        "-n",
        "--limit",
        type=bounded(int, at_least=1, at_most=SQLITE_INTEGER_MAX),
        default=defaults.FORGOTTEN_PAGE,
        metavar="N",
        help="rows to list",
    )
    parser.add_argument(
        "--offset",
        type=bounded(int, at_least=0, at_most=SQLITE_INTEGER_MAX),
        default=0,
        metavar="N",
        help="rows to skip",
    )
    parser.add_argument(
        "--revive",
        metavar="HASH",
        help="ask the daemon to bring this cold chunk back (at its next cycle): its hash, or a "
        "unique prefix of at least 8 hex digits",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _forgotten(args)))


def _forgotten(args: argparse.Namespace) -> int:
    with memory_access(load_existing(args), direct=args.direct) as memory:
        if args.revive is not None:
            memory.revive(args.revive)
            print(f"revival of {args.revive[:12]} requested; the daemon applies it next cycle")
            return 0
        listed = memory.forgotten(limit=args.limit, offset=args.offset)
    if args.json:
        print(json.dumps(asdict(listed), indent=2))
        return 0
    print(f"{listed.cold} chunks in the cold tier")
    print_table(
        [
            {
                "since": r.cold_at,
                "salience": r.salience,
                "hash": r.content_hash[:12],
                "why": r.reason,
                "text": r.text[:50].replace("\n", " "),
            }
            for r in listed.chunks
        ],
        ["since", "salience", "hash", "why", "text"],
    )
    return 0
