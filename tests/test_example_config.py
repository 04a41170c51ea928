"""scripts/dreamcycle.example.toml is what users copy and read as the list of defaults: every
setting of the config is in it, nothing else is, and every value shown is the default,
exactly and of the same type."""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.config.settings import SETTINGS

EXAMPLE = Path(__file__).resolve().parent.parent / "scripts" / "dreamcycle.example.toml"

#: Settings shown commented out, because their default is not a value the file could hold
#: (the host name, a path under the data directory, nothing unless clock.source = "file").
COMMENTED_OUT = frozenset(setting.name for setting in SETTINGS if setting.example)

_SECTION = re.compile(r"^\[([a-z0-9_.]+)\]\s*(#.*)?$")
_COMMENTED_SETTING = re.compile(r"^#\s*([a-z0-9_]+)\s*=")


def shown_settings(table: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in table.items():
        if isinstance(value, dict):
            yield from shown_settings(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def commented_settings(text: str) -> set[str]:
    """Dotted keys written as `# key = ...` at the start of a line inside a section."""
    found: set[str] = set()
    section: str | None = None
    for line in text.splitlines():
        if header := _SECTION.match(line):
            section = header.group(1)
        elif section is not None and (setting := _COMMENTED_SETTING.match(line)):
            found.add(f"{section}.{setting.group(1)}")
    return found


@pytest.fixture(scope="module")
def text() -> str:
    return EXAMPLE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def shown(text: str) -> dict[str, Any]:
    return dict(shown_settings(tomllib.loads(text)))


@pytest.fixture(scope="module")
def expected() -> dict[str, Any]:
    # The sections' fields are the table's rows (tests/test_settings_table.py).
    return {setting.name: setting.default for setting in SETTINGS}


def test_every_setting_is_shown_or_commented_out(
    text: str, shown: dict[str, Any], expected: dict[str, Any]
) -> None:
    missing = set(expected) - set(shown) - COMMENTED_OUT
    assert not missing, f"settings missing from {EXAMPLE.name}: {sorted(missing)}"
    assert commented_settings(text) >= COMMENTED_OUT
    assert not COMMENTED_OUT & set(shown), "a setting listed as commented out is set"


def test_the_file_names_no_setting_the_config_does_not_know(
    text: str, shown: dict[str, Any], expected: dict[str, Any]
) -> None:
    unknown = (set(shown) | commented_settings(text)) - set(expected)
    assert not unknown, f"{EXAMPLE.name} names unknown settings: {sorted(unknown)}"


def test_every_value_shown_is_the_default_exactly(
    shown: dict[str, Any], expected: dict[str, Any]
) -> None:
    wrong = {
        key: (value, expected[key])
        for key, value in shown.items()
        # The type too: `30` where a float belongs would load, but says less than it should.
        if type(value) is not type(expected[key]) or value != expected[key]
    }
    assert not wrong, f"shown value != default (shown, default): {wrong}"


def test_settings_commented_out_have_no_default_value(expected: dict[str, Any]) -> None:
    assert {key: expected[key] for key in COMMENTED_OUT} == dict.fromkeys(COMMENTED_OUT, "")


def test_the_example_loads_into_the_default_config() -> None:
    loaded = load_config(EXAMPLE, environ={})
    assert loaded == load_config(None, environ={})
