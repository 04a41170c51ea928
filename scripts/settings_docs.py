"""Write what is generated from the settings table (daemon/config/settings.py): the list of
docs/settings.md, between its markers, and scripts/dreamcycle.example.toml, whole.

    .venv/bin/python -m scripts.settings_docs           # rewrite both
    .venv/bin/python -m scripts.settings_docs --check   # exit 1 if either is out of date

tests/test_settings_table.py fails while either differs from what the table makes.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.settings import BY_NAME, SETTINGS, Setting

REPO: Final = Path(__file__).resolve().parent.parent
DOC: Final = REPO / "docs" / "settings.md"
EXAMPLE: Final = REPO / "scripts" / "dreamcycle.example.toml"
BEGIN: Final = (
    "<!-- settings list: generated from daemon/config/settings.py by "
    "`python -m scripts.settings_docs`; edit the table there, not here -->"
)
END: Final = "<!-- end of the settings list -->"
#: The example file's comments start in this column, as far as the line before them allows.
COMMENT_COLUMN: Final = 34
EXAMPLE_WIDTH: Final = 100


def _by_table() -> list[tuple[str, list[Setting]]]:
    """The settings grouped by TOML table, in the table's order (a table's keys are together)."""
    return [(table, list(group)) for table, group in itertools.groupby(SETTINGS, lambda s: s.table)]


def _choices(setting: Setting, quote: Callable[[str], str]) -> str:
    if not setting.choices:
        return ""
    return "; one of " + ", ".join(quote(choice) for choice in setting.choices)


def markdown_list() -> str:
    """The settings list of docs/settings.md: a table per TOML table, markers included."""
    lines = [BEGIN]
    for table, settings in _by_table():
        lines += ["", f"### `[{table}]`", ""]
        lines += [
            "| Setting | Environment variable | Default | Meaning |",
            "| --- | --- | --- | --- |",
        ]
        for s in settings:
            # Escaped: a pipe would end the cell, and <data_dir> would read as an HTML tag.
            meaning = s.help + _choices(s, lambda c: f"`{c}`")
            meaning = meaning.replace("|", "\\|").replace("<", "&lt;")
            lines.append(f"| `{s.name}` | `{s.env}` | `{s.literal}` | {meaning} |")
    return "\n".join([*lines, "", END])


def example_toml() -> str:
    """scripts/dreamcycle.example.toml: every setting at its default, with its meaning."""
    interval, bucket = BY_NAME["cycle.interval_s"], BY_NAME["zeitgeist.s3.bucket"]
    header = (
        "dreamcycle configuration: every setting at its default (docs/settings.md says more), "
        "generated from daemon/config/settings.py by `python -m scripts.settings_docs`. Every "
        "key is optional. Any key can be overridden by an environment variable "
        f"{defaults.ENV_PREFIX}<SECTION>_<KEY>, e.g. {interval.env}=60 or {bucket.env}=my-bucket."
    )
    lines = [f"# {line}" for line in textwrap.wrap(header, EXAMPLE_WIDTH - 2)]
    for table, settings in _by_table():
        lines += ["", f"[{table}]"]
        for s in settings:
            value = f'"{s.example}"' if s.example else s.literal
            assignment = f"{'# ' if s.example else ''}{s.key} = {value}"
            lines += _commented(assignment, s.help + _choices(s, lambda c: f'"{c}"'))
    return "\n".join(lines) + "\n"


def _commented(assignment: str, comment: str) -> list[str]:
    """`assignment` with `comment` beside it, wrapped under itself within EXAMPLE_WIDTH."""
    column = max(COMMENT_COLUMN, len(assignment) + 2)
    wrapped = textwrap.wrap(comment, EXAMPLE_WIDTH - column - 2) or [""]
    first, *rest = wrapped
    return [f"{assignment:<{column}}# {first}"] + [f"{'':<{column}}# {line}" for line in rest]


def documented(doc: str) -> str:
    """`doc` with the list between its markers replaced by the table's."""
    before, begin, rest = doc.partition(BEGIN)
    _, end, after = rest.partition(END)
    if not begin or not end:
        raise ValueError(f"{DOC.name} has no settings list between {BEGIN!r} and {END!r}")
    return before + markdown_list() + after


#: Each generated file and what it should hold, given what it holds.
TARGETS: Final[Sequence[tuple[Path, Callable[[str], str]]]] = (
    (DOC, documented),
    (EXAMPLE, lambda _: example_toml()),
)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    args = parser.parse_args(argv)
    stale = []
    for path, generate in TARGETS:
        current = path.read_text(encoding="utf-8")
        wanted = generate(current)
        if wanted != current:
            stale.append(path.relative_to(REPO))
            if not args.check:
                path.write_text(wanted, encoding="utf-8")
    for path in stale:
        print(f"{path}: {'out of date' if args.check else 'rewritten'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
