"""`dreamcycle import engram PATH`: an engram database's memories as chunks, incrementally."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from dreamcycle.daemon.cli.common import config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "engram",
        parents=[config_options()],
        help="import an engram database",
        description="Import the observations (and session summaries) of an engram SQLite "
        "database. The database is opened read-only and never written, so engram may be "
        "running. Run it again to bring over what changed: new memories are stored and "
        "embedded, edited ones supersede their old chunk, deleted ones are tombstoned (the "
        "daemon applies and publishes both in its next cycle), unchanged ones are skipped. "
        "Safe while the daemon runs. See docs/import.md.",
    )
    parser.add_argument("path", type=Path, metavar="PATH", help="engram's database (engram.db)")
    parser.add_argument(
        "--dry-run", action="store_true", help="report what would be imported; write nothing"
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _import(args)))


def _import(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from dreamcycle.daemon.intake.engram_import import import_engram
    from dreamcycle.daemon.intake.engram_source import read_engram
    from dreamcycle.daemon.runtime import Runtime

    config = load(args)
    # Read and checked whole before the database is opened: a bad source writes nothing.
    try:
        engram = read_engram(args.path)
    except OSError as exc:
        # A path the file system refuses (too long, unreadable) is bad input, not a failure.
        raise ValueError(f"{args.path}: cannot be read: {exc.strerror or exc}") from None
    rt = Runtime.open(config)
    bars: dict[str, Any] = {}

    def progress(stage: str, n: int, total: int | None) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=total, desc=stage, unit="chunk", file=sys.stderr, leave=True)
        bars[stage].update(n)

    try:
        report = import_engram(rt, engram, dry_run=args.dry_run, progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
        rt.close()
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    print(("dry run: " if report.dry_run else "") + report.summary())
    return 0
