"""`dreamcycle sweep`: the percentile sweep on demand, or a dry run of it."""

from __future__ import annotations

import argparse
from typing import Any

from dreamcycle.daemon.cli.common import (
    bounded,
    config_options,
    existing_data_epilog,
    load_existing,
    print_table,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "sweep",
        parents=[config_options()],
        help="move the bottom percentile by value to the cold tier (or show what would go)",
        description="Rank every chunk of a kind, live and cold together, by a value that mixes "
        "salience, information content and importance, and move live chunks below the "
        "sweep.percentile of their kind to the cold tier (they stay findable and can come "
        "back; see `dreamcycle forgotten`). --dry-run only reports, and is safe while the "
        "daemon runs; a real sweep needs the daemon stopped (it sweeps on its own every "
        "sweep.interval_s).",
        epilog=existing_data_epilog("nothing to sweep"),
    )
    parser.add_argument("--dry-run", action="store_true", help="report only; change nothing")
    parser.add_argument(
        "--percentile",
        type=bounded(float, above=0.0, below=100.0),
        help="override sweep.percentile (between 0 and 100)",
    )
    parser.add_argument(
        "--min-population",
        type=bounded(int, at_least=0),
        help="override sweep.min_population",
    )
    parser.add_argument(
        "--show",
        type=bounded(int, at_least=0),
        default=10,
        metavar="N",
        help="list N doomed chunks",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _sweep(args)))


def _sweep(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.cycle import accounted
    from dreamcycle.daemon.memory import forgetting
    from dreamcycle.daemon.runtime import Runtime
    from dreamcycle.store.salience import SalienceCache

    config = load_existing(args)
    if args.percentile is not None:
        config.sweep.percentile = args.percentile
    if args.min_population is not None:
        config.sweep.min_population = args.min_population
    config.sweep.check()
    rt = Runtime.open(config)
    try:
        # The grace period counts in the time the cycles accounted for, as the daemon's own
        # sweeps do: a clock stepped ahead must not make young chunks sweepable here either.
        now_ms = accounted.stored(rt.db) or rt.clock.now_ms()
        plan = forgetting.plan(rt, SalienceCache(rt.db), now_ms, keep_words=not args.dry_run)
        print(
            f"population {plan.population}  already cold {plan.already_cold}  "
            f"doomed {len(plan.doomed)}"
        )
        if plan.skipped_reason:
            print(f"no sweep: {plan.skipped_reason}")
            return 0
        shown = rt.db.observations(list(plan.doomed[: args.show]))
        print_table(
            [
                {
                    "kind": o.kind,
                    "value": plan.values.get(o.rowid),
                    "threshold": plan.thresholds.get(o.kind),
                    "salience": o.salience,
                    "hash": o.content_hash[:12],
                    "text": (o.title or o.content)[:60].replace("\n", " "),
                }
                for o in shown.values()
            ],
            ["kind", "value", "threshold", "salience", "hash", "text"],
        )
        if args.dry_run:
            print("dry run: nothing moved")
            return 0
        rt.lock_data_dir()
        peer = rt.open_peer()
        try:
            stats = forgetting.sweep(peer, now_ms)
            peer.save_index()
        finally:
            peer.close()
        print(
            f"moved to the cold tier {stats.get('cold', 0)}; spared by the prune gate "
            f"{stats.get('gate_spared', 0)}"
        )
    finally:
        rt.close()
    return 0
