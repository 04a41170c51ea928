"""`dreamcycle efficacy`: the three efficacy metrics now, or under another update rule."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any

from dreamcycle.daemon.cli.common import (
    bounded,
    config_options,
    existing_data_epilog,
    load_existing,
    print_table,
    run_guarded,
)
from dreamcycle.daemon.config.settings import BY_NAME, option_help

if TYPE_CHECKING:
    from dreamcycle.daemon.cycle.efficacy import Measurement
    from dreamcycle.daemon.runtime import Runtime

CURRENT = "current"


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "efficacy",
        parents=[config_options()],
        help="how well salience tracks what helped: the three efficacy metrics",
        description="Print recall hit rate (share of chunks in context for recent decisions "
        "that stand above the median salience), attribution-salience correlation (Spearman "
        "of the reward credited to each chunk against its salience) and counterfactual "
        "replay (share of the chunks recent successful decisions found that recall still "
        "finds), over the decisions of the look-back window. With --rule, the journal is replayed under that pulse update rule (and "
        "under the configured one, when it differs) and the first two metrics are measured "
        "on each replayed salience, side by side; counterfactual replay is always the "
        "current state's. Read-only: safe while the daemon runs.",
        epilog=existing_data_epilog(),
    )
    parser.add_argument(
        "--rule",
        choices=BY_NAME["pulses.update_rule"].choices,
        help="replay every pulse of the journal with this update rule and compare",
    )
    parser.add_argument(
        "--window-s",
        type=bounded(float, above=0.0),
        metavar="S",
        help=option_help("efficacy.window_s", default_of=True),
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _efficacy(args)))


def _efficacy(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.cycle.efficacy import (
        gather,
        held_salience,
        learned,
        read_only_peer,
        replayed,
        window_label,
    )
    from dreamcycle.daemon.runtime import Runtime

    config = load_existing(args)
    window_s = config.efficacy.window_s if args.window_s is None else args.window_s
    if not (window_s > 0 and math.isfinite(window_s)):
        raise ValueError(f"--window-s must be > 0 and finite, got {window_s}")
    configured = config.pulses.update_rule
    rules = [] if args.rule is None else list(dict.fromkeys([configured, args.rule]))
    window = window_label(window_s)
    rt = Runtime.open(config)
    try:
        now_ms = rt.clock.now_ms()
        # A window reaching before 1970 already holds everything; longer ones would
        # overflow the timestamps it is turned into.
        window_s = min(window_s, now_ms / 1000)
        peer = read_only_peer(rt)
        inputs = gather(rt.db, now_ms - int(window_s * 1000))
        counterfactual = replayed(peer, now_ms, window_s)
        columns: dict[str, list[Measurement]] = {
            CURRENT: [*learned(inputs, held_salience(peer.salience, rt.db), window), counterfactual]
        }
        for rule in rules:
            columns[rule] = [*learned(inputs, _replayed_salience(rt, rule), window), counterfactual]
    finally:
        rt.close()
    note = (
        "counterfactual_replay is the current state's in every column (the window's "
        "successful decisions ranked again now): a replay has no recall state of its own"
    )
    if args.json:
        report = {
            "peer": config.peer.id,
            "window": window,
            "window_s": window_s,
            "configured_rule": configured,
            CURRENT: _as_json(columns[CURRENT]),
            "replayed": {rule: _as_json(columns[rule]) for rule in rules},
        }
        if rules:
            report["note"] = note
        print(json.dumps(report, indent=2))
        return 0
    print(f"efficacy of peer {config.peer.id} over the last {window} (update rule: {configured})")
    titles = {CURRENT: CURRENT, **{rule: f"{rule} (replayed)" for rule in rules}}
    print_table(
        [
            {
                "metric": metric,
                **{titles[name]: _cell(found[i]) for name, found in columns.items()},
            }
            for i, metric in enumerate(m.metric for m in columns[CURRENT])
        ],
        ["metric", *titles.values()],
    )
    if rules:
        print(note)
    return 0


def _replayed_salience(rt: Runtime, rule: str) -> dict[int, float]:
    """Salience of the chunks live after replaying the journal with every pulse under `rule`."""
    from tqdm import tqdm

    from dreamcycle.daemon.memory.rebuild import replay
    from dreamcycle.pulses.propagate import UpdateRule

    total = sum(rt.db.journal_counts().values())
    with tqdm(
        total=total, desc=f"replay ({rule})", unit="step", file=sys.stderr, disable=None
    ) as bar:

        def progress(done: int) -> None:
            bar.update(done - bar.n)

        state, index = replay(rt, progress, rule=UpdateRule(rule))
    return {
        label: state.salience(label)
        for label in state.labels()
        if not state.is_tombstoned(label) and index.is_live(label)
    }


def _cell(measurement: Measurement) -> str:
    value = "n/a" if measurement.value is None else f"{measurement.value:.4f}"
    return f"{value} (n={measurement.n})"


def _as_json(found: list[Measurement]) -> dict[str, dict[str, Any]]:
    return {m.metric: {"value": m.value, "n": m.n, "window": m.window} for m in found}
