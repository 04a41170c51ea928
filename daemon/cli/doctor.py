"""`dreamcycle doctor`: check that this host can run the daemon, and say how to fix what fails.

Read-only: it creates no data directory and writes nothing to the database or the index.
The checks run in order, and a failed one skips those that depend on it: the host's own
files (doctor_checks.py), then the zeitgeist backend and the clock (doctor_backend.py).
"""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict
from typing import Any

from dreamcycle.daemon.cli.common import (
    EXIT_FAILURE,
    EXIT_OK,
    config_options,
    run_guarded,
    setting_overrides,
)
from dreamcycle.daemon.cli.doctor_backend import check_backend, check_clock
from dreamcycle.daemon.cli.doctor_checks import (
    FAIL,
    OK,
    SKIP,
    WARN,
    Check,
    check_data_dir,
    check_database,
    check_index,
    check_keys,
    check_model,
)


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "doctor",
        parents=[config_options()],
        help="check config, data directory, database, index, model, backend and clock",
        description="Check what the daemon needs on this host: the configuration, the data "
        "directory's permissions, the database's integrity (PRAGMA quick_check), the index "
        "against its seal and the database, the embedding model offline, the zeitgeist "
        "backend (reachable, honours conditional writes), this clock against the backend's, "
        "and key files when configured. Prints what to do about each failure. Read-only; "
        "safe while the daemon runs.",
        epilog="Exit codes: 0 every check passed (warnings allowed), 1 a check failed.",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _doctor(args)))


def _doctor(args: argparse.Namespace) -> int:
    checks = diagnose(args)
    failed = any(check.status == FAIL for check in checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        for check in checks:
            print(f"{check.status.upper():4} {check.name:9} {check.detail}")
            if check.fix and check.status in (FAIL, WARN):
                print(f"{'':14} fix: {check.fix}")
    return EXIT_FAILURE if failed else EXIT_OK


def diagnose(args: argparse.Namespace) -> list[Check]:
    from dreamcycle.daemon.config import ConfigError, load_config

    try:
        config = load_config(args.config, overrides=setting_overrides(args))
    except ConfigError as exc:
        return [
            Check(
                "config",
                FAIL,
                str(exc),
                "correct the key named above in the config file or the DREAMCYCLE_* variable",
            )
        ]
    checks = [Check("config", OK, f"loaded ({_config_source(args)})")]
    checks.append(check_data_dir(config))
    database = check_database(config)
    checks.append(database)
    checks.append(check_index(config) if database.status == OK else _skipped("index", "database"))
    checks.append(check_model(config))
    backend, backend_check = check_backend(config)
    checks.append(backend_check)
    checks.append(check_clock(config, backend) if backend else _skipped("clock", "backend"))
    checks.append(check_keys(config))
    if backend is not None:
        backend.close()
    return checks


def _config_source(args: argparse.Namespace) -> str:
    from dreamcycle.daemon import defaults

    if args.config is not None:
        return str(args.config)
    return os.environ.get(defaults.CONFIG_ENV) or "built-in defaults"


def _skipped(name: str, because: str) -> Check:
    return Check(name, SKIP, f"not checked: the {because} check failed")
