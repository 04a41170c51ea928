"""Mistakes the commands refuse, with one line naming the problem and nothing stored changed.

The commands run in this process (`daemon.cli.main.main`, `daemon.cli.pulse_emit.main`)
against real data directories, the real model and the real database.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from io import StringIO
from pathlib import Path

import pytest

from daemon.cli import main as dreamcycle_cli
from daemon.cli import pulse_emit as pulse_emit_cli
from tests.daemon_helpers import Peer, documentation_chunks, write_jsonl

EXIT_USAGE = 2
TOPICS = ("assert", "for", "while")
CHUNK_COUNT = 12
QUERY = "how does an assert statement raise AssertionError"
#: Settings of every command here: no metrics port, no network for the model.
ENVIRONMENT = {"DREAMCYCLE_METRICS_LISTEN": "", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if "error:" in line]


def _run(entry: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Ran:
    """One command in this process, its output captured (argparse exits by SystemExit)."""
    out, err = StringIO(), StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        try:
            code = entry(list(argv))
        except SystemExit as exit_:
            code = int(exit_.code or 0)
    finally:
        sys.stdout, sys.stderr = saved
    return Ran(code, out.getvalue(), err.getvalue())


def dreamcycle(peer: Peer, *args: str) -> Ran:
    return _run(dreamcycle_cli.main, [*args, *peer.options()])


def pulse_emit(peer: Peer, *args: str) -> Ran:
    return _run(pulse_emit_cli.main, [*args, *peer.options()])


def refused(ran: Ran, *words: str, code: int = EXIT_USAGE) -> str:
    """The one error line of a refused command, checked to name each of `words`."""
    assert ran.code == code, ran
    assert len(ran.errors) == 1, ran
    assert "Traceback" not in ran.err, ran.err
    for word in words:
        assert word in ran.errors[0], (word, ran.errors[0])
    return ran.errors[0]


def ok(ran: Ran) -> Ran:
    assert ran.code == 0, ran
    return ran


@pytest.fixture(scope="module", autouse=True)
def environment() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        for name in [n for n in os.environ if n.startswith("DREAMCYCLE_")]:
            patch.delenv(name)
        for name, value in ENVIRONMENT.items():
            patch.setenv(name, value)
        yield


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """Chunks ingested (stored and embedded) by `ingest`; copy before changing."""
    root = tmp_path_factory.mktemp("refusals")
    peer = Peer(root / "template", "refusals", root / "template-zeitgeist")
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(TOPICS, CHUNK_COUNT))
    ok(dreamcycle(peer, "ingest", str(chunks)))
    return peer


@pytest.fixture
def peer(template: Peer, tmp_path: Path) -> Peer:
    return template.copy_to(tmp_path / "data", zeitgeist_dir=tmp_path / "zeitgeist")


# ---- 1: commands that only read never create a data directory ----------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("recall", QUERY),
        ("recall", QUERY, "--direct"),
        ("status",),
        ("forgotten",),
        ("forgotten", "--revive", "ab" * 32),
        ("efficacy",),
        ("sweep", "--dry-run"),
        ("rebuild",),
    ],
)
def test_reading_commands_refuse_a_data_directory_that_is_not_there(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    typo = Peer(tmp_path / "no" / "such-dir", "refusals", tmp_path / "zeitgeist")
    error = refused(
        dreamcycle(typo, *command), "no dreamcycle data directory at", str(typo.data_dir)
    )
    assert "dreamcycle ingest" in error
    assert not typo.data_dir.parent.exists()


def test_reading_commands_refuse_a_data_directory_without_a_database(tmp_path: Path) -> None:
    empty = Peer(tmp_path / "empty", "refusals", tmp_path / "zeitgeist")
    empty.data_dir.mkdir()
    refused(dreamcycle(empty, "recall", QUERY), "no dreamcycle database in", str(empty.data_dir))
    backup = tmp_path / "copy.db"
    refused(dreamcycle(empty, "backup", str(backup)), "no dreamcycle database in")
    assert list(empty.data_dir.iterdir()) == [] and not backup.exists()


def test_doctor_reports_a_missing_data_directory_and_creates_none(tmp_path: Path) -> None:
    typo = Peer(tmp_path / "no" / "such-dir", "refusals", tmp_path / "zeitgeist")
    ran = dreamcycle(typo, "doctor")
    assert ran.code == 1 and f"{typo.data_dir} does not exist" in ran.out
    assert not typo.data_dir.parent.exists()


def test_writing_commands_still_create_the_data_directory(tmp_path: Path) -> None:
    fresh = Peer(tmp_path / "new", "refusals", tmp_path / "zeitgeist")
    source = write_jsonl(tmp_path / "one.jsonl", [{"content": "a first memory, on its own"}])
    ok(dreamcycle(fresh, "ingest", "--no-embed", str(source)))
    assert fresh.scalar("SELECT count(*) FROM observations") == 1
