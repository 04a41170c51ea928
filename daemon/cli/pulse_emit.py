"""`pulse-emit`: hand the daemon an outcome, a pulse or a tombstone.

Durable when it returns (committed to the local database, fsynced), idempotent
(repeating a command queues nothing new), and safe while the daemon runs. The
daemon applies the entry in its next cycle and publishes it to the mesh.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from daemon.cli import emit_outcome, emit_pulse, emit_tombstone


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pulse-emit",
        description=__doc__.splitlines()[0] if __doc__ else None,
        epilog="Exit codes: 0 queued (or already queued), 1 unexpected failure, "
        "2 invalid input (nothing written), 3 database unusable.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="KIND")
    for module in (emit_outcome, emit_pulse, emit_tombstone):
        module.register(verbs)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
