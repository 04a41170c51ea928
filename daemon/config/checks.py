"""The configuration's error and the rules more than one setting follows: a number above
0, a word among the setting's choices, a magnitude the code it reaches can hold, an S3
endpoint botocore accepts and a URL redis-py can connect with. Each message starts with
the key it is about, so that the loader can say where that key's value came from.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from typing import Final
from urllib.parse import SplitResult, urlsplit

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.settings import SETTINGS, value_of


class ConfigError(ValueError):
    """A bad configuration value; the message names the key, its source and the rule."""


#: A host name as botocore accepts one in an endpoint URL: dot-separated labels of letters,
#: digits and '-' (not at either end), at most 63 characters each.
_HOST_NAME: Final = re.compile(r"^((?!-)[A-Za-z0-9-]{1,63}(?<!-)\.)*(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_HOST_NAME_MAX_CHARS: Final = 255
_ENDPOINT_SCHEMES: Final = ("http", "https")
_REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
#: Tighter bounds than CONFIG_MAX_COUNT, for the counts that have one.
_COUNT_BOUNDS: Final[Mapping[str, tuple[int, str]]] = {
    "embedding.threads": (defaults.CONFIG_MAX_THREADS, " threads"),
    "api.workers": (defaults.CONFIG_MAX_THREADS, " threads"),
}


def positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")
    # Only floats: math.isfinite cannot take an integer beyond 1e308, and every int is finite.
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}")


def finite_non_negative(name: str, value: float) -> None:
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be finite and >= 0, got {value}")


def one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")


def check_choices(config: object, table: str) -> None:
    """Every setting of `table` (and of its sub-tables) that has choices holds one of them."""
    for setting in SETTINGS:
        if setting.choices and f"{setting.table}.".startswith(f"{table}."):
            one_of(setting.name, value_of(config, setting.name), setting.choices)


def check_magnitudes(config: object) -> None:
    """Every number finite, every duration, count and size within its CONFIG_MAX_*: what
    no section's rule bounds must still not overflow where it is used."""
    for setting in SETTINGS:
        key, value = setting.name, value_of(config, setting.name)
        if setting.value_type is float:
            if not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value}")
            if setting.key.endswith("_s") and value > defaults.CONFIG_MAX_SECONDS:
                raise ConfigError(
                    f"{key} must be at most {defaults.CONFIG_MAX_SECONDS:.0f} seconds "
                    f"({defaults.CONFIG_MAX_YEARS} years), got {value:g}"
                )
        elif setting.value_type is int:
            if key in _COUNT_BOUNDS:
                bound, unit = _COUNT_BOUNDS[key]
            elif setting.key.endswith("_bytes"):
                bound, unit = defaults.CONFIG_MAX_BYTES, " bytes"
            else:
                bound, unit = defaults.CONFIG_MAX_COUNT, ""
            if value > bound:
                raise ConfigError(f"{key} must be at most {bound}{unit}, got {value}")


def check_endpoint_url(key: str, url: str) -> None:
    """An http(s) URL with a host botocore accepts, and a port if any: botocore refuses
    anything else only when the daemon starts, with a traceback."""
    parts = _split_url(key, url)
    host = parts.hostname or ""
    if parts.scheme not in _ENDPOINT_SCHEMES or not host:
        raise ConfigError(
            f"{key} {url!r} must be an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:9000), or empty for AWS S3"
        )
    if not (_is_ip_address(host) or (len(host) <= _HOST_NAME_MAX_CHARS and _HOST_NAME.match(host))):
        raise ConfigError(
            f"{key} {url!r}: {host!r} is not a host name (letters, digits, '-' and '.') "
            "or an IP address"
        )


def check_redis_url(key: str, url: str) -> None:
    """A URL redis-py can connect with: redis://, rediss:// or unix://, a numeric port."""
    parts = _split_url(key, url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ConfigError(
            f"{key} {url!r} is not a redis:// URL (redis://HOST:PORT/DB, rediss://..., or "
            "unix:///path/to/socket)"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"{key} {url!r} names no socket: unix:///path/to/socket")
    if parts.query:
        # Only redis-py knows which query options it takes and their types; it is imported
        # for the rare URL that has some.
        from redis import connection

        parse: Callable[[str], object] = connection.parse_url
        try:
            parse(url)
        except ValueError as exc:
            raise ConfigError(f"{key} {url!r} is not usable: {exc}") from None


def _split_url(key: str, url: str) -> SplitResult:
    """The URL's parts, its port checked (urlsplit checks it only when it is read)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a number in 0..65535
    except ValueError as exc:
        raise ConfigError(f"{key} {url!r} is not a usable URL: {exc}") from None
    return parts


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
