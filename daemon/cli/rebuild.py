"""`dreamcycle rebuild`: re-derive salience and the index from the database and the applied log."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from dreamcycle.daemon.cli.common import (
    config_options,
    existing_data_epilog,
    load_existing,
    run_guarded,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "rebuild",
        parents=[config_options()],
        help="replay the applied log into fresh salience and a fresh index",
        description="Replay every applied step (chunks, pulses, tombstones, downscales) in "
        "applied order against fresh state, then write the replayed salience and a new "
        "index. Reports how many chunks differed. Stop the daemon first.",
        epilog=existing_data_epilog("nothing to rebuild"),
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _rebuild(args)))


def _rebuild(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from dreamcycle.daemon.memory.rebuild import rebuild
    from dreamcycle.daemon.runtime import Runtime

    rt = Runtime.open(load_existing(args))
    try:
        rt.lock_data_dir()
        total = sum(rt.db.journal_counts().values())
        with tqdm(total=total, desc="replay", unit="step", file=sys.stderr) as bar:

            def progress(done: int) -> None:
                bar.update(done - bar.n)

            report = rebuild(rt, progress=progress)
    finally:
        rt.close()
    print(
        f"replayed {report.steps} steps ({report.chunks} chunks, {report.pulses} pulses); "
        f"{report.live} live chunks indexed; {report.changed} salience values corrected "
        f"(largest difference {report.max_difference:.3g})"
    )
    return 0
