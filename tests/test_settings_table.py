"""The settings table (daemon/config/settings.py) states each setting once: the sections'
fields are its rows, the loader takes exactly its environment variables, the options that
name a setting print its help, and docs/settings.md and the example file are what it
generates."""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Iterator
from typing import Any, get_type_hints

import pytest

from dreamcycle.daemon.cli.main import build_parser as dreamcycle_parser
from dreamcycle.daemon.cli.pulse_emit import build_parser as pulse_emit_parser
from dreamcycle.daemon.config import Config, ConfigError, load_config
from dreamcycle.daemon.config.settings import BY_NAME, SETTINGS, option_help
from scripts import settings_docs


def fields(section: Any, prefix: str = "") -> Iterator[tuple[str, type, Any]]:
    """(dotted name, annotated type, default) of every leaf field, in declaration order."""
    hints = get_type_hints(type(section))
    for spec in dataclasses.fields(section):
        value = getattr(section, spec.name)
        if dataclasses.is_dataclass(value):
            yield from fields(value, f"{prefix}{spec.name}.")
        else:
            yield f"{prefix}{spec.name}", hints[spec.name], value


def test_every_field_is_one_row_of_the_table_in_its_order() -> None:
    declared = [(name, kind) for name, kind, _ in fields(Config())]
    assert declared == [(s.name, s.value_type) for s in SETTINGS]
    assert len(BY_NAME) == len(SETTINGS)


def test_every_field_takes_its_default_from_its_row() -> None:
    wrong = {name: value for name, _, value in fields(Config()) if value != BY_NAME[name].default}
    assert wrong == {}


def test_each_setting_has_its_own_variable_and_a_description() -> None:
    variables = [s.env for s in SETTINGS]
    assert len(set(variables)) == len(variables)
    assert [s.name for s in SETTINGS if not s.help.strip() or "\n" in s.help] == []


@pytest.mark.parametrize("setting", SETTINGS, ids=lambda s: s.name)
def test_the_loader_takes_each_settings_variable(setting: Any) -> None:
    config = load_config(None, environ={setting.env: str(setting.default)})
    assert dataclasses.asdict(config) == dataclasses.asdict(load_config(None, environ={}))


def _tables() -> set[str]:
    return {".".join(s.name.split(".")[:depth]) for s in SETTINGS for depth in (1, 2)} - set(
        BY_NAME
    )


@pytest.mark.parametrize(
    "variable",
    [
        # A table, not a setting; a setting's variable with more after it; a setting's
        # name without its table.
        *sorted("DREAMCYCLE_" + table.replace(".", "_").upper() for table in _tables()),
        *(f"{s.env}_X" for s in SETTINGS[::10]),
        *(f"DREAMCYCLE_{s.key.upper()}" for s in SETTINGS[::10]),
    ],
)
def test_the_loader_refuses_every_other_variable(variable: str) -> None:
    assert variable not in {s.env for s in SETTINGS}
    with pytest.raises(ConfigError, match=f"{variable} does not name a setting"):
        load_config(None, environ={variable: "1"})


def _options() -> Iterator[tuple[str, str]]:
    """(command, help) of every option of every command of both programs."""

    def below(words: str, parser: argparse.ArgumentParser) -> Iterator[tuple[str, str]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for verb, child in action.choices.items():
                    yield from below(f"{words} {verb}", child)
            elif action.help and action.option_strings:
                yield f"{words} {action.option_strings[-1]}", action.help

    yield from below("dreamcycle", dreamcycle_parser())
    yield from below("pulse-emit", pulse_emit_parser())


def test_options_that_name_a_setting_print_its_description() -> None:
    """An option's help that ends naming a setting, "(cycle.interval_s)" or "(default:
    efficacy.window_s)", is that setting's help from the table, not a second one."""
    named = 0
    for option, text in _options():
        found = re.search(r"\((default: )?([a-z_]+(?:\.[a-z_0-9]+)+)\)$", text)
        if found is None:
            continue
        assert found[2] in BY_NAME, f"{option} names no setting: {text!r}"
        assert text == option_help(found[2], default_of=bool(found[1])), option
        named += 1
    assert named >= 10


@pytest.mark.parametrize(
    ("path", "generate"), settings_docs.TARGETS, ids=lambda x: getattr(x, "name", "")
)
def test_the_generated_docs_are_what_the_table_makes(path: Any, generate: Any) -> None:
    current = path.read_text(encoding="utf-8")
    assert generate(current) == current, (
        f"{path.name} is out of date: run `python -m scripts.settings_docs`"
    )


def test_the_docs_list_every_setting_and_its_variable() -> None:
    listed = settings_docs.DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| `([A-Z0-9_]+)` \|", listed, re.MULTILINE)
    assert rows == [(s.name, s.env) for s in SETTINGS]
