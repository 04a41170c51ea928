"""The layout states the design: imports point one way and never loop, the dream cycle has
one module per phase in the order ARCHITECTURE.md gives, and no module grows past 400
lines."""

from __future__ import annotations

import ast
import io
import re
import tokenize
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


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Every module of ours and the modules of ours it imports, wherever the import stands
    (at the top, in a function, or for type checking only): `from package import name`
    imports the module `package.name` when there is one, else the package."""
    modules = {_module_name(path): path for package in PACKAGES for path in _modules(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [
                    f"{base}.{alias.name}"
                    if f"{base}.{alias.name}".removeprefix("dreamcycle.") in modules
                    else base
                    for alias in node.names
                ]
            else:
                continue
            for target in targets:
                target = target.removeprefix("dreamcycle.")
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    imported.add(target)
        graph[name] = imported
    return graph


def _loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected parts of `graph` with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            part = [stack.pop()]
            while part[-1] != module:
                part.append(stack.pop())
            if len(part) > 1:
                found.append(sorted(part))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_module_imports_itself_through_others() -> None:
    """No import loop anywhere in the tree, inside a package or across packages."""
    graph = _import_graph()
    assert "daemon.runtime" in graph and graph["daemon.recall.state"] >= {"daemon.runtime"}
    assert _loops(graph) == []


def _role(module: str) -> str:
    """The part of the tree a module belongs to: a sub-package of a package (`daemon.api`),
    or the module itself when it stands at a package's top (`daemon.runtime`)."""
    parts = module.split(".")
    if len(parts) >= 2 and (REPO / parts[0] / parts[1]).is_dir():
        return ".".join(parts[:2])
    return module


def test_no_role_imports_itself_through_others() -> None:
    """Sub-packages import one way too: `daemon/service/` may use `api/` and `cycle/`, which
    then never reach back into it (what both need lives in `observe/` and `scheduling/`)."""
    roles: dict[str, set[str]] = {}
    for module, imported in _import_graph().items():
        role = _role(module)
        roles.setdefault(role, set()).update(_role(m) for m in imported if _role(m) != role)
    assert roles["daemon.service"] >= {"daemon.api", "daemon.cycle"}
    assert _loops(roles) == []


def test_the_runtime_holds_no_recall_state() -> None:
    """Recall's caches and the cold tier's search live in daemon/recall, beside the runtime."""
    graph = _import_graph()
    assert not {m for m in graph["daemon.runtime"] if m.startswith("daemon.recall")}
    source = (REPO / "daemon" / "runtime.py").read_text()
    for name in ("recall_cache", "stored_vectors", "cold_search", "cold_vectors"):
        assert name not in source, name


#: Words that say which of the project's keys a name means: signing keys (and the signers
#: they stand for), the log's object keys, learned retrieval keys, request keys.
KEY_KINDS: Final = frozenset(
    {"signer", "signers", "signing", "segment", "object", "learned", "retrieval", "request"}
)


def test_the_databases_names_say_which_keys_they_mean() -> None:
    """`Database` gathers every table's queries in one namespace, where a bare "keys" could
    mean signing keys, the log's object keys or learned keys: each name says which."""
    from dreamcycle.store.database import Database

    vague = [
        name
        for name in dir(Database)
        if not name.startswith("_")
        and {"key", "keys"} & set(name.split("_"))
        and not KEY_KINDS & set(name.split("_"))
    ]
    assert vague == []


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
def test_no_module_is_longer_than_a_screenful_of_seams(package: str) -> None:
    """A module over LONG_MODULE_LINES lines holds more than one thing: split it at its seam."""
    long = [
        f"{path.relative_to(REPO)} ({path.read_text().count(chr(10))} lines)"
        for path in _modules(package)
        if path.read_text().count("\n") > LONG_MODULE_LINES
    ]
    assert long == []


#: The longest cell a Markdown table of ARCHITECTURE.md may hold: detail goes in the lists below.
MAX_TABLE_CELL: Final = 300
#: A heading naming a benchmark run by letter ("run T", "runs AN and AO", "runs L, M and N").
LETTERED_RUN: Final = re.compile(r"\b[Rr]uns?\s+[A-Z]{1,2}\b")


def _table_cells(markdown: str) -> list[str]:
    """Every cell of every Markdown table row, split on pipes that are not escaped."""
    cells: list[str] = []
    for line in markdown.splitlines():
        row = line.strip()
        if row.startswith("|"):
            cells += [cell.strip() for cell in re.split(r"(?<!\\)\|", row.strip("|"))]
    return cells


def _headings(markdown: str) -> list[str]:
    """The Markdown headings, outside fenced code blocks."""
    headings: list[str] = []
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            headings.append(line)
    return headings


def test_architecture_table_cells_are_short() -> None:
    cells = _table_cells((REPO / "ARCHITECTURE.md").read_text())
    assert cells, "ARCHITECTURE.md has no table"
    assert [cell[:80] for cell in cells if len(cell) > MAX_TABLE_CELL] == []


def test_benchmarks_give_current_figures_and_leave_lettered_runs_to_the_history() -> None:
    current = _headings((REPO / "docs" / "benchmarks.md").read_text())
    history = _headings((REPO / "docs" / "benchmarks-history.md").read_text())
    assert [heading for heading in current if LETTERED_RUN.search(heading)] == []
    assert any(LETTERED_RUN.search(heading) for heading in history)


#: The code whose comments and docstrings say why a value was chosen and which benchmark
#: script measures it, leaving figures and runs to the benchmarks' output and docs.
CODE_PACKAGES: Final = ("daemon", "store", "zeitgeist", "pulses", "scripts")
#: A pointer at the benchmark history, or a run of it named by letter.
BENCHMARK_RUN: Final = re.compile(rf"benchmarks-history|{LETTERED_RUN.pattern}")


def _prose(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every string that stands alone as a statement:
    the docstrings of modules, classes and functions, and those under attributes. Other
    strings (messages, help texts) are what the code does, not what it says about itself."""
    comments = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    docstrings = [
        (node.lineno, node.value.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    ]
    return comments + docstrings


def test_comments_and_docstrings_cite_no_benchmark_runs() -> None:
    cited = [
        f"{path.relative_to(REPO).as_posix()}:{line + text.count(chr(10), 0, match.start())}: "
        f"{match.group()}"
        for package in CODE_PACKAGES
        for path in _modules(package)
        for line, text in _prose(path.read_text())
        for match in BENCHMARK_RUN.finditer(text)
    ]
    assert cited == []


def test_the_commands_start_without_the_service_or_the_api() -> None:
    """Every command imports its own verbs; the service's Trio loop and the API's FastAPI
    stay unloaded until a verb needs them (each costs a command a fraction of a second)."""
    import subprocess
    import sys

    probe = (
        "import sys, dreamcycle.daemon.cli.pulse_emit, dreamcycle.daemon.config; "
        "print(sorted(m for m in ('trio', 'fastapi', 'hypercorn') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_daemon_serves_its_api_without_the_mcp_sdk_until_asked() -> None:
    """The API's app is built without importing the MCP SDK: the first MCP request sets
    `/mcp` up (daemon/api/mcp_lazy.py); tests/test_mcp.py speaks MCP to a daemon."""
    import subprocess
    import sys

    probe = (
        "import sys, trio, dreamcycle.daemon.service.loop; "
        "from dreamcycle.daemon.api.http import create_app; "
        "create_app(None, trio.CapacityLimiter(1)); "
        "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
