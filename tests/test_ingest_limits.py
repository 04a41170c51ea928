"""What no peer could publish is refused when it is read, never stored to fail every cycle
after; and a bounded `run` says so when a cycle failed.

Refusals a user meets run the real `dreamcycle` in a subprocess (`--no-embed`: no model to
load); the rules behind them are checked in this process.
"""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.intake.ingest import IngestError, read_file
from dreamcycle.daemon.memory.limits import (
    FIELD_MAX_CHARS,
    FieldOverLimit,
    check_fields,
    check_observation_limits,
)
from dreamcycle.store.database import InvalidObservation, NewObservation
from dreamcycle.zeitgeist.entries import CONTENT_MAX_CHARS, LABEL_MAX_CHARS, TITLE_MAX_CHARS
from tests.daemon_helpers import Peer, write_jsonl

EXIT_FAILURE: Final = 1
EXIT_USAGE: Final = 2
GOOD: Final = {"content": "Retries back off exponentially, at most five times."}


@pytest.fixture
def peer(tmp_path: Path) -> Peer:
    return Peer(tmp_path / "data", "limits", tmp_path / "zeitgeist")


def refused(peer: Peer, path: Path, *expected: str) -> str:
    """Ingest `path`: exit 2, one error line holding every `expected`, nothing stored."""
    result = peer.dreamcycle("ingest", "--no-embed", str(path), expect=EXIT_USAGE)
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for text in expected:
        assert text in errors[0], (text, errors[0])
    assert not peer.database_path.exists() or peer.scalar("SELECT count(*) FROM observations") == 0
    return errors[0]


# ---- too long: refused with file, line, field and limit -----------------------------------


def test_an_over_long_paragraph_is_refused_naming_it_and_nothing_is_stored(
    peer: Peer, tmp_path: Path
) -> None:
    big = tmp_path / "big.txt"
    words = "word " * (CONTENT_MAX_CHARS // 5 + 10)
    big.write_text(f"A short first paragraph.\n\n\n{words}\n", encoding="utf-8")
    refused(
        peer,
        big,
        f"{big}: paragraph 2 (line 4)",
        "field 'content'",
        f"{len(words.strip())} characters",
        f"limit of {CONTENT_MAX_CHARS}",
    )
    assert not peer.data_dir.exists()


@pytest.mark.parametrize(
    ("field", "limit"),
    [("type", LABEL_MAX_CHARS), ("project", LABEL_MAX_CHARS), ("title", TITLE_MAX_CHARS)],
)
def test_an_over_long_jsonl_field_is_refused_naming_file_line_field_and_limit(
    peer: Peer, tmp_path: Path, field: str, limit: int
) -> None:
    source = write_jsonl(tmp_path / "notes.jsonl", [GOOD, {**GOOD, field: "x" * (limit + 1)}])
    refused(peer, source, f"{source}:2: ", f"field {field!r}", f"limit of {limit}")


def test_a_lone_surrogate_is_refused_naming_file_line_and_field(peer: Peer, tmp_path: Path) -> None:
    source = tmp_path / "notes.jsonl"
    source.write_text(json.dumps(GOOD) + '\n{"content": "half \\ud800 a pair"}\n', "utf-8")
    refused(peer, source, f"{source}:2: ", "field 'content'", "surrogate")


# ---- file types, whatever the case of their suffix -----------------------------------------


def test_suffixes_are_compared_in_any_case(peer: Peer, tmp_path: Path) -> None:
    upper = write_jsonl(tmp_path / "NOTES.JSONL", [GOOD, {"content": "Deploys on Tuesdays."}])
    stored = peer.dreamcycle("ingest", "--no-embed", str(upper))
    assert "new 2" in stored.stdout, stored.stdout
    contents = {row[0] for row in peer.query("SELECT content FROM observations")}
    assert contents == {GOOD["content"], "Deploys on Tuesdays."}

    whole = tmp_path / "MEMORIES.JSON"
    whole.write_text(json.dumps([GOOD]), encoding="utf-8")
    result = peer.dreamcycle("ingest", "--no-embed", str(whole), expect=EXIT_USAGE)
    assert f"error: {whole}: a .JSON file" in result.stderr and ".jsonl" in result.stderr
    assert peer.scalar("SELECT count(*) FROM observations") == 2


# ---- the rules, in this process ------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ({"content": "x", "topic_key": "k" * (LABEL_MAX_CHARS + 1)}, "field 'topic_key'"),
        ({"content": "x", "session_id": "s" * (LABEL_MAX_CHARS + 1)}, "field 'session_id'"),
        ({"content": "x", "type": ""}, "field 'type' must not be empty"),
    ],
)
def test_read_file_refuses_what_no_peer_could_publish(
    tmp_path: Path, line: dict[str, str], problem: str
) -> None:
    source = write_jsonl(tmp_path / "notes.jsonl", [GOOD, line])
    with pytest.raises(IngestError) as caught:
        read_file(source)
    assert str(caught.value).startswith(f"{source}:2: ")
    assert problem in str(caught.value)


def test_fields_at_their_limits_are_read(tmp_path: Path) -> None:
    line = {
        "content": "c" * CONTENT_MAX_CHARS,
        "title": "t" * TITLE_MAX_CHARS,
        **{name: "l" * LABEL_MAX_CHARS for name in ("type", "project", "topic_key", "scope")},
    }
    (item,) = read_file(write_jsonl(tmp_path / "full.jsonl", [line]))
    assert len(item.content) == CONTENT_MAX_CHARS and len(item.title) == TITLE_MAX_CHARS


def test_only_newlines_end_jsonl_lines(tmp_path: Path) -> None:
    source = tmp_path / "separators.jsonl"
    rows = [{"content": "one\u2028two\x1cthree"}, GOOD]
    source.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    items = read_file(source)
    assert [item.content for item in items] == ["one\u2028two\x1cthree", GOOD["content"]]
    assert items[1].source_ref == "file:separators.jsonl:2"


def test_a_file_name_that_is_not_utf8_is_stored_readably(tmp_path: Path) -> None:
    source = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9.txt"))
    source.write_text("A paragraph.\n", encoding="utf-8")
    (item,) = read_file(source)
    assert item.source_ref == "file:caf\ufffd.txt"
    check_observation_limits(item)


def test_check_observation_limits_names_the_field_and_its_limit() -> None:
    for name, limit in FIELD_MAX_CHARS.items():
        at_limit = NewObservation(**{"content": "x", name: "v" * limit})  # type: ignore[arg-type]
        check_observation_limits(at_limit)
        over = NewObservation(**{"content": "x", name: "v" * (limit + 1)})  # type: ignore[arg-type]
        with pytest.raises(FieldOverLimit, match=rf"field '{name}': {limit + 1} characters"):
            check_observation_limits(over)
    assert issubclass(FieldOverLimit, InvalidObservation)
    with pytest.raises(InvalidObservation, match=r"field 'title' is not valid Unicode"):
        check_fields({"title": "a\udc80b", "importance": 5})
    check_fields({"title": None, "reason": "any length is someone else's rule" * 100})


# ---- a bounded run whose cycle failed ------------------------------------------------------


def test_a_bounded_run_exits_1_when_its_cycle_failed_and_keeps_what_is_stored(
    peer: Peer, tmp_path: Path
) -> None:
    peer.dreamcycle("ingest", "--no-embed", str(write_jsonl(tmp_path / "ok.jsonl", [GOOD])))
    # A row no peer can publish, as a writer that checked nothing could have stored it.
    with closing(sqlite3.connect(peer.database_path)) as conn, conn:
        conn.execute("UPDATE observations SET type = ''")
    result = peer.dreamcycle("run", "--once", expect=EXIT_FAILURE)
    assert "cycle failed" in result.stderr
    assert peer.scalar("SELECT content FROM observations") == GOOD["content"]
    assert peer.scalar("SELECT status FROM cycles ORDER BY id DESC LIMIT 1") == "failed"
