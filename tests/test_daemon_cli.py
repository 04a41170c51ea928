"""The console scripts as a user runs them: real processes, the real model, real files.

One file: the tests run against copies of two module fixtures (chunks ingested, then one
cycle run) that cost real processes and the real model once.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from dreamcycle.daemon.cli import operation_verbs
from dreamcycle.daemon.cli import pulse_emit as pulse_emit_cli
from dreamcycle.daemon.cli.common import verb_names
from dreamcycle.daemon.cli.main import LIGHT_VERBS
from dreamcycle.daemon.cli.main import build_parser as dreamcycle_parser
from dreamcycle.daemon.cli.pulse_emit import build_parser as pulse_emit_parser
from dreamcycle.store.database import initial_salience
from tests.daemon_helpers import (
    CLI_TIMEOUT_S,
    DREAMCYCLE,
    HEX_DECISION,
    PULSE_EMIT,
    Peer,
    documentation_chunks,
    emitted_id,
    run_in_process,
    wait_until,
    write_jsonl,
)

EXIT_USAGE = 2
EXIT_UNAVAILABLE = 3
TOPICS = ("assert", "for", "while", "try", "raise", "with", "return", "import", "class")
CHUNK_COUNT = 110
QUERY = "how does an assert statement raise AssertionError"
#: Settings of every peer here: no automatic sweep, so chunks stay until a test sweeps.
SETTINGS = {"DREAMCYCLE_SWEEP_ENABLED": "false"}
A_DECISION = "ab" * 32
HELP_COLUMNS = "100"


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """Chunks stored and embedded by `ingest`, no cycle run yet (copy before changing)."""
    root = tmp_path_factory.mktemp("cli")
    peer = Peer(root / "template", "cli", root / "template-zeitgeist", dict(SETTINGS))
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(TOPICS, CHUNK_COUNT))
    peer.dreamcycle("ingest", str(chunks))
    return peer


@pytest.fixture(scope="module")
def admitted(ingested: Peer, tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """The ingested chunks after one dream cycle: indexed, announced, salience decayed a little."""
    root = tmp_path_factory.mktemp("cli-admitted")
    peer = ingested.copy_to(root / "template", zeitgeist_dir=root / "template-zeitgeist")
    peer.dreamcycle("run", "--once")
    return peer


@pytest.fixture
def peer(admitted: Peer, tmp_path: Path) -> Peer:
    """A private copy of the admitted peer, with its own (empty) zeitgeist."""
    return admitted.copy_to(tmp_path / "data", zeitgeist_dir=tmp_path / "zeitgeist")


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    verbs = sorted(subparsers(parser))
    assert verbs, f"{parser.prog} has no subcommands"
    return verbs


# ---- help -------------------------------------------------------------------------------


def help_commands() -> Iterator[tuple[list[str], bool]]:
    """Every program and every command under it, down to the leaves (`import engram`):
    (command line, whether it is a leaf)."""

    def below(
        words: list[str], parser: argparse.ArgumentParser
    ) -> Iterator[tuple[list[str], bool]]:
        children = subparsers(parser)
        yield [*words, "--help"], not children
        for verb, child in sorted(children.items()):
            yield from below([*words, verb], child)

    for program, parser in ((DREAMCYCLE, dreamcycle_parser()), (PULSE_EMIT, pulse_emit_parser())):
        yield from below([program], parser)


def test_every_command_and_subcommand_has_help() -> None:
    assert subcommands(dreamcycle_parser()) == sorted(
        [
            "run",
            "ingest",
            "import",
            "recall",
            "status",
            "sweep",
            "forgotten",
            "rebuild",
            "efficacy",
            "mcp",
            "doctor",
            "backup",
            "install-unit",
            "keys",
            # The memory operations without a module of their own (daemon/api/contract.py).
            *(op.command for op in operation_verbs.served()),
        ]
    )
    assert subcommands(pulse_emit_parser()) == ["outcome", "pulse", "tombstone"]
    parsers = {DREAMCYCLE: dreamcycle_parser(), PULSE_EMIT: pulse_emit_parser()}
    for command, leaf in help_commands():
        out = printed_help(parsers[command[0]], command[1:])
        assert out.startswith("usage: "), f"{command} printed no usage:\n{out}"
        if len(command) >= 3:
            assert command[-2] in out
        # Every verb takes the shared configuration options, but install-unit: it reads no
        # configuration, it installs one.
        if leaf and len(command) >= 3 and command[-2] != "install-unit":
            assert "--data-dir" in out


def printed_help(parser: argparse.ArgumentParser, words: list[str]) -> str:
    """What `words` (ending in --help) print, asked of the parser in this process."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        parser.parse_args(words)
    assert exited.value.code == 0, words
    return out.getvalue()


@pytest.mark.parametrize(
    ("program", "parser", "verb"),
    [(DREAMCYCLE, dreamcycle_parser, "keys"), (PULSE_EMIT, pulse_emit_parser, "pulse")],
)
def test_the_installed_programs_print_the_help_their_parsers_make(
    program: str,
    parser: Callable[[], argparse.ArgumentParser],
    verb: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The help of every command is read from the parsers in process (above); a user runs
    the installed programs, which print the same (at one width: argparse wraps to the
    terminal's)."""
    monkeypatch.setenv("COLUMNS", HELP_COLUMNS)
    for words in (["--help"], [verb, "--help"]):
        shown = subprocess.run(
            [program, *words],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            check=True,
            env={**os.environ, "COLUMNS": HELP_COLUMNS},
        )
        assert shown.stdout == printed_help(parser(), words)


def test_a_verb_of_its_own_module_parses_alike_without_the_other_verbs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", HELP_COLUMNS)
    light, full = dreamcycle_parser(LIGHT_VERBS), dreamcycle_parser()
    named = sorted(verb_names(light))
    assert len(named) == len(LIGHT_VERBS) and set(named) < verb_names(full)
    for verb in named:
        assert printed_help(light, [verb, "--help"]) == printed_help(full, [verb, "--help"])
    # ... and such a command line does not import the API contract, which the others need.
    code = (
        "import sys\nfrom dreamcycle.daemon.cli.main import main\n"
        "try:\n    main(['keys', '--help'])\nexcept SystemExit:\n    pass\n"
        "print('dreamcycle.daemon.api.contract' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=CLI_TIMEOUT_S
    )
    assert done.stdout.splitlines()[-1] == "False", done.stderr


def test_missing_subcommand_is_a_usage_error() -> None:
    result = subprocess.run([PULSE_EMIT], capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    assert result.returncode == EXIT_USAGE
    assert "required" in result.stderr


# ---- pulse-emit ---------------------------------------------------------------------------

PULSE = ("--text", "assert statements for debugging", "--kind", "decay")


INVALID_EMITS = [
    ("pulse", (*PULSE, "--k", "4", "--decay-per-hop", "0.25"), "decay_per_hop * k must be < 1"),
    ("pulse", (*PULSE, "--sigma", "0.5", "--max-hops", "14"), "max_hops 14 exceeds"),
    ("pulse", (*PULSE, "--strength", "-0.5"), "argument --strength: must be >= 0"),
    ("pulse", ("--text", "   ", "--kind", "reward"), "text is empty"),
    ("pulse", ("--text", "anything", "--kind", "forget"), "pulse-emit tombstone"),
    ("outcome", ("--decision", "xyz", "--reward", "0.5", "--reason", "r"), "decision_hash"),
    ("outcome", ("--decision", "AB" * 32, "--reward", "0.5", "--reason", "r"), "decision_hash"),
    ("outcome", ("--decision", A_DECISION, "--reward", "1.5", "--reason", "r"), "reward"),
    ("outcome", ("--decision", A_DECISION, "--reward", "-2", "--reason", "r"), "reward"),
    ("outcome", ("--decision", A_DECISION, "--reward", "nan", "--reason", "r"), "reward"),
    ("outcome", ("--decision", A_DECISION, "--reward", "0.5", "--reason", ""), "reason"),
    (
        "outcome",
        ("--decision", A_DECISION, "--reward", "0.5", "--reason", "r", "--cited", "xyz"),
        "'xyz' is not a chunk hash",
    ),
    (
        "outcome",
        ("--decision", A_DECISION, "--reward", "0.5", "--reason", "r", "--cited", "AB" * 32),
        "is not a chunk hash",
    ),
    (
        "outcome",
        ("--decision", A_DECISION, "--reward", "0.5", "--reason", "r", "--cited", "abcdef12"),
        "is not recorded here",  # an outcome needs the decision's attribution here
    ),
    ("outcome", ("--decision", A_DECISION, "--reward", "0.5", "--reason", "r"), "not recorded"),
    ("tombstone", ("a" * 64, "--reason", "wrong"), "neither stored nor tombstoned here"),
    ("tombstone", ("not-a-hash", "--reason", "wrong"), "is not a chunk hash"),
    ("tombstone", ("A" * 64, "--reason", "wrong"), "is not a chunk hash"),
    ("tombstone", ("a" * 64, "--reason", "  "), "reason"),
]


def test_pulse_emit_refuses_invalid_input_and_writes_nothing(
    peer: Peer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In this process, with the peer's settings: a refusal is over long before a process
    # would have started (the installed program runs in the tests of its help).
    for name, value in peer.environment().items():
        if name.startswith("DREAMCYCLE_"):
            monkeypatch.setenv(name, value)
    before = peer.dump()
    for verb, args, problem in INVALID_EMITS:
        result = run_in_process(pulse_emit_cli.main, [verb, *args, *peer.options()])
        case = f"pulse-emit {verb} {' '.join(args)}: exit {result.code}\n{result.err}"
        assert result.code == EXIT_USAGE, case
        assert problem in result.err, case
        # Out-of-range options are refused by argparse (after its usage line), the rest by us.
        last = result.err.splitlines()[-1]
        assert last.startswith(("error: ", f"pulse-emit {verb}: error: ")), case
        assert "Traceback" not in result.err, case
    assert peer.dump() == before


def test_pulse_emit_is_idempotent(peer: Peer) -> None:
    args = (*PULSE, "--strength", "0.4", "--reason", "python/assert")
    first = peer.pulse_emit("pulse", *args)
    second = peer.pulse_emit("pulse", *args)
    assert first.stdout.startswith("queued pulse ")
    assert second.stdout.startswith("already queued pulse ")
    assert emitted_id(first) == emitted_id(second)
    rows = peer.query("SELECT entry_id FROM outbox WHERE kind = 'salience_pulse'")
    assert rows == [(emitted_id(first),)]

    other = peer.pulse_emit("pulse", *args, "--nonce", "again")
    assert other.stdout.startswith("queued pulse ")
    assert emitted_id(other) != emitted_id(first)
    assert peer.scalar("SELECT count(*) FROM outbox WHERE kind = 'salience_pulse'") == 2

    decision = re.findall(HEX_DECISION, peer.dreamcycle("recall", QUERY).stdout)[0]
    outcome = ("--decision", decision, "--reward", "0.5", "--reason", "python/assert")
    assert peer.pulse_emit("outcome", *outcome).stdout.startswith("queued outcome ")
    assert peer.pulse_emit("outcome", *outcome).stdout.startswith("already queued outcome ")
    assert peer.scalar("SELECT count(*) FROM outbox WHERE kind = 'outcome'") == 1


def outbox_outcomes(peer: Peer) -> list[dict[str, object]]:
    return [json.loads(body) for (body,) in peer.query(
        "SELECT body FROM outbox WHERE kind = 'outcome' ORDER BY hlc"
    )]  # fmt: skip


def test_outcome_cites_only_chunks_its_decision_recalled(peer: Peer) -> None:
    report = json.loads(peer.dreamcycle("recall", QUERY, "--json").stdout)
    decision = report["decision_hash"]
    recalled = [hit["content_hash"] for hit in report["hits"]]
    outcome = ("--decision", decision, "--reward", "0.5", "--reason", "python/assert")
    stranger = peer.scalar(
        "SELECT content_hash FROM observations WHERE content_hash NOT IN "
        f"({', '.join('?' * len(recalled))}) LIMIT 1",
        recalled,
    )

    before = peer.dump()
    refused = peer.pulse_emit(
        "outcome", *outcome, "--cited", recalled[0], stranger, expect=EXIT_USAGE
    )
    assert refused.stderr.startswith("error: ")
    assert f"cited chunk {stranger} is not among the chunks decision {decision}" in refused.stderr
    ambiguous = peer.pulse_emit("outcome", *outcome, "--cited", "0123abcd", expect=EXIT_USAGE)
    assert "'0123abcd' matches none of the chunks" in ambiguous.stderr
    assert peer.dump() == before

    # The 12-digit prefixes the recall table prints resolve; order and repeats do not matter.
    prefixes = [recalled[1][:12], recalled[0][:12], recalled[1]]
    first = peer.pulse_emit("outcome", *outcome, "--cited", *prefixes)
    assert first.stdout.startswith("queued outcome ")
    again = peer.pulse_emit("outcome", *outcome, "--cited", recalled[0], recalled[1])
    assert again.stdout.startswith("already queued outcome ")
    assert emitted_id(again) == emitted_id(first)
    [body] = outbox_outcomes(peer)
    assert body["cited"] == sorted(recalled[:2])

    # Other citations, or none, are another outcome of the same decision: refused.
    for other in (("--cited", recalled[2]), ()):
        second = peer.pulse_emit("outcome", *outcome, *other, expect=EXIT_USAGE)
        assert f"already has an outcome (entry {emitted_id(first)}" in second.stderr
    assert [b.get("cited") for b in outbox_outcomes(peer)] == [sorted(recalled[:2])]


def test_emitted_pulse_is_applied_by_the_next_cycle(peer: Peer) -> None:
    queued = emitted_id(peer.pulse_emit("pulse", *PULSE, "--strength", "0.5"))
    assert peer.pulse_status(queued) is None
    peer.dreamcycle("run", "--once")
    assert peer.pulse_status(queued) == "applied"
    assert peer.scalar("SELECT count(*) FROM outbox WHERE segment_seq IS NULL") == 0


# ---- ingest -------------------------------------------------------------------------------

GOOD_LINE = json.dumps({"content": "A paragraph that would be stored if its file were valid."})


@pytest.mark.parametrize(
    ("bad_line", "problem"),
    [
        ("{not json", "invalid JSON"),
        ('["a", "list"]', "expected a JSON object"),
        ('{"content": "text", "colour": "red"}', "unknown field(s) colour"),
        ('{"title": "no content"}', "'content' must be a string"),
        ('{"content": "   "}', "content is empty"),
        ('{"content": "text", "kind": "rumour"}', "kind 'rumour' is not one of"),
        ('{"content": "text", "pin_floor": 2}', "pin_floor 2 is outside [0, 1]"),
        ('{"content": "text", "pin_floor": "high"}', "field 'pin_floor' must be"),
        ('{"content": "text", "title": null}', "field 'title' must be str"),
        ('{"content": "text", "importance": 11}', "importance 11 is outside"),
    ],
)
def test_ingest_refuses_a_bad_line_naming_file_and_line(
    peer: Peer, tmp_path: Path, bad_line: str, problem: str
) -> None:
    source = tmp_path / "memories.jsonl"
    # Line 3 is bad; the blank line 2 makes "line" and "item" numbers differ.
    source.write_text(f"{GOOD_LINE}\n\n{bad_line}\n{GOOD_LINE}\n", encoding="utf-8")
    before = peer.dump()
    result = peer.dreamcycle("ingest", str(source), expect=EXIT_USAGE)
    assert f"{source}:3: " in result.stderr
    assert problem in result.stderr
    assert "Traceback" not in result.stderr
    assert peer.dump() == before


def test_ingest_deduplicates_by_content(peer: Peer, tmp_path: Path) -> None:
    source = write_jsonl(tmp_path / "again.jsonl", documentation_chunks(TOPICS, 5))
    result = peer.dreamcycle("ingest", str(source))
    assert "new 0" in result.stdout
    assert "duplicates 5" in result.stdout
    assert peer.scalar("SELECT count(*) FROM observations WHERE type != 'efficacy'") == CHUNK_COUNT


# ---- recall -------------------------------------------------------------------------------


def test_recall_prints_a_decision_and_records_its_attribution(peer: Peer) -> None:
    result = peer.dreamcycle("recall", QUERY, "--json")
    report = json.loads(result.stdout)
    decision = report["decision_hash"]
    assert re.fullmatch("[0-9a-f]{64}", decision)
    hits = report["hits"]
    assert len(hits) == 5
    assert all(hit["title"] == "assert" for hit in hits[:2]), "the closest topic ranks first"
    chunks, recorded_peer = peer.query(
        "SELECT chunk_hashes_json, peer FROM attributions WHERE decision_hash = ?", (decision,)
    )[0]
    assert json.loads(chunks) == sorted(hit["content_hash"] for hit in hits)
    assert recorded_peer == peer.peer_id

    table = peer.dreamcycle("recall", QUERY, "--top-k", "3")
    match = re.search(HEX_DECISION, table.stdout)
    assert match is not None, table.stdout
    assert match.group(1) != decision  # a new decision, recorded at another time
    assert peer.scalar("SELECT count(*) FROM attributions") == 2

    quiet = peer.dreamcycle("recall", QUERY, "--no-record")
    assert "decision" not in quiet.stdout
    assert peer.scalar("SELECT count(*) FROM attributions") == 2


def test_recall_refuses_an_empty_query(peer: Peer) -> None:
    result = peer.dreamcycle("recall", "  ", expect=EXIT_USAGE)
    assert "empty" in result.stderr


def test_recall_refuses_more_results_than_a_decision_may_credit(peer: Peer) -> None:
    for top_k in ("0", "101"):
        result = peer.dreamcycle("recall", QUERY, "--top-k", top_k, "--direct", expect=EXIT_USAGE)
        assert "argument -k/--top-k: must be >= 1, <= 100" in result.stderr
    assert peer.scalar("SELECT count(*) FROM attributions") == 0


# ---- status -------------------------------------------------------------------------------


def test_status_of_a_fresh_data_dir_after_ingest(ingested: Peer, tmp_path: Path) -> None:
    fresh = ingested.copy_to(tmp_path / "fresh", zeitgeist_dir=tmp_path / "zeitgeist")
    report = json.loads(fresh.dreamcycle("status", "--json").stdout)
    assert report["peer"] == fresh.peer_id
    assert report["counts"]["observations"] == CHUNK_COUNT
    assert report["counts"]["live"] == CHUNK_COUNT
    assert report["counts"]["pending_admission"] == CHUNK_COUNT
    assert report["counts"]["tombstones"] == 0
    assert sum(b["chunks"] for b in report["salience_histogram"]) == CHUNK_COUNT
    # All start at the initial salience of the default importance (0.5), not at 1.0.
    start = initial_salience(5)
    [bucket] = [b for b in report["salience_histogram"] if b["chunks"]]
    assert bucket["chunks"] == CHUNK_COUNT
    assert bucket["from"] <= start < bucket["to"]
    assert report["last_cycle"] is None

    text = fresh.dreamcycle("status").stdout
    assert f"peer {fresh.peer_id}" in text
    assert re.search(rf"observations\s+{CHUNK_COUNT}", text)


def test_status_without_a_database_says_so(tmp_path: Path) -> None:
    empty = Peer(tmp_path / "nothing", "cli", tmp_path / "zeitgeist", dict(SETTINGS))
    result = empty.dreamcycle("status", expect=EXIT_USAGE)
    assert "no dreamcycle data directory" in result.stderr
    assert not empty.database_path.exists()


def test_status_after_a_cycle_reports_it(peer: Peer) -> None:
    report = json.loads(peer.dreamcycle("status", "--json").stdout)
    assert report["counts"]["pending_admission"] == 0
    assert report["last_cycle"]["status"] == "done"
    assert report["last_cycle"]["phases"]["classify"]["admitted"] == CHUNK_COUNT


def test_bad_config_file_is_a_usage_error(peer: Peer, tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[sweep]\npercentile = 150\n", encoding="utf-8")
    result = peer.dreamcycle("status", "--config", str(config), expect=EXIT_USAGE)
    assert "sweep.percentile" in result.stderr
    assert str(config) in result.stderr


# ---- sweep --------------------------------------------------------------------------------


def test_sweep_dry_run_changes_nothing(peer: Peer) -> None:
    # A decay pulse spreads salience so that a sweep has something to choose.
    peer.pulse_emit("pulse", *PULSE, "--strength", "0.9")
    peer.dreamcycle("run", "--once")
    before = peer.dump()
    options = ("--percentile", "30", "--min-population", "10")
    no_grace = {"DREAMCYCLE_SWEEP_GRACE_S": "0"}  # the chunks are minutes old
    result = peer.dreamcycle("sweep", "--dry-run", *options, settings=no_grace)
    found = re.search(r"doomed (\d+)", result.stdout)
    assert found is not None, result.stdout
    doomed = int(found.group(1))
    assert doomed > 0
    assert "dry run: nothing moved" in result.stdout
    assert peer.dump() == before

    # A sweep moves chunks to the cold tier: nothing is tombstoned.
    result = peer.dreamcycle("sweep", *options, settings=no_grace)
    assert f"moved to the cold tier {doomed};" in result.stdout
    assert peer.scalar("SELECT count(*) FROM tombstones") == 0
    assert peer.scalar("SELECT count(*) FROM observations WHERE cold_at IS NOT NULL") == doomed
    assert (
        peer.scalar(
            "SELECT count(*) FROM observations WHERE deleted_at IS NULL AND type != 'efficacy'"
        )
        == CHUNK_COUNT
    )
    assert peer.scalar("SELECT count(*) FROM journal WHERE kind = 'sweep'") == doomed

    listed = json.loads(peer.dreamcycle("forgotten", "--json", "--limit", "1000").stdout)
    assert listed["cold"] == doomed
    assert len(listed["chunks"]) == doomed
    assert all(row["reason"].startswith("percentile_sweep") for row in listed["chunks"])


def test_sweep_spares_chunks_within_the_grace_period(peer: Peer) -> None:
    result = peer.dreamcycle("sweep", "--percentile", "30", "--min-population", "10")
    assert "doomed 0" in result.stdout, result.stdout
    assert peer.scalar("SELECT count(*) FROM observations WHERE cold_at IS NOT NULL") == 0


def test_sweep_skips_a_cold_database(peer: Peer) -> None:
    before = peer.dump()
    result = peer.dreamcycle("sweep", "--min-population", str(CHUNK_COUNT + 1))
    assert "no sweep" in result.stdout
    assert peer.dump() == before


# ---- unusable database, busy data dir ------------------------------------------------------


def garbage_file(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(64 * 1024))


def corrupt_pages(path: Path) -> None:
    """Keep the header and schema page, scramble everything after them."""
    data = bytearray(path.read_bytes())
    noise = random.Random(11).randbytes(len(data) - 4096)
    data[4096:] = noise
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", [garbage_file, corrupt_pages])
def test_corrupt_database_is_refused_without_touching_it(
    peer: Peer, damage: object, tmp_path: Path
) -> None:
    for leftover in peer.data_dir.glob("dreamcycle.db-*"):
        leftover.unlink()  # a stopped daemon's WAL is checkpointed; start from the main file only
    assert callable(damage)
    damage(peer.database_path)
    before = peer.database_path.read_bytes()
    chunks = write_jsonl(tmp_path / "one.jsonl", [{"content": "a memory that has nowhere to go"}])
    commands = [
        (DREAMCYCLE, "run", "--once"),
        (DREAMCYCLE, "status"),
        (DREAMCYCLE, "recall", QUERY),
        (DREAMCYCLE, "ingest", str(chunks)),
        (DREAMCYCLE, "sweep", "--dry-run"),
        (DREAMCYCLE, "rebuild"),
        (PULSE_EMIT, "pulse", *PULSE),
    ]
    for program, verb, *args in commands:
        result = peer.run_cli(program, verb, *args, expect=EXIT_UNAVAILABLE)
        assert str(peer.database_path) in result.stderr, result.stderr
        assert re.search(
            r"is not an SQLite database|is corrupt|failed its integrity check", result.stderr
        )
        assert "Traceback" not in result.stderr
        assert peer.database_path.read_bytes() == before, f"{verb} modified the damaged file"


@pytest.mark.slow
def test_second_daemon_on_the_same_data_dir_is_refused(peer: Peer) -> None:
    with peer.start("--interval", "30") as first:
        first.wait_ready()
        for verb, *args in (("run", "--once"), ("sweep",), ("rebuild",)):
            result = peer.dreamcycle(verb, *args, expect=EXIT_UNAVAILABLE)
            assert "in use" in result.stderr
            assert str(peer.data_dir) in result.stderr
        # Readers and emitters share the database with a running daemon.
        peer.dreamcycle("status")
        peer.pulse_emit("pulse", *PULSE)
        assert first.terminate() == 0
    assert "daemon stopped" in first.log()


@pytest.mark.slow
def test_run_serves_the_api_on_its_socket_by_default(peer: Peer) -> None:
    """No setting asks for it: the daemon answers on the Unix socket in its data directory,
    and listens on no TCP port; the commands then reach memory through it."""
    socket_path = peer.data_dir / "api.sock"
    with peer.start("--interval", "30") as daemon:
        daemon.wait_ready()
        transport = httpx.HTTPTransport(uds=str(socket_path))
        with httpx.Client(transport=transport, base_url="http://localhost", timeout=30) as api:
            wait_until(
                lambda: api.get("/readyz").status_code == 200,
                what="the API to be ready",
                context=daemon.log_tail,
            )
            counts = api.get("/v1/status").json()["counts"]
        assert counts["live"] == CHUNK_COUNT
        # One address: the socket (no TCP port).
        [listening] = [line for line in daemon.log().splitlines() if "api listening" in line]
        assert listening.endswith(f"addresses=['http://unix:{socket_path}']"), listening
        traced = peer.dreamcycle("status", "--json", "--log-level", "debug")
        assert "memory through the daemon's API" in traced.stderr
        assert json.loads(traced.stdout)["counts"]["live"] == CHUNK_COUNT
        assert daemon.terminate() == 0
