"""`pulse-emit tombstone`: retract a chunk on every peer, permanently."""

from __future__ import annotations

import argparse
from typing import Any

from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    config_options,
    load,
    reason_text,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "tombstone",
        parents=[config_options(), access_options()],
        help="retract a chunk everywhere",
        description="Tombstone the chunk with content hash HASH on every peer (with a Forget "
        "pulse where its embedding is stored). Tombstones win over any later Reward. A hash this "
        "peer does not know is refused unless --held-elsewhere says it is meant.",
    )
    parser.add_argument(
        "hash",
        metavar="HASH",
        help="content hash of a chunk stored (or tombstoned) here: 64 hex digits, or a unique "
        "prefix of at least 8 (such as the 12 `dreamcycle recall` prints)",
    )
    parser.add_argument("--reason", required=True, type=reason_text, help="why it is retracted")
    parser.add_argument(
        "--held-elsewhere",
        action="store_true",
        help="retract a chunk this peer has never held (a whole hash): other peers apply it",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _emit(args)))


def _emit(args: argparse.Namespace) -> int:
    config = load(args)
    with memory_access(config, direct=args.direct) as memory:
        emitted = memory.tombstone(
            content_hash=args.hash,
            reason=args.reason,
            ttl_s=config.pulses.ttl_s,
            held_elsewhere=args.held_elsewhere,
        )
    print(f"{'queued' if emitted.new else 'already queued'} tombstone {emitted.entry_id}")
    return 0
