"""`pulse-emit outcome`: the result of a decision, credited to the chunks it cites."""

from __future__ import annotations

import argparse
from typing import Any

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    bounded,
    config_options,
    load,
    reason_text,
    run_guarded,
)
from dreamcycle.pulses.constants import (
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_SIGMA,
)
from dreamcycle.pulses.outcome import REWARD_MAX, REWARD_MIN


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "outcome",
        parents=[config_options(), access_options()],
        help="report how a decision turned out",
        description="Report an outcome for a decision hash printed by `dreamcycle recall`. "
        "Without --cited an outcome credits nothing by default (learning.credit_rule = "
        f"{defaults.LEARNING_CREDIT_RULE!r}). With --cited, only the cited chunks are "
        "credited: a positive reward becomes Reward pulses at them, a negative one Decay "
        f"pulses scaled by learning.miss_factor (sigma {OUTCOME_SIGMA}, {OUTCOME_MAX_HOPS} "
        f"hops, k {OUTCOME_K}, decay {OUTCOME_DECAY_PER_HOP} per hop), and each learns (or, "
        "on a miss, unlearns) the recall's query as a retrieval key.",
    )
    parser.add_argument(
        "--decision",
        required=True,
        metavar="HASH",
        help="decision hash recorded here: 64 hex digits, or a unique prefix of at least 8",
    )
    parser.add_argument(
        "--reward",
        required=True,
        type=bounded(float, at_least=REWARD_MIN, at_most=REWARD_MAX),
        metavar="R",
        help=f"reward in [{REWARD_MIN:g}, {REWARD_MAX:g}]",
    )
    parser.add_argument(
        "--reason", required=True, type=reason_text, metavar="TOPIC", help="topic key, for audit"
    )
    parser.add_argument(
        "--cited",
        nargs="+",
        default=[],
        metavar="HASH",
        help="chunks the decision actually used: 64 hex digits, or a unique prefix of at "
        "least 8 (such as the 12 `dreamcycle recall` prints); each must be among the "
        "decision's recalled chunks",
    )
    parser.add_argument(
        "--decided-elsewhere",
        action="store_true",
        help="the decision was recorded on another peer and its attribution has not reached "
        "this one yet: queue the outcome anyway (a whole decision hash, whole cited hashes); it "
        "waits here until the attribution arrives",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _emit(args)))


def _emit(args: argparse.Namespace) -> int:
    with memory_access(load(args), direct=args.direct) as memory:
        emitted = memory.outcome(
            decision=args.decision,
            reward=args.reward,
            reason=args.reason,
            cited=args.cited,
            decided_elsewhere=args.decided_elsewhere,
        )
    print(f"{'queued' if emitted.new else 'already queued'} outcome {emitted.entry_id}")
    return 0
