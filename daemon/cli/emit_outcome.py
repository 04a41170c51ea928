"""`pulse-emit outcome`: the result of a decision, credited to the chunks it recalled."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "outcome",
        parents=[config_options()],
        help="report how a decision turned out",
        description="Report an outcome for a decision hash printed by `dreamcycle recall`. "
        "A positive reward becomes Reward pulses at each chunk that was in context, a "
        "negative one Decay pulses (sigma 0.15, 2 hops, k 3, decay 0.3 per hop).",
    )
    parser.add_argument(
        "--decision", required=True, metavar="HASH", help="decision hash (64 hex digits)"
    )
    parser.add_argument(
        "--reward", required=True, type=float, metavar="R", help="reward in [-1, 1]"
    )
    parser.add_argument("--reason", required=True, metavar="TOPIC", help="topic key, for audit")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _emit(args)))


def _emit(args: argparse.Namespace) -> int:
    from daemon.emit import emit_outcome
    from daemon.runtime import Runtime

    rt = Runtime.open(load(args))
    try:
        emitted = emit_outcome(rt, decision=args.decision, reward=args.reward, reason=args.reason)
    finally:
        rt.close()
    print(f"{'queued' if emitted.new else 'already queued'} outcome {emitted.entry_id}")
    return 0
