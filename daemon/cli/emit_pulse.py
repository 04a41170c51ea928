"""`pulse-emit pulse`: a Reward or Decay pulse seeded at the embedding of some text."""

from __future__ import annotations

import argparse
from typing import Any

from dreamcycle.daemon.cli.access import PulseSpec, memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    bounded,
    config_options,
    load,
    reason_text,
    run_guarded,
)
from dreamcycle.daemon.config.settings import option_help
from dreamcycle.pulses.constants import (
    K_MAX,
    MAX_HOPS_MAX,
    MOVED_SALIENCE_MAX,
    SIGMA_MAX,
    SIGMA_MIN,
    STRENGTH_MAX,
    TTL_MAX_S,
)
from dreamcycle.pulses.pulse import PulseKind, validate_parameters


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "pulse",
        parents=[config_options(), access_options()],
        help="reward or decay the neighbourhood of a text",
        description="Emit a salience pulse seeded at TEXT's embedding. Every peer propagates "
        "it by BFS over its own k-NN graph, so peers that never held TEXT still take part. "
        "Invariants: decay_per_hop * k < 1, max_hops <= floor(-ln(1e-3) / sigma). Bounds: "
        f"strength <= {STRENGTH_MAX:g}, k <= {K_MAX}, max_hops <= {MAX_HOPS_MAX}, sigma <= "
        f"{SIGMA_MAX:g}, and strength * sum over hops h of (k * decay_per_hop) ** h <= "
        f"{MOVED_SALIENCE_MAX:g} (the most salience one pulse may move). Unset parameters "
        "come from the [pulses] config section.",
    )
    parser.add_argument("--text", required=True, help="text whose embedding seeds the pulse")
    parser.add_argument("--kind", required=True, choices=("reward", "decay", "forget"))
    parser.add_argument(
        "--strength",
        type=bounded(float, at_least=0.0, at_most=STRENGTH_MAX),
        help=option_help("pulses.strength", default_of=True),
    )
    parser.add_argument(
        "--sigma",
        type=bounded(float, at_least=SIGMA_MIN, at_most=SIGMA_MAX),
        help=option_help("pulses.sigma", default_of=True),
    )
    parser.add_argument(
        "--k",
        type=bounded(int, at_least=1, at_most=K_MAX),
        help=option_help("pulses.k", default_of=True),
    )
    parser.add_argument(
        "--max-hops",
        type=bounded(int, at_least=0, at_most=MAX_HOPS_MAX),
        help=option_help("pulses.max_hops", default_of=True),
    )
    parser.add_argument(
        "--decay-per-hop",
        type=bounded(float, at_least=0.0, below=1.0),
        help=option_help("pulses.decay_per_hop", default_of=True),
    )
    parser.add_argument(
        "--ttl",
        type=bounded(float, above=0.0, at_most=TTL_MAX_S),
        metavar="SECONDS",
        help=option_help("pulses.ttl_s", default_of=True),
    )
    parser.add_argument(
        "--reason",
        type=reason_text,
        default="manual",
        metavar="TOPIC",
        help="topic key, for audit",
    )
    parser.add_argument(
        "--nonce", default="", help="make an otherwise identical request a new pulse"
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _emit(args)))


def _emit(args: argparse.Namespace) -> int:
    config = load(args)
    defaults = config.pulses

    def pick(value: Any, default: Any) -> Any:
        return default if value is None else value

    spec = PulseSpec(
        text=args.text,
        kind=args.kind,
        strength=pick(args.strength, defaults.strength),
        sigma=pick(args.sigma, defaults.sigma),
        k=pick(args.k, defaults.k),
        max_hops=pick(args.max_hops, defaults.max_hops),
        decay_per_hop=pick(args.decay_per_hop, defaults.decay_per_hop),
        ttl_s=pick(args.ttl, defaults.ttl_s),
        reason=args.reason,
        nonce=args.nonce,
    )
    if spec.kind != PulseKind.FORGET:  # a Forget is refused with the command that makes one
        # Refused here, before the daemon or the database is reached, so that the message
        # is the same whichever way the pulse would have gone.
        validate_parameters(
            kind=PulseKind(spec.kind),
            strength=spec.strength,
            sigma=spec.sigma,
            max_hops=spec.max_hops,
            k=spec.k,
            decay_per_hop=spec.decay_per_hop,
            ttl_s=spec.ttl_s,
            reason=spec.reason,
        )
    with memory_access(config, direct=args.direct) as memory:
        emitted = memory.pulse(spec)
    print(f"{'queued' if emitted.new else 'already queued'} pulse {emitted.entry_id}")
    return 0
