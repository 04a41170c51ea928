"""`dreamcycle`: the daemon and its maintenance commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from dreamcycle.daemon.cli import (
    backup,
    doctor,
    efficacy,
    forgotten,
    imports,
    ingest,
    install_unit,
    keys,
    rebuild,
    recall,
    run,
    status,
    sweep,
)
from dreamcycle.daemon.cli.common import VerbModule, command_parser, dispatch, verb_names

#: The verbs whose modules import little until they run. The others (`mcp` and the memory
#: operations) build their options from the API contract, whose models take a good share
#: of a command's start: a command line naming one of these verbs does without them.
LIGHT_VERBS: tuple[VerbModule, ...] = (
    run, ingest, imports, recall, status, sweep, forgotten, rebuild, efficacy, doctor, backup,
    install_unit, keys,
)  # fmt: skip


def _every_verb() -> list[VerbModule]:
    """All the verbs, in the order `--help` lists them."""
    from dreamcycle.daemon.cli import mcp, operation_verbs

    return [*LIGHT_VERBS, mcp, operation_verbs]


def build_parser(verbs: Sequence[VerbModule] | None = None) -> argparse.ArgumentParser:
    """The program's parser, with every verb unless `verbs` are given."""
    parser = command_parser(
        "dreamcycle",
        "Peer-to-peer dream-cycle daemon: memory that learns from outcomes "
        "and forgets what does not help.",
        "Exit codes: 0 ok, 1 unexpected failure, 2 bad arguments/config/input, "
        "3 cannot run here (data directory in use, peer id owned elsewhere, unusable database).",
        "COMMAND",
        _every_verb() if verbs is None else verbs,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dreamcycle")
    except PackageNotFoundError:
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    # A light verb's parser is the same in either program: the light one is enough for it.
    args = sys.argv[1:] if argv is None else list(argv)
    light = build_parser(LIGHT_VERBS)
    named = args[0] if args else None
    return dispatch(light if named in verb_names(light) else build_parser(), args)


if __name__ == "__main__":
    sys.exit(main())
