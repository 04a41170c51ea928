"""What every command shares: config options, exit codes, and error reporting."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final, Protocol

from daemon.config import Config, ConfigError, load_config
from daemon.logs import configure_logging

EXIT_OK: Final = 0
#: Something unexpected; the message and traceback are logged.
EXIT_FAILURE: Final = 1
#: Bad arguments, config or input (argparse uses 2 as well).
EXIT_USAGE: Final = 2
#: The daemon cannot run here: data directory in use, peer id owned by another process, ...
EXIT_UNAVAILABLE: Final = 3

log = logging.getLogger("dreamcycle.cli")


def config_options() -> argparse.ArgumentParser:
    """A parent parser with the options every command takes."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("configuration")
    group.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML config file (default: $DREAMCYCLE_CONFIG, else built-in defaults)",
    )
    group.add_argument(
        "--data-dir", metavar="DIR", help="where the database and index live (peer.data_dir)"
    )
    group.add_argument("--peer-id", metavar="ID", help="this peer's id in the mesh (peer.id)")
    group.add_argument(
        "--zeitgeist-dir",
        metavar="DIR",
        help="shared directory for the local zeitgeist backend (zeitgeist.dir)",
    )
    group.add_argument("--log-level", choices=("debug", "info", "warning", "error"))
    group.add_argument("--log-format", choices=("json", "text"))
    return parent


class VerbModule(Protocol):
    def register(self, verbs: Any) -> None: ...


def command_parser(
    prog: str, description: str, epilog: str, metavar: str, modules: Sequence[VerbModule]
) -> argparse.ArgumentParser:
    """A program whose sub-commands are the modules given, one module per verb."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar=metavar)
    for module in modules:
        module.register(verbs)
    return parser


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    return int(args.handler(args))


def load(args: argparse.Namespace) -> Config:
    config = load_config(
        args.config,
        overrides={
            "peer.data_dir": args.data_dir,
            "peer.id": args.peer_id,
            "zeitgeist.dir": args.zeitgeist_dir,
            "log.level": args.log_level,
            "log.format": args.log_format,
        },
    )
    configure_logging(config.log.level, config.log.format)
    return config


def run_guarded(action: Callable[[], int]) -> int:
    """Run a command, turning known failures into one clear line and an exit code."""
    from daemon.api.http import ApiUnavailable
    from daemon.metrics import MetricsUnavailable
    from daemon.runtime import AlreadyRunning
    from store.database import DatabaseError, InvalidObservation
    from store.embedder import EmbedderUnavailable
    from store.migrations import MigrationError
    from zeitgeist.backend import BackendError

    usage: tuple[type[BaseException], ...] = (
        ConfigError,
        InvalidObservation,
        ValueError,
    )
    unavailable: tuple[type[BaseException], ...] = (
        AlreadyRunning,
        ApiUnavailable,
        BackendError,
        MetricsUnavailable,
        DatabaseError,
        MigrationError,
        EmbedderUnavailable,
    )
    try:
        return action()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error; keep Python from complaining.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except unavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except usage as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        log.exception("unexpected failure")
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


def print_table(rows: list[dict[str, Any]], columns: list[str]) -> None:
    widths = {
        c: max(len(c), *(len(_cell(r.get(c))) for r in rows)) if rows else len(c) for c in columns
    }
    print("  ".join(c.ljust(widths[c]) for c in columns))
    print("  ".join("-" * widths[c] for c in columns))
    for row in rows:
        print("  ".join(_cell(row.get(c)).ljust(widths[c]) for c in columns))


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return "" if value is None else str(value)
