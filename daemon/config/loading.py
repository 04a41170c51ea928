"""`load_config`: the defaults, then the TOML file, then DREAMCYCLE_<SECTION>_<KEY>
variables, then the command line's flags; each value coerced to its setting's type, and
every error prefixed with where the value came from. The keys and variables it knows are
the table's (settings.py).
"""

from __future__ import annotations

import logging
import math
import os
import re
import socket
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.checks import ConfigError
from dreamcycle.daemon.config.sections import Config
from dreamcycle.daemon.config.settings import (
    BY_NAME,
    RENAMED_TABLES,
    Setting,
    keys_in,
    named_by,
    renamed_variable,
    value_of,
)
from dreamcycle.pulses.pulse import preview

log = logging.getLogger(__name__)


def default_peer_id() -> str:
    """The host name, reduced to the characters a peer id may hold."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64]
    return name or "peer"


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the TOML file, then DREAMCYCLE_* variables, then `overrides` ("section.key")."""
    env = os.environ if environ is None else environ
    config = Config()
    sources: dict[str, str] = {}  # dotted key -> where its value came from
    if path is None and env.get(defaults.CONFIG_ENV):
        path = Path(env[defaults.CONFIG_ENV])
    if path is not None:
        data = _renamed_tables(_read_toml(path), source=str(path))
        _merge(config, data, source=str(path), table="", sources=sources)
    _apply_environment(config, env, sources)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            setting = BY_NAME.get(dotted)
            if setting is None:
                raise ConfigError(f"command line: unknown setting {dotted!r}")
            _assign(config, setting, value, source="command line", sources=sources)
    if not config.peer.id:
        config.peer.id = default_peer_id()
    if "api.enabled" not in sources and not config.api.listens():
        # On by default; off where neither a port nor a socket is left to serve on. Asked
        # for in so many words, it is refused below instead.
        config.api.enabled = False
    try:
        config.check()
    except ConfigError as exc:
        raise ConfigError(_with_source(str(exc), sources)) from None
    return config


def _read_toml(path: Path) -> dict[str, Any]:
    if "\0" in str(path):
        raise ConfigError(f"config file {str(path)!r} is not a usable path: it holds a NUL")
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    # tomllib raises a plain ValueError for an integer of more than 4300 digits.
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"config file {path} cannot be read: {exc}") from None


def _with_source(message: str, sources: Mapping[str, str]) -> str:
    """A range error prefixed with where its value was set, like every other config error."""
    key = message.split(" ", 1)[0]
    return f"{sources[key]}: {message}" if key in sources else message


def _renamed_tables(data: dict[str, Any], *, source: str) -> dict[str, Any]:
    """The file's tables with their earlier names replaced by today's, each with a warning;
    a file that holds a table under both names is refused, as neither can be chosen."""
    for old, new in RENAMED_TABLES.items():
        if old not in data:
            continue
        if new in data:
            raise ConfigError(f"{source}: [{old}] and [{new}] are the same table; keep [{new}]")
        log.warning("%s: [%s] is now [%s]; it is read as [%s] until renamed",
                    source, old, new, new)  # fmt: skip
        data = {new if key == old else key: value for key, value in data.items()}
    return data


def _merge(
    config: Config, data: Mapping[str, Any], *, source: str, table: str, sources: dict[str, str]
) -> None:
    """The keys of one TOML table (`table`, "" for the top level) into `config`."""
    known = keys_in(table)
    for key, value in data.items():
        dotted = f"{table}.{key}" if table else key
        if key not in known:
            raise ConfigError(f"{source}: unknown key {dotted!r} (known: {', '.join(known)})")
        setting = BY_NAME.get(dotted)
        if setting is not None:
            _assign(config, setting, value, source=source, sources=sources)
        elif isinstance(value, Mapping):
            _merge(config, value, source=source, table=dotted, sources=sources)
        else:
            raise ConfigError(f"{source}: {dotted!r} must be a table")


def _apply_environment(config: Config, env: Mapping[str, str], sources: dict[str, str]) -> None:
    for name, raw in env.items():
        if not name.startswith(defaults.ENV_PREFIX) or name == defaults.CONFIG_ENV:
            continue
        setting = named_by(name)
        renamed = renamed_variable(name) if setting is None else None
        if renamed is not None and (setting := named_by(renamed)) is not None:
            if renamed in env:
                raise ConfigError(f"environment variables {name} and {renamed} both set "
                                  f"{setting.name}; keep {renamed}")  # fmt: skip
            log.warning("environment variable %s is now %s; it is read as %s until renamed",
                        name, renamed, renamed)  # fmt: skip
        if setting is None:
            raise ConfigError(
                f"environment variable {name} does not name a setting "
                f"(expected {defaults.ENV_PREFIX}<SECTION>_<KEY>, e.g. DREAMCYCLE_CYCLE_INTERVAL_S)"
            )
        _assign(config, setting, raw, source=f"environment variable {name}", sources=sources)


def _assign(
    config: Config, setting: Setting, value: Any, *, source: str, sources: dict[str, str]
) -> None:
    section = value_of(config, setting.table)
    setattr(section, setting.key, _coerce(setting, value, source=source))
    sources[setting.name] = source


def _coerce(setting: Setting, value: Any, *, source: str) -> Any:
    expected = setting.value_type
    try:
        if expected is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if expected is int:
            if isinstance(value, bool | float):
                raise ValueError("expected an integer")
            return int(value)
        if expected is float:
            if isinstance(value, bool):
                raise ValueError("expected a number")
            number = float(value)  # OverflowError for an integer beyond 1e308
            if math.isnan(number):
                raise ValueError("NaN is not a valid value")
            return number
        if not isinstance(value, str):
            raise ValueError("expected a string")
        return value
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"{source}: {setting.name} = {preview(value)}: {exc}") from None
