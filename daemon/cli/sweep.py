"""`dreamcycle sweep`: the percentile sweep on demand, or a dry run of it."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import config_options, load, print_table, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "sweep",
        parents=[config_options()],
        help="tombstone the bottom percentile by salience (or show what would go)",
        description="Compute the sweep threshold (sweep.percentile of unpinned, auto-prunable "
        "live chunks) and tombstone everything below it. --dry-run only reports, and is safe "
        "while the daemon runs; a real sweep needs the daemon stopped (it sweeps every cycle).",
    )
    parser.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    parser.add_argument("--percentile", type=float, help="override sweep.percentile")
    parser.add_argument("--min-population", type=int, help="override sweep.min_population")
    parser.add_argument("--show", type=int, default=10, metavar="N", help="list N doomed chunks")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _sweep(args)))


def _sweep(args: argparse.Namespace) -> int:
    from daemon.cycle import SWEEP_REASON, sweep_plan, tombstone_labels
    from daemon.runtime import Runtime
    from store.salience import SalienceCache
    from zeitgeist.hlc import wall_clock_ms

    config = load(args)
    if args.percentile is not None:
        config.sweep.percentile = args.percentile
    if args.min_population is not None:
        config.sweep.min_population = args.min_population
    config.sweep.check()
    rt = Runtime.open(config)
    try:
        if not args.dry_run:
            rt.lock_data_dir()
        salience = SalienceCache(rt.db)
        plan = sweep_plan(config.sweep, salience)
        print(
            f"population {plan.population}  threshold {plan.threshold}  doomed {len(plan.doomed)}"
        )
        if plan.skipped_reason:
            print(f"no sweep: {plan.skipped_reason}")
            return 0
        shown = rt.db.observations(list(plan.doomed[: args.show]))
        print_table(
            [
                {
                    "salience": o.salience,
                    "hash": o.content_hash[:12],
                    "text": (o.title or o.content)[:70].replace("\n", " "),
                }
                for o in shown.values()
            ],
            ["salience", "hash", "text"],
        )
        if args.dry_run:
            print("dry run: nothing tombstoned")
            return 0
        index, _ = rt.open_index()
        hidden = tombstone_labels(
            rt.db,
            salience,
            index,
            plan.doomed,
            reason=SWEEP_REASON,
            origin_peer=rt.peer_id,
            now_ms=wall_clock_ms(),
        )
        index.save(rt.db.change_stamp())
        print(f"tombstoned {len(hidden)}")
    finally:
        rt.close()
    return 0
