"""`dreamcycle run`: the daemon (a systemd service, Type=notify)."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any, Final

from dreamcycle.daemon.cli.common import (
    EXIT_FAILURE,
    EXIT_USAGE,
    bounded,
    config_options,
    load,
    run_guarded,
)
from dreamcycle.daemon.config.settings import option_help

#: What each exit status means, and which ones the unit restarts (RestartPreventExitStatus
#: lists the configuration errors only: scripts/systemd/dreamcycle.service).
EXIT_STATUSES: Final = (
    "Exit statuses: 0 stopped by SIGTERM/SIGINT (or --once / --cycles done). "
    "1 unexpected failure, or a phase that did not stop within 8 s of SIGTERM (what it "
    "had not committed is redone at the next start), or with --once / --cycles a cycle that "
    "failed or was deferred by a storage fault (the run still does all N; the log names why). "
    "2 configuration error, not restarted by the unit: a bad config file or option, a data "
    "directory that cannot be written (read-only mount, permissions), a zeitgeist store "
    "that does not honour create-only writes. "
    "3 cannot run here now, restarted by the unit until it clears: the data directory in "
    "use by another daemon, another process publishing under this peer id, the metrics or "
    "API address taken, no signing key yet, an unusable database or embedding model. "
    "Faults the daemon waits out instead of exiting: the zeitgeist unreachable (at start-up "
    "too: entries wait in the outbox), another process holding the database's write lock, "
    "a full disk, a data directory made read-only while running (each retried with "
    "backoff, shown in /readyz and dreamcycle_storage_fault)."
)


log = logging.getLogger("dreamcycle.cli")


class UnwritableDataDir(Exception):
    """The data directory refuses every write: a configuration error (exit 2)."""


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "run",
        parents=[config_options()],
        help="run dream cycles until SIGTERM",
        description="Run the dream cycle on an interval: poll the zeitgeist, apply entries, "
        "propagate pulses, downscale, sweep, publish. SIGTERM/SIGINT stop the running phase "
        "at its next batch, save and exit 0.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("--once", action="store_true", help="run one cycle and exit")
    parser.add_argument(
        "--cycles", type=bounded(int, at_least=1), metavar="N", help="run N cycles and exit"
    )
    parser.add_argument(
        "--interval",
        type=bounded(float, above=0.0),
        metavar="SECONDS",
        help=option_help("cycle.interval_s"),
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _run_classified(args)))


def _run_classified(args: argparse.Namespace) -> int:
    """Exit 2 for configuration errors only, so that the unit restarts everything else."""
    from dreamcycle.daemon.config import ConfigError
    from dreamcycle.zeitgeist.backend import UnsupportedStore

    try:
        return _run(args)
    except (ConfigError, UnwritableDataDir, UnsupportedStore) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _run(args: argparse.Namespace) -> int:
    from dreamcycle.daemon.observe import metrics
    from dreamcycle.daemon.observe.storage_health import unwritable_data_dir
    from dreamcycle.daemon.runtime import Runtime
    from dreamcycle.daemon.service.loop import serve, service_health
    from dreamcycle.daemon.signing_keys import check_can_run

    config = load(args)
    if args.interval is not None:
        config.cycle.interval_s = args.interval
    problem = unwritable_data_dir(config.data_dir, config.database_path)
    if problem is not None:
        raise UnwritableDataDir(problem)
    check_can_run(config)
    rt = Runtime.open(config)
    try:
        rt.lock_data_dir()
        health = service_health(rt)
        address = config.metrics.address()
        if address is not None:
            metrics.serve(address, {"/healthz": health.liveness, "/readyz": health.readiness})
        try:
            return serve(rt, max_cycles=1 if args.once else args.cycles, health=health)
        except ValueError:
            # Elsewhere a ValueError is bad input (2); once the service runs, nothing is
            # input: an unexpected failure, which the unit restarts.
            log.exception("unexpected failure")
            return EXIT_FAILURE
    finally:
        rt.close()
