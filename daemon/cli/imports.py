"""`dreamcycle import`: bring memories over from another tool, one sub-verb per source."""

from __future__ import annotations

import argparse
from typing import Any

from dreamcycle.daemon.cli import import_engram
from dreamcycle.daemon.cli.common import VerbModule

#: One module per source; each registers its own sub-verb.
SOURCES: list[VerbModule] = [import_engram]


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "import",
        help="import memories from another tool (engram)",
        description="Import memories kept by another tool as chunks. Imports are incremental "
        "and safe while the daemon runs; see each source's --help.",
    )
    sources = parser.add_subparsers(dest="source", required=True, metavar="SOURCE")
    for module in SOURCES:
        module.register(sources)
