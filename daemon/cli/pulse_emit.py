"""`pulse-emit`: hand the daemon an outcome, a pulse or a tombstone.

Durable when it returns (committed to the local database, fsynced), idempotent
(repeating a command queues nothing new), and safe while the daemon runs. The
daemon applies the entry in its next cycle and publishes it to the mesh.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dreamcycle.daemon.cli import emit_outcome, emit_pulse, emit_tombstone
from dreamcycle.daemon.cli.common import command_parser, dispatch


def build_parser() -> argparse.ArgumentParser:
    return command_parser(
        "pulse-emit",
        "Hand the dreamcycle daemon an outcome, a pulse or a tombstone: durable when it "
        "returns, idempotent, safe while the daemon runs.",
        "Exit codes: 0 queued (or already queued), 1 unexpected failure, "
        "2 invalid input (nothing written), 3 database unusable.",
        "KIND",
        [emit_outcome, emit_pulse, emit_tombstone],
    )


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


if __name__ == "__main__":
    sys.exit(main())
