"""`dreamcycle install-unit`: put the systemd unit, its environment file and the config in place."""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli.common import EXIT_UNAVAILABLE, run_guarded

#: The checkout this command runs from holds the unit and the example config.
SOURCE_ROOT: Final = Path(__file__).resolve().parents[2]
UNIT_SOURCE: Final = SOURCE_ROOT / "scripts" / "systemd" / defaults.UNIT_NAME
ENVIRONMENT_SOURCE: Final = SOURCE_ROOT / "scripts" / "systemd" / defaults.ENVIRONMENT_FILE_NAME
CONFIG_SOURCE: Final = SOURCE_ROOT / "scripts" / "dreamcycle.example.toml"
EXEC_START: Final = re.compile(r"^ExecStart=.*$", re.MULTILINE)
EXEC_START_PRE: Final = re.compile(r"^ExecStartPre=.*\n", re.MULTILINE)
DATA_DIR_LINE: Final = re.compile(r"^data_dir = .*$", re.MULTILINE)
UNIT_MODE: Final = 0o644
#: The environment file may hold credentials.
ENVIRONMENT_MODE: Final = 0o600
CONFIG_MODE: Final = 0o644


def register(verbs: Any) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        "install-unit",
        help="install the systemd unit, its environment file and the config",
        description=f"Write {defaults.UNIT_DIR}/{defaults.UNIT_NAME} (ExecStart: this "
        "installation's dreamcycle; ExecStartPre makes the peer's signing key at the first "
        f"start, `keys init --if-missing`), {defaults.CONFIG_DIR}/{defaults.ENVIRONMENT_FILE_NAME} "
        f"and {defaults.CONFIG_DIR}/{defaults.CONFIG_FILE_NAME} (the example config, with "
        f"the service's data directory {defaults.SERVICE_DATA_DIR}). Existing environment "
        "and config files are kept (they hold your settings); the unit is replaced. Then "
        "run: systemctl daemon-reload && systemctl enable --now dreamcycle",
    )
    parser.add_argument(
        "--root",
        type=Path,
        default=Path("/"),
        metavar="DIR",
        help="install below DIR instead of / (packaging, tests); the files still name "
        "the paths they will have at /",
    )
    parser.add_argument(
        "--prefix",
        type=Path,
        default=Path(sys.prefix),
        metavar="DIR",
        help="the installation whose bin/dreamcycle the unit runs (default: this one, "
        f"{sys.prefix})",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what would be written, write nothing"
    )
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _install(args)))


def planned_files(prefix: Path) -> list[tuple[Path, str, int, bool]]:
    """(absolute path, content, mode, replace an existing file) for each file installed."""
    for source in (UNIT_SOURCE, ENVIRONMENT_SOURCE, CONFIG_SOURCE):
        if not source.is_file():
            raise FileNotFoundError(
                f"{source} is missing: install-unit runs from a checkout of dreamcycle"
            )
    executable = prefix / "bin" / "dreamcycle"
    if not os.access(executable, os.X_OK):
        raise ValueError(f"--prefix {prefix}: {executable} is not an executable")
    # A fresh install has no signing key and `run` refuses to start without one: the
    # service makes it, with its own user, config and state directory, before each start
    # (kept when it exists).
    unit = EXEC_START.sub(
        f"ExecStartPre={executable} keys init --if-missing\nExecStart={executable} run",
        EXEC_START_PRE.sub("", UNIT_SOURCE.read_text(encoding="utf-8")),
    )
    config = DATA_DIR_LINE.sub(
        f'data_dir = "{defaults.SERVICE_DATA_DIR}"', CONFIG_SOURCE.read_text(encoding="utf-8")
    )
    config_dir = Path(defaults.CONFIG_DIR)
    return [
        (Path(defaults.UNIT_DIR) / defaults.UNIT_NAME, unit, UNIT_MODE, True),
        (
            config_dir / defaults.ENVIRONMENT_FILE_NAME,
            ENVIRONMENT_SOURCE.read_text(encoding="utf-8"),
            ENVIRONMENT_MODE,
            False,
        ),
        (config_dir / defaults.CONFIG_FILE_NAME, config, CONFIG_MODE, False),
    ]


def _install(args: argparse.Namespace) -> int:
    try:
        files = planned_files(args.prefix.resolve())
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    for path, content, mode, replace in files:
        target = args.root / path.relative_to("/")
        if target.exists() and not replace:
            print(f"kept      {target} (exists)")
            continue
        verb = "would write" if args.dry_run else "wrote"
        if not args.dry_run:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(f".{target.name}.partial")
            partial.write_text(content, encoding="utf-8")
            partial.chmod(mode)
            partial.replace(target)
        print(f"{verb:9} {target} (mode {mode:03o})")
    if not args.dry_run and args.root == Path("/"):
        print("next: systemctl daemon-reload && systemctl enable --now dreamcycle")
        print(
            "the first start makes this peer's signing key; then `dreamcycle keys show` "
            "(with the service's config) prints it for the other peers to trust, and "
            "`dreamcycle keys trust` adds theirs (SECURITY.md)"
        )
    return 0
