"""The memory commands through a running daemon's API print what they print directly.

One store (chunks ingested, one cycle run, some swept to the cold tier) is served by a
real `dreamcycle run` daemon with its API on; every command is run twice against it,
through the daemon and with `--direct`, and the outputs compared. The time is a shared
clock file that never moves, so nothing the daemon's cycles do changes what the
commands read; only decision hashes (stamped with the hybrid logical clock, new on every
recall) are normalised. That the API way loaded no model is read from Python's own
import log (PYTHONPROFILEIMPORTTIME), not from timings.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.store.timefmt import iso_from_ms
from tests.api_helpers import running_api
from tests.daemon_helpers import Peer, documentation_chunks, write_jsonl

TOPICS: Final = ("assert", "for", "while", "try", "raise", "with")
CHUNK_COUNT: Final = 30
QUERY: Final = "how does an assert statement raise AssertionError"
#: The frozen time every process here reads (ms since the epoch).
FROZEN_MS: Final = 1_750_000_000_000
#: After its first cycle the daemon waits: no cycle changes the store between two runs.
IDLE_INTERVAL_S: Final = "3600"
EXIT_USAGE: Final = 2
#: Imported only to embed text: the API way must never import it.
MODEL_MODULE: Final = "onnxruntime"
TRIED_API: Final = "memory through the daemon's API"
FELL_BACK: Final = "the daemon does not answer; going on directly"
#: Every command gets these: its import log, and the debug line naming the way it took.
TRACED: Final = {"PYTHONPROFILEIMPORTTIME": "1"}
DECISION_HEX: Final = re.compile(r"(decision[\" :_a-z]*)[0-9a-f]{64}")


@dataclass(frozen=True)
class Run:
    stdout: str
    stderr: str
    returncode: int

    @property
    def imported(self) -> set[str]:
        """Modules the command imported, from its import log."""
        return {
            line.rsplit("|", 1)[1].strip()
            for line in self.stderr.splitlines()
            if line.startswith("import time:") and "|" in line
        }

    @property
    def via_api(self) -> bool:
        return TRIED_API in self.stderr and FELL_BACK not in self.stderr

    @property
    def normalised(self) -> str:
        return DECISION_HEX.sub(r"\1<decision>", self.stdout)


def run(peer: Peer, program: str, *args: str, direct: bool = False, expect: int = 0) -> Run:
    options = ["--log-level", "debug", *(["--direct"] if direct else [])]
    call = peer.dreamcycle if program == "dreamcycle" else peer.pulse_emit
    result: subprocess.CompletedProcess[str] = call(*args, *options, settings=TRACED, expect=expect)
    return Run(result.stdout, result.stderr, result.returncode)


def both_ways(peer: Peer, program: str, *args: str, expect: int = 0) -> tuple[Run, Run]:
    """The command through the daemon, then directly; checks which way each took."""
    served = run(peer, program, *args, expect=expect)
    direct = run(peer, program, *args, direct=True, expect=expect)
    assert served.via_api, served.stderr[-2000:]
    assert MODEL_MODULE not in served.imported, f"{program} {args[0]} loaded the model"
    assert not direct.via_api
    return served, direct


def chunk_rows(peer: Peer, where: str = "") -> list[tuple[Any, ...]]:
    return peer.query(
        "SELECT content_hash, title, content, type, kind, topic_key, importance, pin_floor, "
        f"salience, embedding IS NOT NULL FROM observations {where} ORDER BY content_hash"
    )


@dataclass(frozen=True)
class Served:
    peer: Peer
    #: The same store, copied before the daemon started: what direct commands change.
    twin: Peer


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    root = tmp_path_factory.mktemp("cli-via-api")
    clock = root / "clock"
    clock.write_text(str(FROZEN_MS), encoding="utf-8")
    settings = {
        "DREAMCYCLE_CLOCK_SOURCE": "file",
        "DREAMCYCLE_CLOCK_FILE": str(clock),
        "DREAMCYCLE_SWEEP_ENABLED": "false",
        "DREAMCYCLE_SWEEP_GRACE_S": "0",
    }
    peer = Peer(root / "data", "via_api", root / "zeitgeist", settings)
    rows = documentation_chunks(TOPICS, CHUNK_COUNT)
    # Importance sets the starting salience: a spread the sweep can rank.
    chunks = [{**row, "importance": number % 11} for number, row in enumerate(rows)]
    peer.dreamcycle("ingest", str(write_jsonl(root / "chunks.jsonl", chunks)))
    peer.dreamcycle("run", "--once")
    swept = peer.dreamcycle("sweep", "--percentile", "30", "--min-population", "10").stdout
    assert "moved to the cold tier 0;" not in swept, swept
    twin = peer.copy_to(root / "twin", zeitgeist_dir=root / "twin-zeitgeist")
    with running_api(peer, interval_s=IDLE_INTERVAL_S):
        yield Served(peer, twin)


# ---- reads ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("recall", QUERY, "--json"),
        ("recall", QUERY, "--top-k", "3"),
        ("recall", QUERY, "--no-record", "--decision", "which statement to use"),
        ("status", "--json"),
        ("status",),
        # Longer than the API lists at once (the API way reads it page by page).
        ("forgotten", "--json", "--limit", "600"),
        ("forgotten", "--limit", "2", "--offset", "1"),
    ],
    ids=lambda command: " ".join(command).replace(QUERY, "QUERY"),
)
def test_reads_print_the_same_either_way(served: Served, command: tuple[str, ...]) -> None:
    through_daemon, directly = both_ways(served.peer, "dreamcycle", *command)
    assert through_daemon.normalised == directly.normalised
    assert through_daemon.stdout.strip(), "nothing to compare"


def test_recall_finds_the_same_chunks_and_records_either_way(served: Served) -> None:
    through_daemon, directly = both_ways(served.peer, "dreamcycle", "recall", QUERY, "--json")
    assert MODEL_MODULE in directly.imported  # the direct way embeds the query itself
    reports = [json.loads(r.stdout) for r in (through_daemon, directly)]
    assert [hit["title"] for hit in reports[0]["hits"][:2]] == ["assert", "assert"]
    for report in reports:
        recorded = served.peer.scalar(
            "SELECT chunk_hashes_json FROM attributions WHERE decision_hash = ?",
            (report["decision_hash"],),
        )
        assert json.loads(recorded) == sorted(hit["content_hash"] for hit in report["hits"])
    assert reports[0]["decision_hash"] != reports[1]["decision_hash"]


# ---- writes -------------------------------------------------------------------------------


def test_emits_through_the_daemon_are_the_entries_direct_emits_queue(served: Served) -> None:
    peer = served.peer
    recalled = json.loads(run(peer, "dreamcycle", "recall", QUERY, "--json").stdout)
    decision, first = recalled["decision_hash"], recalled["hits"][0]["content_hash"]
    stranger = peer.scalar(
        "SELECT content_hash FROM observations WHERE content_hash NOT IN "
        f"({', '.join('?' * len(recalled['hits']))}) LIMIT 1",
        [hit["content_hash"] for hit in recalled["hits"]],
    )
    commands = [
        ("outcome", "--decision", decision, "--reward", "0.7", "--reason", "t", "--cited", first[:10]),
        ("pulse", "--text", "loops that never end", "--kind", "decay", "--strength", "0.3"),
        ("tombstone", stranger, "--reason", "wrong"),
    ]  # fmt: skip
    for command in commands:
        through_daemon, directly = both_ways(peer, "pulse-emit", *command)
        assert through_daemon.stdout.startswith(f"queued {command[0]} "), through_daemon.stdout
        # The same request key either way: the direct repeat finds the same entry queued.
        assert directly.stdout == "already " + through_daemon.stdout


def test_refusals_are_the_same_either_way(served: Served) -> None:
    peer = served.peer
    recalled = json.loads(run(peer, "dreamcycle", "recall", QUERY, "--json").stdout)
    cited = {hit["content_hash"] for hit in recalled["hits"]}
    stranger = peer.scalar(
        "SELECT content_hash FROM observations WHERE content_hash NOT IN "
        f"({', '.join('?' * len(cited))}) LIMIT 1",
        sorted(cited),
    )
    before = peer.scalar("SELECT count(*) FROM outbox")
    refused = [
        # Refused by the daemon (the same check the direct way makes) ...
        ("outcome", "--decision", recalled["decision_hash"], "--reward", "1", "--reason", "t",
         "--cited", stranger),
        # ... and by the API's models, handed to the direct way to refuse in its own words.
        ("pulse", "--text", "anything", "--kind", "forget"),
        ("outcome", "--decision", "not-a-hash", "--reward", "1", "--reason", "t"),
        # Not held here: the API answers 404, and the direct way refuses them too.
        ("outcome", "--decision", "cd" * 32, "--reward", "-0.2", "--reason", "elsewhere"),
        ("tombstone", "ef" * 32, "--reason", "retracted elsewhere"),
    ]  # fmt: skip
    for command in refused:
        through_daemon, directly = both_ways(peer, "pulse-emit", *command, expect=EXIT_USAGE)
        errors = [
            [line for line in r.stderr.splitlines() if line.startswith("error: ")]
            for r in (through_daemon, directly)
        ]
        assert errors[0] == errors[1] and len(errors[0]) == 1, errors
    assert peer.scalar("SELECT count(*) FROM outbox") == before


def test_revival_is_requested_and_refused_the_same_either_way(served: Served) -> None:
    peer = served.peer
    cold, live = (
        peer.scalar(f"SELECT content_hash FROM observations WHERE cold_at IS {state} LIMIT 1")
        for state in ("NOT NULL", "NULL")
    )
    through_daemon, directly = both_ways(peer, "dreamcycle", "forgotten", "--revive", cold)
    assert through_daemon.stdout == directly.stdout
    assert through_daemon.stdout.startswith(f"revival of {cold[:12]} requested")
    assert peer.scalar(
        "SELECT last_seen_at FROM observations WHERE content_hash = ?", (cold,)
    ) == iso_from_ms(FROZEN_MS)
    for refused in (live, "ab" * 32):
        both = both_ways(peer, "dreamcycle", "forgotten", "--revive", refused, expect=EXIT_USAGE)
        errors = [[ln for ln in r.stderr.splitlines() if ln.startswith("error: ")] for r in both]
        assert errors[0] == errors[1] and "not the hash of a chunk in the cold tier" in errors[0][0]


def test_ingest_through_the_daemon_stores_what_direct_ingest_stores(
    served: Served, tmp_path: Path
) -> None:
    peer, twin = served.peer, served.twin
    rows = documentation_chunks(("import", "class"), 8)
    again = {"content": peer.scalar("SELECT content FROM observations LIMIT 1")}
    notes = write_jsonl(tmp_path / "notes.jsonl", [*rows, again, rows[0]])

    through_daemon = run(peer, "dreamcycle", "ingest", str(notes))
    directly = run(twin, "dreamcycle", "ingest", str(notes), direct=True)
    assert through_daemon.via_api and not directly.via_api
    assert MODEL_MODULE not in through_daemon.imported
    assert through_daemon.stdout == directly.stdout
    counts = re.sub(r"\s+", " ", through_daemon.stdout).strip()
    assert counts == "files 1 read 10 new 8 duplicates 2 embedded 8"
    assert "saved" in through_daemon.stderr  # the progress bar
    new = "WHERE topic_key IN ('python/import', 'python/class')"
    assert chunk_rows(peer, new) == chunk_rows(twin, new)

    # Recall through the daemon finds them as soon as ingest returns.
    found = json.loads(run(peer, "dreamcycle", "recall", rows[3]["content"], "--json").stdout)
    assert found["hits"][0]["content"] == rows[3]["content"]


def test_ingest_refuses_a_bad_file_before_the_daemon_sees_it(
    served: Served, tmp_path: Path
) -> None:
    peer = served.peer
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"content": "fine"}\n{"content": "x", "importance": 11}\n', encoding="utf-8")
    before = peer.scalar("SELECT count(*) FROM observations")
    result = run(peer, "dreamcycle", "ingest", str(bad), expect=EXIT_USAGE)
    assert f"{bad}:2" in result.stderr and "importance" in result.stderr
    assert peer.scalar("SELECT count(*) FROM observations") == before


# ---- no daemon ----------------------------------------------------------------------------


def test_without_a_daemon_the_commands_open_the_database(served: Served) -> None:
    twin = served.twin
    # A daemon that died leaves its socket file: nobody answers there.
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(twin.data_dir / "api.sock"))
    leftover.close()
    for command in [("recall", QUERY, "--no-record"), ("status", "--json")]:
        fallen_back = run(twin, "dreamcycle", *command)
        directly = run(twin, "dreamcycle", *command, direct=True)
        assert TRIED_API in fallen_back.stderr and not fallen_back.via_api
        assert fallen_back.stdout == directly.stdout
        if command[0] == "recall":
            assert MODEL_MODULE in fallen_back.imported
    queued = run(twin, "pulse-emit", "pulse", "--text", "retry loops", "--kind", "reward")
    assert queued.stdout.startswith("queued pulse ") and not queued.via_api


# ---- the commands made from the operations table -----------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ("show", "REF"),
        ("show", "REF", "--json"),
        ("timeline", "--json", "--limit", "5"),
        ("timeline", "--kind", "note", "--offset", "2"),
    ],
    ids=" ".join,
)
def test_operation_commands_print_the_same_either_way(
    served: Served, command: tuple[str, ...]
) -> None:
    """Through the daemon on the store it serves, and served here on its twin (no daemon
    there: the command takes the data directory's lock and serves the operation itself).
    Only what the daemon's first cycle leaves alike in both is compared (not `explain`,
    whose journal the cycle adds to)."""
    ref = str(
        served.peer.query(
            "SELECT content_hash FROM observations WHERE cold_at IS NULL "
            "AND type != 'efficacy' ORDER BY content_hash LIMIT 1"
        )[0][0]
    )
    words = [ref if word == "REF" else word for word in command]
    through_daemon = run(served.peer, "dreamcycle", *words)
    directly = run(served.twin, "dreamcycle", *words)
    assert MODEL_MODULE not in through_daemon.imported
    assert MODEL_MODULE in directly.imported  # served here: the operations load the model
    assert through_daemon.normalised == directly.normalised
    assert through_daemon.stdout.strip(), "nothing to compare"


def test_an_operation_command_refuses_as_the_api_does(served: Served) -> None:
    for peer in (served.peer, served.twin):
        refused = run(peer, "dreamcycle", "reinforce", "0123456789abcdef", "  ", expect=EXIT_USAGE)
        assert "reason: must not be blank" in refused.stderr
        unknown = run(peer, "dreamcycle", "show", "0123456789abcdef", expect=EXIT_USAGE)
        assert "0123456789abcdef" in unknown.stderr
