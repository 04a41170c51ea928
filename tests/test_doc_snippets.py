"""The examples of README.md and docs/api.md, run as a reader would run them.

The README's quickstart for an agent runs on a fresh data directory, as written (but
`make setup`, which the test run did already). Every `curl` example of the README and of
docs/api.md runs against a real daemon serving a small store with a cold chunk, after
the placeholders a reader fills in (the socket, a chunk's hash, a decision hash) are
filled in; each must answer with JSON that is not a refusal and that holds every field
the example answer printed under it shows.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from tests.api_helpers import ApiDaemon, running_api
from tests.daemon_helpers import Peer, documentation_chunks, write_jsonl

REPO: Final = Path(__file__).resolve().parent.parent
BIN: Final = Path(sys.executable).parent
#: The chunk hash the examples use, and where its prefix stands in them.
EXAMPLE_REF: Final = "77c0a1b2c3d4"
TIMEOUT_S: Final = 120


def blocks(markdown: str, language: str) -> Iterator[tuple[str, str | None]]:
    """Each fenced block of `language` with the JSON block that follows it, if one does."""
    fences = list(re.finditer(r"```(\w*)\n(.*?)```", markdown, re.DOTALL))
    for index, fence in enumerate(fences):
        if fence[1] != language:
            continue
        after = fences[index + 1] if index + 1 < len(fences) else None
        between = markdown[fence.end() : after.start()] if after is not None else ""
        answer = (
            after[2] if after is not None and after[1] == "json" and not between.strip() else None
        )
        yield fence[2], answer


def commands(block: str) -> list[str]:
    """The shell commands of a block: continuation lines joined, comments dropped."""
    joined = block.replace("\\\n", " ")
    return [
        line.split("  #", 1)[0].strip()
        for line in joined.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def fresh_environment(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    env["DREAMCYCLE_PEER_DATA_DIR"] = str(tmp_path / "data")
    env["DREAMCYCLE_ZEITGEIST_DIR"] = str(tmp_path / "zeitgeist")
    return env


def test_the_readme_quickstart_for_an_agent_runs_as_written(tmp_path: Path) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### Memory for your agent", 1)[1]
    block, _ = next(blocks(section, "sh"))
    lines = commands(block)
    assert len(lines) <= 5  # install to an agent's memory, in at most five commands
    assert lines[0] == "make setup"
    env = fresh_environment(tmp_path)
    printed: list[str] = []
    for line in lines[1:]:
        words = shlex.split(line)
        assert words[0].startswith(".venv/bin/"), line
        words[0] = str(BIN / words[0].removeprefix(".venv/bin/"))
        done = subprocess.run(
            words, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=TIMEOUT_S
        )
        assert done.returncode == 0, f"{line}\n{done.stderr}"
        printed.append(done.stdout)
    entry = json.loads(printed[0])["mcpServers"]["dreamcycle"]
    assert entry["env"]["DREAMCYCLE_PEER_DATA_DIR"] == env["DREAMCYCLE_PEER_DATA_DIR"]
    saved = shlex.split(lines[2])[-1]
    assert saved in printed[-1]  # recalled what was saved


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("snippets")
    peer = Peer(root / "data", "snippets", root / "zeitgeist")
    chunks = documentation_chunks(["for", "while", "try", "with"], limit=16)
    peer.dreamcycle("ingest", str(write_jsonl(root / "chunks.jsonl", chunks)))
    peer.dreamcycle("run", "--once")
    peer.dreamcycle(
        "sweep", "--percentile", "50", "--min-population", "1",
        settings={"DREAMCYCLE_SWEEP_GRACE_S": "0"},
    )  # fmt: skip
    with running_api(peer) as api:
        yield api


def curl(served: ApiDaemon, command: str, fills: dict[str, str]) -> Any:
    for placeholder, value in fills.items():
        command = command.replace(placeholder, value)
    words = shlex.split(command.replace("$sock", str(served.socket_path)))
    assert words[0] == "curl", command
    done = subprocess.run(words, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    answer = json.loads(done.stdout)
    assert not (isinstance(answer, dict) and "status" in answer and "title" in answer), (
        f"{command}\nrefused: {answer}"
    )
    return answer


def shown_fields(example: str | None) -> set[str]:
    """The top-level fields an example answer shows ("..." stands for the rest)."""
    if example is None:
        return set()
    return set(json.loads(example)) - {"..."}


def test_every_curl_example_of_the_api_doc_is_answered_as_shown(served: ApiDaemon) -> None:
    cold = served.peer.query(
        "SELECT content_hash FROM observations WHERE cold_at IS NOT NULL LIMIT 1"
    )
    assert cold, "the sweep moved nothing to the cold tier"
    fills = {EXAMPLE_REF: str(cold[0][0])[:12]}
    ran = 0
    for block, example in blocks((REPO / "docs" / "api.md").read_text(), "sh"):
        for command in commands(block):
            answer = curl(served, command, fills)
            assert shown_fields(example) <= set(answer), command
            ran += 1
    assert ran >= 7


def test_the_readme_api_example_runs(served: ApiDaemon) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("### The local API", 1)[1]
    block, _ = next(blocks(section, "sh"))
    lines = commands(block)
    assert lines[0].startswith("sock=")
    saved = curl(served, lines[1], {})
    recalled = curl(served, lines[2], {})
    hit = next(h for h in recalled["hits"] if h["content_hash"] == saved["content_hash"])
    outcome = curl(
        served,
        lines[3],
        {"<from recall>": recalled["decision_hash"], "<hash prefix>": hit["content_hash"][:12]},
    )
    assert outcome["new"] is True
