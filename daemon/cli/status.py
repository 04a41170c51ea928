"""`dreamcycle status`: counts, salience histogram, tombstones by reason, last cycle."""

from __future__ import annotations

import argparse
import json
from typing import Any

from daemon.cli.common import config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "status",
        parents=[config_options()],
        help="what this peer holds and how its last cycle went",
        description="Print counts, a histogram of live salience, tombstones by reason and the "
        "last dream cycle's phases. Safe while the daemon runs.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _status(args)))


def _status(args: argparse.Namespace) -> int:
    from daemon.status import status_report
    from store.database import Database

    config = load(args)
    if not config.database_path.exists():
        raise ValueError(f"no database at {config.database_path}: nothing ingested or run yet")
    db = Database(config.database_path)
    try:
        report = status_report(db, config.peer.id)
    finally:
        db.close()
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
