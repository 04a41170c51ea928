"""`dreamcycle ingest`: add text or JSONL files as memory chunks, with a progress bar."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.cli.access import memory_access
from dreamcycle.daemon.cli.common import (
    EXIT_OK,
    EXIT_USAGE,
    access_options,
    config_options,
    load,
    run_guarded,
)

#: A whole JSON document, refused: JSON Lines belong in .jsonl (compared in lower case).
JSON_SUFFIX: Final = ".json"


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "ingest",
        parents=[config_options(), access_options()],
        help="add text or JSONL files as memory chunks",
        description="Store chunks from files: .jsonl/.ndjson (one object per line with "
        "'content' and optional title, type, kind, topic_key, project, scope, session_id, "
        "tool_name, pin_floor, importance, deletion_policy) or plain text (one chunk per "
        "paragraph); suffixes in any case. Files are read and checked whole before anything is "
        "stored; a file with a bad line (a field of the wrong type, or longer than any peer may "
        "publish: the error names file, line or paragraph, field and limit) stores nothing of "
        "any file. A file that is not text (a NUL byte, not UTF-8, "
        "or a .json file, where JSON Lines are .jsonl) is skipped with a line naming it, the "
        "other files are stored, and the command exits 2 at the end. Content stored before takes "
        "the metadata given now: title, topic_key, importance and pin_floor as a revision "
        "(applied at the next cycle and sent to peers), project, scope, session_id and "
        "tool_name here at once; another type, kind or deletion_policy is refused (it needs "
        "new content). Chunks are "
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

    from dreamcycle.daemon.intake.ingest import read_files

    config = load(args)
    refusals = {path: why for path in args.files if (why := not_text(path)) is not None}
    for why in refusals.values():
        print(f"error: {why}; skipped", file=sys.stderr)
    readable = [path for path in args.files if path not in refusals]
    if not readable:
        return EXIT_USAGE
    files = read_files(readable)
    total = sum(len(items) for items in files)
    bars: dict[str, Any] = {}

    def progress(stage: str, n: int) -> None:
        if stage not in bars:
            bars[stage] = tqdm(total=total, desc=stage, unit="chunk", file=sys.stderr, leave=True)
        bars[stage].update(n)

    try:
        with memory_access(config, direct=args.direct) as memory:
            memory.check_metadata(files)
            report = memory.ingest(files, embed=not args.no_embed, progress=progress)
            metadata = memory.apply_metadata(files)
    finally:
        for bar in bars.values():
            bar.close()
    print(
        f"files {report.files}  read {report.read}  new {report.created}  "
        f"duplicates {report.duplicates}  embedded {report.embedded}"
        + (f"  skipped {len(refusals)}" if refusals else "")
    )
    if metadata.revisions or metadata.updated:
        print(
            f"metadata of chunks stored before: {metadata.revisions} revisions queued "
            f"(applied at the next cycle), {metadata.updated} chunks updated here"
        )
    return EXIT_USAGE if refusals else EXIT_OK


def not_text(path: Path) -> str | None:
    """Why `path` is not a file of text to ingest, or None (unreadable files are reported
    when they are read)."""
    if path.suffix.lower() == JSON_SUFFIX:
        return (
            f"{path}: a {path.suffix} file, not text: give JSON Lines (one object per line) "
            "as .jsonl or .ndjson"
        )
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if (nul := data.find(b"\0")) >= 0:
        return f"{path}: binary, not text (a NUL byte at offset {nul})"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"{path}: binary, not UTF-8 text ({exc.reason} at byte {exc.start})"
    return None
