"""`dreamcycle ingest`: add text or JSONL files as memory chunks, with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from daemon.cli.common import config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "ingest",
        parents=[config_options()],
        help="add text or JSONL files as memory chunks",
        description="Store chunks from files: .jsonl/.ndjson (one object per line with "
        "'content' and optional title, type, kind, topic_key, project, scope, session_id, "
        "tool_name, pin_floor, importance, deletion_policy) or plain text (one chunk per "
        "paragraph). Chunks are deduplicated by content hash and embedded in batches; the "
        "daemon indexes and announces them in its next cycle.",
    )
    parser.add_argument("files", nargs="+", type=Path, metavar="FILE")
    parser.add_argument(
        "--no-embed", action="store_true", help="store only; the daemon embeds in its next cycle"
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _ingest(args)))


def _ingest(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from daemon.ingest import ingest, read_files
    from daemon.runtime import Runtime

    config = load(args)
    files = read_files(args.files)
    total = sum(len(items) for items in files)
    rt = Runtime.open(config)
    bars: dict[str, Any] = {}

    def progress(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=total, desc=stage, unit="chunk", file=sys.stderr, leave=True)
        bars[stage].update(n)

    try:
        report = ingest(rt, files, embed=not args.no_embed, progress=progress)
    finally:
        for bar in bars.values():
            bar.close()
        rt.close()
    print(
        f"files {report.files}  read {report.read}  new {report.created}  "
        f"duplicates {report.duplicates}  embedded {report.embedded}"
    )
    return 0
