"""The layout states the design: imports point one way, the dream cycle has one module per
phase in the order ARCHITECTURE.md gives, and no module grows past 400 lines unexplained."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.cycle import PHASES

REPO: Final = Path(__file__).resolve().parent.parent
PACKAGES: Final = ("daemon", "store", "pulses", "zeitgeist", "migrations")
#: What each package may import of ours (ARCHITECTURE.md: folders and what each owns).
MAY_IMPORT: Final = {
    "pulses": {"pulses"},
    "store": {"pulses", "store", "migrations"},
    "zeitgeist": {"pulses", "zeitgeist"},
    "migrations": {"migrations"},
    "daemon": set(PACKAGES),
}
LONG_MODULE_LINES: Final = 400


def _modules(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


def _our_imports(path: Path) -> set[str]:
    """The packages of ours a module imports (`dreamcycle.<package>`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "dreamcycle" and len(parts) > 1 and parts[1] in PACKAGES:
                found.add(parts[1])
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_imports_point_one_way(package: str) -> None:
    wrong = {
        str(path.relative_to(REPO)): sorted(_our_imports(path) - MAY_IMPORT[package])
        for path in _modules(package)
    }
    assert {path: names for path, names in wrong.items() if names} == {}


def test_every_phase_is_a_module_that_says_what_a_crash_leaves() -> None:
    for name, run in PHASES:
        path = REPO / "daemon" / "cycle" / f"{name}.py"
        assert path.is_file(), f"phase {name} has no module of its own"
        assert run.__module__ == f"dreamcycle.daemon.cycle.{name}"
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        for said in ("Reads:", "Writes", "crash"):
            assert said in doc, f"{path.name}'s docstring does not say {said!r}"


def test_architecture_walks_the_phases_in_their_order() -> None:
    headings = re.findall(r"^### \d+\. (\w+)$", (REPO / "ARCHITECTURE.md").read_text(), re.M)
    assert headings == [name for name, _ in PHASES]


@pytest.mark.parametrize("package", PACKAGES)
def test_long_modules_say_why_they_are_one(package: str) -> None:
    unexplained = []
    for path in _modules(package):
        source = path.read_text()
        if source.count("\n") <= LONG_MODULE_LINES:
            continue
        doc = ast.get_docstring(ast.parse(source)) or ""
        if "one module" not in doc.lower():
            unexplained.append(f"{path.relative_to(REPO)} ({source.count(chr(10))} lines)")
    assert unexplained == []
