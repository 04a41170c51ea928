"""`dreamcycle status`: counts, salience histogram, tombstones by reason, last cycle."""

from __future__ import annotations

import argparse
import json
from typing import Any

from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    config_options,
    existing_data_epilog,
    load_existing,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "status",
        parents=[config_options(), access_options()],
        help="what this peer holds and how its last cycle went",
        description="Print counts, a histogram of live salience, tombstones by reason and the "
        "last dream cycle's phases. Safe while the daemon runs.",
        epilog=existing_data_epilog(),
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _status(args)))


def _status(args: argparse.Namespace) -> int:
    with memory_access(load_existing(args), direct=args.direct) as memory:
        report = memory.status()
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"peer {report['peer']}")
    for name, value in report["counts"].items():
        print(f"  {name:20} {value}")
    print("salience (live chunks)")
    widest = max((b["chunks"] for b in report["salience_histogram"]), default=0) or 1
    for b in report["salience_histogram"]:
        bar = "#" * round(40 * b["chunks"] / widest)
        print(f"  {b['from']:.1f}-{b['to']:.1f} {b['chunks']:7d} {bar}")
    print("tombstones by reason")
    for reason, n in report["tombstones_by_reason"].items():
        print(f"  {reason or '(none)':20} {n}")
    cycle = report["last_cycle"]
    if cycle:
        print(
            f"last cycle #{cycle['id']} {cycle['status']} {cycle['started_at']} -> {cycle['finished_at']}"
        )
        for phase, stats in cycle["phases"].items():
            print(f"  {phase:25} {json.dumps(stats, sort_keys=True)}")
    return 0
