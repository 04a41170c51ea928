"""`dreamcycle ingest`: add text or JSONL files as memory chunks, with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.cli.access import memory_access
from daemon.cli.common import access_options, config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "ingest",
        parents=[config_options(), access_options()],
        help="add text or JSONL files as memory chunks",
        description="Store chunks from files: .jsonl/.ndjson (one object per line with "
        "'content' and optional title, type, kind, topic_key, project, scope, session_id, "
        "tool_name, pin_floor, importance, deletion_policy) or plain text (one chunk per "
        "paragraph). Files are read and checked whole before anything is stored. Chunks are "
        "deduplicated by content hash. Through a running daemon's API each is saved, embedded "
        "and indexed at once (recallable when ingest returns); directly they are embedded in "
        "batches, and the daemon indexes them in its next cycle. Either way the daemon "
        "announces them in its next cycle.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--no-embed",
        action="store_true",
        help="store only; the daemon embeds in its next cycle (always direct: the API embeds "
        "what it saves)",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _ingest(args)))


def _ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from daemon.ingest import read_files

    config = load(args)
    files = read_files(args.files)
    total = sum(len(items) for items in files)
    bars: dict[str, Any] = {}

    def progress(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=total, desc=stage, unit="chunk", file=sys.stderr, leave=True)
        bars[stage].update(n)

    try:
        with memory_access(config, direct=args.direct) as memory:
            report = memory.ingest(files, embed=not args.no_embed, progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
    print(
        f"files {report.files}  read {report.read}  new {report.created}  "
        f"duplicates {report.duplicates}  embedded {report.embedded}"
    )
    return 0
