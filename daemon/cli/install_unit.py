"""`dreamcycle install-unit`: put the systemd unit, its environment file and the config in place."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cli.common import EXIT_UNAVAILABLE, EXIT_USAGE, run_guarded

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
#: Characters for which a word of a unit's command line must be quoted (systemd.syntax:
#: words are split at whitespace, and a ';' word separates commands).
UNIT_WORD_NEEDS_QUOTES: Final = re.compile(r"[\s;]")
#: Characters systemd refuses in an executable's path, quoted or not ("Executable name
#: contains special characters").
UNIT_PATH_REFUSED: Final = frozenset("\"'\\")


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
    command = unit_word(str(executable), option="--prefix")
    # A fresh install has no signing key and `run` refuses to start without one: the
    # service makes it, with its own user, config and state directory, before each start
    # (kept when it exists). A function as replacement: re.sub would read backslashes in
    # the path as escapes.
    lines = f"ExecStartPre={command} keys init --if-missing\nExecStart={command} run"
    unit = EXEC_START.sub(
        lambda _: lines, EXEC_START_PRE.sub("", UNIT_SOURCE.read_text(encoding="utf-8"))
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


def unit_word(path: str, *, option: str) -> str:
    """`path`, an executable, as the first word of a unit's command line that systemd reads
    back as `path` (systemd.syntax, systemd.service "Command lines"): '%' doubled (it starts
    a specifier), the word double-quoted when it holds whitespace or ';'. ValueError, naming
    `option`, for a path systemd refuses as an executable: one holding quotes, backslashes
    or control characters, or not UTF-8."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"{option}: {path!r} is not UTF-8, which a unit file must be; install into a "
            "path that is"
        ) from None
    refused = sorted({c for c in path if c in UNIT_PATH_REFUSED or not c.isprintable()})
    if refused:
        raise ValueError(
            f"{option}: systemd refuses an executable path holding {''.join(refused)!r} "
            f"({path}); install into a path without quotes, backslashes or control characters"
        )
    word = path.replace("%", "%%")
    return f'"{word}"' if UNIT_WORD_NEEDS_QUOTES.search(word) else word


def _install(args: argparse.Namespace) -> int:
    try:
        files = planned_files(args.prefix.resolve())
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    for path, content, mode, replace in files:
        target = args.root / path.relative_to("/")
        if target.exists() and not target.is_dir() and not replace:
            print(f"kept      {target} (exists)")
            continue
        verb = "would write" if args.dry_run else "wrote"
        if not args.dry_run:
            problem = _write(target, content, mode)
            if problem is not None:
                print(f"error: cannot write {target}: {problem}", file=sys.stderr)
                return EXIT_USAGE
        print(f"{verb:9} {target} (mode {mode:03o})")
    if not args.dry_run and args.root == Path("/"):
        print("next: systemctl daemon-reload && systemctl enable --now dreamcycle")
        print(
            "the first start makes this peer's signing key; then `dreamcycle keys show` "
            "(with the service's config) prints it for the other peers to trust, and "
            "`dreamcycle keys trust` adds theirs (SECURITY.md)"
        )
    return 0


def _write(target: Path, content: str, mode: int) -> str | None:
    """Write `target` whole or not at all; what went wrong, or None. A partial file is
    never left behind."""
    partial = target.with_name(f".{target.name}.partial")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_dir():
            return "it is a directory; move it away, or choose another --root"
        partial.write_text(content, encoding="utf-8")
        partial.chmod(mode)
        partial.replace(target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)
        return f"{exc.strerror or exc}; {_remedy(exc)}"
    return None


def _remedy(exc: OSError) -> str:
    if isinstance(exc, PermissionError):
        return "run as root, or choose another --root"
    if isinstance(exc, NotADirectoryError | FileExistsError):
        return "a file stands where a directory must be: --root must be a directory"
    return "check --root and the file system"
