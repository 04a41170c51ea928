"""What every command shares: config options, exit codes, and error reporting.

Imported by every command before it parses its arguments, so it imports nothing
heavy: `--help`, and a command the running daemon serves, never pay for the
modules only the direct way needs (the model, the index, the API server).
"""

from __future__ import annotations

import argparse
import logging
import math
import operator
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config

EXIT_OK: Final = 0
#: Something unexpected; the message and traceback are logged.
EXIT_FAILURE: Final = 1
#: Bad arguments, config or input (argparse uses 2 as well).
EXIT_USAGE: Final = 2
#: The daemon cannot run here: data directory in use, peer id owned by another process, ...
EXIT_UNAVAILABLE: Final = 3

log = logging.getLogger("dreamcycle.cli")


def existing_data_epilog(without_one: str = "this command never creates one") -> str:
    """The exit codes of a command that needs an existing data directory and database."""
    return (
        "Exit codes: 0 ok, 1 unexpected failure, 2 bad arguments/config/input, including a "
        f"data directory or database that does not exist ({without_one}: `dreamcycle "
        "ingest` and `dreamcycle run` create them), 3 cannot run here (data directory in "
        "use, unusable database, or one locked by another process: try again)."
    )


Number = TypeVar("Number", int, float)


#: The options every command takes that set a setting: (option, setting, metavar). Each
#: takes its help and choices from the setting (daemon/config/settings.py).
SETTING_OPTIONS: Final = (
    ("--data-dir", "peer.data_dir", "DIR"),
    ("--peer-id", "peer.id", "ID"),
    ("--zeitgeist-dir", "zeitgeist.dir", "DIR"),
    ("--log-level", "log.level", None),
    ("--log-format", "log.format", None),
)


def config_options() -> argparse.ArgumentParser:
    """A parent parser with the options every command takes."""
    from dreamcycle.daemon.config.settings import BY_NAME, option_help

    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("configuration")
    group.add_argument(
        "--config",
        type=Path,
        metavar="FILE",
        help="TOML config file (default: $DREAMCYCLE_CONFIG, else built-in defaults)",
    )
    for option, name, metavar in SETTING_OPTIONS:
        group.add_argument(
            option, metavar=metavar, choices=BY_NAME[name].choices or None, help=option_help(name)
        )
    return parent


def setting_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings this command's options set ("section.key": value, None where not given)."""
    return {
        name: getattr(args, option[2:].replace("-", "_")) for option, name, _ in SETTING_OPTIONS
    }


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


def verb_names(parser: argparse.ArgumentParser) -> set[str]:
    """The verbs a program made by command_parser takes."""
    return {
        name
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name in action.choices
    }


def dispatch(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = parser.parse_args(argv)
    return int(args.handler(args))


def access_options() -> argparse.ArgumentParser:
    """A parent parser for the commands that reach memory either way (daemon/cli/access.py)."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group(
        "how memory is reached",
        "Through the running daemon's API (its Unix socket, api.unix_socket in the data "
        "directory) when a daemon serves it: no model or index to load here, so it takes "
        "milliseconds. Otherwise, or when the daemon does not answer, by opening the database "
        "in this process (seconds: the model and the index load). Output and exit codes are "
        "the same either way.",
    )
    group.add_argument(
        "--direct",
        action="store_true",
        help="open the database in this process even when a daemon serves the API",
    )
    return parent


def load(args: argparse.Namespace) -> Config:
    from dreamcycle.daemon.config import load_config
    from dreamcycle.daemon.service.logs import configure_logging

    config = load_config(args.config, overrides=setting_overrides(args))
    configure_logging(config.log.level, config.log.format)
    return config


class NoDataDirectory(ValueError):
    """A command that only reads was pointed at a data directory or database that is not there."""


def require_database(config: Config) -> None:
    """Refuse, before anything is opened (opening would create them), a data directory or a
    database that does not exist: a mistyped --data-dir must not look like an empty memory.

    An empty file is no database either (SQLite would take it for a new one and the
    migrations would fill it): dreamcycle writes a database's first page when it creates
    it, so a file of 0 bytes holds nothing stored, unless its WAL beside it does."""
    data_dir, database = config.data_dir, config.database_path
    create = "run `dreamcycle ingest` or `dreamcycle run` to create one"
    if not data_dir.is_dir():
        raise NoDataDirectory(f"no dreamcycle data directory at {data_dir}; {create}")
    if not database.is_file():
        raise NoDataDirectory(f"no dreamcycle database in {data_dir} ({database.name}); {create}")
    if _size(database) == 0 and not _size(database.with_name(f"{database.name}-wal")):
        raise NoDataDirectory(
            f"no dreamcycle database in {data_dir}: {database.name} is empty (0 bytes); {create}"
        )


def _size(path: Path) -> int | None:
    """The size of the file at `path`; None when there is none, or it cannot be looked at
    (opening it says why)."""
    try:
        return path.stat().st_size
    except OSError:
        return None


def load_existing(args: argparse.Namespace) -> Config:
    """The config of a command that only reads: its data directory must exist already."""
    config = load(args)
    require_database(config)
    return config


def bounded(
    parse: Callable[[str], Number],
    *,
    at_least: Number | None = None,
    at_most: Number | None = None,
    above: Number | None = None,
    below: Number | None = None,
) -> Callable[[str], Number]:
    """An argparse type: a finite number within the bounds given, refused at parsing (argparse
    names the option) rather than deep inside the command."""
    rules = [
        (at_least, ">=", operator.ge),
        (at_most, "<=", operator.le),
        (above, ">", operator.gt),
        (below, "<", operator.lt),
    ]
    wanted = ", ".join(f"{sign} {_shown(bound)}" for bound, sign, _ in rules if bound is not None)
    noun = "an integer" if parse is int else "a finite number"

    def convert(text: str) -> Number:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}")
        if not all(check(value, bound) for bound, _, check in rules if bound is not None):
            raise argparse.ArgumentTypeError(f"must be {wanted}, got {text}")
        return value

    convert.__name__ = parse.__name__
    return convert


def _shown(bound: float) -> str:
    return str(bound) if isinstance(bound, int) else f"{bound:g}"


def reason_text(text: str) -> str:
    """An argparse type for a reason: blank says nothing, so it is refused."""
    if not text.strip():
        raise argparse.ArgumentTypeError("is empty: say why")
    return text


#: Failures that mean the command cannot run here (exit 3) and bad input (exit 2), by the
#: module defining them. Only modules already imported are looked in: an exception of a
#: module never imported cannot have been raised, and importing them all here would cost
#: every command the API server's and the model's imports.
CANNOT_RUN_HERE: Final = (
    ("dreamcycle.daemon.runtime", "AlreadyRunning"),
    ("dreamcycle.daemon.runtime", "DataDirUnlockable"),
    ("dreamcycle.daemon.api.http", "ApiUnavailable"),
    ("dreamcycle.zeitgeist.backend", "BackendError"),
    ("dreamcycle.daemon.observe.metrics", "MetricsUnavailable"),
    ("dreamcycle.store.database", "DatabaseError"),
    ("dreamcycle.store.migrations", "MigrationError"),
    ("dreamcycle.store.embedder", "EmbedderUnavailable"),
    # The journal cannot be replayed into this database (`dreamcycle rebuild`).
    ("dreamcycle.daemon.memory.rebuild", "RebuildError"),
    # The index could not be written to the data directory (permissions, a full disk, a
    # directory in its place).
    ("dreamcycle.store.index_file", "IndexSaveFailed"),
    ("dreamcycle.daemon.api.client_errors", "Unavailable"),
    ("dreamcycle.daemon.signing_keys", "KeyUnavailable"),
    ("dreamcycle.daemon.signing_keys", "KeyExists"),
)
BAD_INPUT: Final = (
    ("dreamcycle.daemon.config", "ConfigError"),
    ("dreamcycle.store.database", "InvalidObservation"),
    ("builtins", "ValueError"),
    # What the daemon refused: the same requests the direct way refuses as bad input.
    ("dreamcycle.daemon.api.client_errors", "BadRequest"),
    ("dreamcycle.daemon.api.client_errors", "NotFound"),
    ("dreamcycle.daemon.api.client_errors", "Conflict"),
)


def _loaded(names: Sequence[tuple[str, str]]) -> tuple[type[BaseException], ...]:
    return tuple(
        getattr(sys.modules[module], name) for module, name in names if module in sys.modules
    )


def _storage_refusal(exc: Exception) -> str | None:
    """The database locked by another process, read-only, full or failing while a command
    wrote it: not a bug of the command, and nothing of its work was committed."""
    database = sys.modules.get("dreamcycle.store.database")
    if database is None:
        return None
    refusal: str | None = database.storage_refusal(exc)
    return refusal


def _said(exc: BaseException) -> str:
    """An exception's reason for the error line: a request's validation failure names each
    field with the rule it breaks (its own message would point elsewhere to read more)."""
    pydantic = sys.modules.get("pydantic")
    if pydantic is not None and isinstance(exc, pydantic.ValidationError):
        from dreamcycle.daemon.api.refusals import text_of

        return text_of(exc)
    return str(exc)


def run_guarded(action: Callable[[], int]) -> int:
    """Run a command, turning known failures into one clear line and an exit code."""
    try:
        return action()
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): not an error; keep Python from complaining.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        locked_or_unwritable = _storage_refusal(exc)
        if locked_or_unwritable is not None:
            print(f"error: {locked_or_unwritable}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if isinstance(exc, _loaded(CANNOT_RUN_HERE)):
            print(f"error: {_said(exc)}", file=sys.stderr)
            return EXIT_UNAVAILABLE
        if isinstance(exc, _loaded(BAD_INPUT)):
            print(f"error: {_said(exc)}", file=sys.stderr)
            return EXIT_USAGE
        log.exception("unexpected failure")
        print(f"error: {type(exc).__name__}: {_said(exc)}", file=sys.stderr)
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


def announce_first_key(config: Config) -> None:
    """Make a new peer's signing key (daemon.signing_keys.first_key) and say where it went."""
    from dreamcycle.daemon.signing_keys import first_key

    signer = first_key(config)
    if signer is not None:
        print(
            f"created this peer's signing key {signer.key_id} at {config.key_path} "
            "(`dreamcycle keys show` gives it to the other peers to trust)",
            file=sys.stderr,
        )
