"""`dreamcycle run`: the daemon (a systemd service, Type=notify)."""

from __future__ import annotations

import argparse
from typing import Any

from daemon.cli.common import bounded, config_options, load, run_guarded


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "run",
        parents=[config_options()],
        help="run dream cycles until SIGTERM",
        description="Run the dream cycle on an interval: poll the zeitgeist, apply entries, "
        "propagate pulses, downscale, sweep, publish. SIGTERM/SIGINT finish the current "
        "phase, save and exit 0.",
    )
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument(
        "--cycles", type=bounded(int, at_least=1), metavar="N", help="run N cycles and exit"
    )
    parser.add_argument(
        "--interval",
        type=bounded(float, above=0.0),
        metavar="SECONDS",
        help="seconds between cycle starts (cycle.interval_s)",
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _run(args)))


def _run(args: argparse.Namespace) -> int:
    from daemon import metrics
    from daemon.keys import check_can_run
    from daemon.runtime import Runtime
    from daemon.service import serve, service_health

    config = load(args)
    if args.interval is not None:
        config.cycle.interval_s = args.interval
    check_can_run(config)
    rt = Runtime.open(config)
    try:
        rt.lock_data_dir()
        health = service_health(rt)
        address = config.metrics.address()
        if address is not None:
            metrics.serve(address, {"/healthz": health.liveness, "/readyz": health.readiness})
        return serve(rt, max_cycles=1 if args.once else args.cycles, health=health)
    finally:
        rt.close()
