"""`dreamcycle recall`: what memory says about a query; records the attribution."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from typing import Any

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    access_options,
    bounded,
    config_options,
    existing_data_epilog,
    load_existing,
    print_table,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "recall",
        parents=[config_options(), access_options()],
        help="top-k chunks for a query; prints the decision hash",
        description="Rank chunks by similarity to QUERY and by salience, record which chunks "
        "were in context (an attribution), and print its decision hash: pass it to "
        "`pulse-emit outcome --decision` once the outcome is known.",
        epilog=existing_data_epilog(),
    )
    parser.add_argument("query")
    parser.add_argument(
        "-k",
        "--top-k",
        type=bounded(int, at_least=1, at_most=defaults.RECALL_MAX_TOP_K),
        metavar="N",
        help=f"chunks to return (1-{defaults.RECALL_MAX_TOP_K})",
    )
    parser.add_argument(
        "--decision", metavar="TEXT", help="the decision these chunks informed (default: the query)"
    )
    parser.add_argument(
        "--min-confidence",
        type=bounded(float, at_least=0.0, at_most=1.0),
        default=0.0,
        metavar="C",
        help="rank only memories at least this certain (0-1; default 0: all)",
    )
    parser.add_argument("--no-record", action="store_true", help="read only: no attribution")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _recall(args)))


def _recall(args: argparse.Namespace) -> int:
    with memory_access(load_existing(args), direct=args.direct) as memory:
        result = memory.recall(
            args.query,
            top_k=args.top_k,
            decision=args.decision,
            record=not args.no_record,
            min_confidence=args.min_confidence,
        )
    if args.json:
        print(
            json.dumps(
                {"decision_hash": result.decision_hash, "hits": [asdict(h) for h in result.hits]},
                indent=2,
            )
        )
        return 0
    rows = [
        {
            "score": h.score,
            "similarity": h.similarity,
            "salience": h.salience,
            "confidence": h.confidence,
            "hash": h.content_hash[:12],
            "text": (h.title or h.content)[:70].replace("\n", " "),
        }
        for h in result.hits
    ]
    print_table(rows, ["score", "similarity", "salience", "confidence", "hash", "text"])
    if result.decision_hash:
        print(f"decision {result.decision_hash}")
    return 0
