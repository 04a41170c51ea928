"""Mistakes the commands refuse, with one line naming the problem and nothing stored changed.

The commands run in this process (`daemon.cli.main.main`, `daemon.cli.pulse_emit.main`)
against real data directories, the real model and the real database.

One file: every refusal is checked on a copy of one template data directory, ingested and
recalled once per module by the real commands, which is most of the run time.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.daemon.cli import main as dreamcycle_cli
from dreamcycle.daemon.cli import pulse_emit as pulse_emit_cli
from tests.daemon_helpers import Peer, Ran, documentation_chunks, run_in_process, write_jsonl

EXIT_USAGE = 2
TOPICS = ("assert", "for", "while")
CHUNK_COUNT = 12
QUERY = "how does an assert statement raise AssertionError"
#: Settings of every command here: no metrics port, no network for the model.
ENVIRONMENT = {"DREAMCYCLE_METRICS_LISTEN": "", "HF_HUB_OFFLINE": "1"}


def dreamcycle(peer: Peer, *args: str) -> Ran:
    return run_in_process(dreamcycle_cli.main, [*args, *peer.options()])


def pulse_emit(peer: Peer, *args: str) -> Ran:
    return run_in_process(pulse_emit_cli.main, [*args, *peer.options()])


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
    """Chunks ingested (stored and embedded) by `ingest`, and one recall of QUERY recorded;
    copy before changing."""
    root = tmp_path_factory.mktemp("refusals")
    peer = Peer(root / "template", "refusals", root / "template-zeitgeist")
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(TOPICS, CHUNK_COUNT))
    ok(dreamcycle(peer, "ingest", str(chunks)))
    ok(dreamcycle(peer, "recall", QUERY))
    return peer


@pytest.fixture
def peer(template: Peer, tmp_path: Path) -> Peer:
    return template.copy_to(tmp_path / "data", zeitgeist_dir=tmp_path / "zeitgeist")


def decision_of(peer: Peer) -> tuple[str, list[str]]:
    """The decision the template recorded, and the chunks it recalled."""
    ((decision, chunks),) = peer.query("SELECT decision_hash, chunk_hashes_json FROM attributions")
    return str(decision), list(json.loads(chunks))


def queued(peer: Peer, kind: str) -> list[dict[str, Any]]:
    rows = peer.query("SELECT body FROM outbox WHERE kind = ? ORDER BY hlc", (kind,))
    return [json.loads(body) for (body,) in rows]


def unchanged(peer: Peer, before: list[str]) -> None:
    assert peer.dump() == before, "a refused command changed the database"


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


# ---- 2: outcomes and tombstones name what this peer knows -----------------------------------


def test_an_outcome_for_a_decision_not_recorded_here_is_refused(peer: Peer) -> None:
    before = peer.dump()
    ran = pulse_emit(peer, "outcome", "--decision", "cd" * 32, "--reward", "1", "--reason", "r")
    refused(ran, "decision " + "cd" * 32, "not recorded here")
    unchanged(peer, before)


def test_a_tombstone_for_a_chunk_not_known_here_is_refused(peer: Peer) -> None:
    before = peer.dump()
    refused(pulse_emit(peer, "tombstone", "ef" * 32, "--reason", "wrong"), "neither stored")
    unchanged(peer, before)
    stored = peer.query("SELECT content_hash FROM observations LIMIT 1")[0][0]
    ok(pulse_emit(peer, "tombstone", stored, "--reason", "wrong"))
    assert [body["content_hash"] for body in queued(peer, "tombstone")] == [stored]


def test_what_is_known_elsewhere_is_queued_when_said_so(peer: Peer) -> None:
    elsewhere = ("--decision", "cd" * 32, "--reward", "1", "--reason", "r", "--decided-elsewhere")
    refused(pulse_emit(peer, "outcome", *elsewhere, "--cited", "ab" * 6), "give the full")
    ok(pulse_emit(peer, "outcome", *elsewhere, "--cited", "ab" * 32))
    ok(pulse_emit(peer, "tombstone", "ef" * 32, "--reason", "wrong", "--held-elsewhere"))
    refused(pulse_emit(peer, "tombstone", "ef" * 6, "--reason", "wrong", "--held-elsewhere"))
    assert [b["decision_hash"] for b in queued(peer, "outcome")] == ["cd" * 32]
    assert [b["content_hash"] for b in queued(peer, "tombstone")] == ["ef" * 32]


# ---- 7: a unique prefix names a chunk or a decision ------------------------------------------


def test_prefixes_resolve_to_the_one_chunk_or_decision(peer: Peer) -> None:
    decision, recalled = decision_of(peer)
    ok(pulse_emit(peer, "tombstone", recalled[0][:12], "--reason", "wrong"))
    assert [body["content_hash"] for body in queued(peer, "tombstone")] == [recalled[0]]
    ok(
        pulse_emit(
            peer, "outcome", "--decision", decision[:8], "--reward", "0.5", "--reason", "held",
            "--cited", recalled[-1][:12],
        )
    )  # fmt: skip
    (outcome,) = queued(peer, "outcome")
    assert (outcome["decision_hash"], outcome["cited"]) == (decision, [recalled[-1]])


def test_an_ambiguous_prefix_is_refused_listing_the_candidates(peer: Peer) -> None:
    shared = "deadbeef00"
    candidates = [shared + digit * 54 for digit in "123456"]
    # Tombstones of hashes no content here has: the one way to share a prefix this long.
    with closing(sqlite3.connect(peer.database_path)) as conn, conn:
        conn.executemany(
            "INSERT INTO tombstones (hash, reason, origin_peer, ts) VALUES (?, 'r', 'x', '')",
            [(digest,) for digest in candidates],
        )
    before = peer.dump()
    error = refused(pulse_emit(peer, "tombstone", shared, "--reason", "wrong"), "more than one")
    assert all(digest in error for digest in candidates[:4]) and "..." in error
    assert candidates[4] not in error
    refused(pulse_emit(peer, "tombstone", "deadbee", "--reason", "wrong"), "not a chunk hash")
    unchanged(peer, before)


# ---- 3: one outcome per decision ---------------------------------------------------------------


def test_a_second_outcome_for_a_decision_is_refused_naming_the_first(peer: Peer) -> None:
    decision, recalled = decision_of(peer)
    success = ("--decision", decision, "--reward", "0.8", "--reason", "held")
    first = ok(pulse_emit(peer, "outcome", *success, "--cited", recalled[0]))
    entry = first.out.split()[-1]
    assert ok(pulse_emit(peer, "outcome", *success, "--cited", recalled[0])).out.startswith(
        "already queued"
    )
    before = peer.dump()
    failure = ("--decision", decision, "--reward", "-1", "--reason", "broke")
    for contradiction in (failure, (*success, "--cited", recalled[-1]), success):
        error = refused(pulse_emit(peer, "outcome", *contradiction), "already has an outcome")
        assert f"entry {entry}: reward 0.8, reason 'held'" in error
        assert "no way to withdraw or replace it" in error
    unchanged(peer, before)


# ---- 5: a reason must say something ----------------------------------------------------------


def test_blank_reasons_are_refused(peer: Peer) -> None:
    decision, recalled = decision_of(peer)
    before = peer.dump()
    for command in (
        ("outcome", "--decision", decision, "--reward", "1", "--reason", " \t"),
        ("pulse", "--text", "assert statements", "--kind", "reward", "--reason", "  "),
        ("tombstone", recalled[0], "--reason", "\n"),
    ):
        refused(pulse_emit(peer, *command), "argument --reason", "is empty")
    unchanged(peer, before)


def test_text_arguments_that_are_not_utf8_are_refused_and_nothing_is_queued(peer: Peer) -> None:
    # Python hands a command line's undecodable bytes over as lone surrogates: such an
    # entry was queued, then refused by every peer, and a corrected retry found it queued.
    decision, recalled = decision_of(peer)
    not_utf8 = os.fsdecode(b"it worked \xff")
    before = peer.dump()
    for command, what in (
        (("outcome", "--decision", decision, "--reward", "1", "--reason", not_utf8), "reason"),
        (("pulse", "--text", not_utf8, "--kind", "reward", "--reason", "r"), "pulse's text"),
        (("tombstone", recalled[0], "--reason", not_utf8), "reason"),
    ):
        refused(pulse_emit(peer, *command), f"the {what} is not valid UTF-8 text")
    refused(dreamcycle(peer, "recall", not_utf8), "the recall query is not valid UTF-8")
    unchanged(peer, before)
    ok(pulse_emit(peer, "tombstone", recalled[0], "--reason", "it worked"))
    assert [body["content_hash"] for body in queued(peer, "tombstone")] == [recalled[0]]


def test_blank_reasons_are_refused_below_the_command_line(peer: Peer) -> None:
    from dreamcycle.daemon.config import load_config
    from dreamcycle.daemon.intake.emit_outcomes import emit_outcome
    from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
    from dreamcycle.daemon.intake.emit_revisions import emit_supersede
    from dreamcycle.daemon.runtime import Runtime
    from dreamcycle.pulses.pulse import PulseKind

    decision, recalled = decision_of(peer)
    before = peer.dump()
    rt = Runtime.open(load_config(None, overrides={"peer.data_dir": str(peer.data_dir)}))
    try:
        pulse = PulseRequest("assert", PulseKind.DECAY, 0.3, 0.3, 3, 2, 0.2, 60.0, reason="  ")
        for emit in (
            lambda: emit_outcome(rt, decision=decision, reward=1.0, reason="   "),
            lambda: emit_pulse(rt, pulse),
            lambda: emit_supersede(rt, old_hash=recalled[0], new_hash=recalled[1], reason=" "),
        ):
            with pytest.raises(ValueError, match="reason is empty"):
                emit()
    finally:
        rt.close()
    unchanged(peer, before)


# ---- 6: out-of-range numbers are refused at parsing, naming the option ----------------------

OUT_OF_RANGE = [
    (dreamcycle_cli.main, ("recall", QUERY, "--top-k", "-3"), "--top-k"),
    (dreamcycle_cli.main, ("recall", QUERY, "--top-k", "0"), "--top-k"),
    (dreamcycle_cli.main, ("recall", QUERY, "--min-confidence", "nan"), "--min-confidence"),
    (dreamcycle_cli.main, ("forgotten", "--limit", "0"), "--limit"),
    (dreamcycle_cli.main, ("forgotten", "--offset", "-1"), "--offset"),
    (dreamcycle_cli.main, ("run", "--interval", "0"), "--interval"),
    (dreamcycle_cli.main, ("run", "--interval", "nan"), "--interval"),
    (dreamcycle_cli.main, ("run", "--cycles", "0"), "--cycles"),
    (dreamcycle_cli.main, ("sweep", "--dry-run", "--percentile", "inf"), "--percentile"),
    (dreamcycle_cli.main, ("sweep", "--dry-run", "--min-population", "-1"), "--min-population"),
    (dreamcycle_cli.main, ("sweep", "--dry-run", "--show", "-2"), "--show"),
    (dreamcycle_cli.main, ("efficacy", "--window-s", "-inf"), "--window-s"),
    (dreamcycle_cli.main, ("efficacy", "--window-s", "0"), "--window-s"),
    (pulse_emit_cli.main, ("outcome", "--decision", "ab" * 32, "--reward", "inf", "--reason", "r"), "--reward"),
    (pulse_emit_cli.main, ("outcome", "--decision", "ab" * 32, "--reward", "1.01", "--reason", "r"), "--reward"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--strength", "nan"), "--strength"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--strength", "inf"), "--strength"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--sigma", "0"), "--sigma"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--k", "0"), "--k"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--max-hops", "-1"), "--max-hops"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--decay-per-hop", "1"), "--decay-per-hop"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--ttl", "0"), "--ttl"),
    (pulse_emit_cli.main, ("pulse", "--text", "t", "--kind", "reward", "--ttl", "1e300"), "--ttl"),
]  # fmt: skip


@pytest.mark.parametrize(("entry", "args", "option"), OUT_OF_RANGE)
def test_out_of_range_numbers_are_refused_naming_the_option(
    peer: Peer, entry: Callable[[Sequence[str]], int], args: tuple[str, ...], option: str
) -> None:
    before = peer.dump()
    ran = run_in_process(entry, [*args, *peer.options()])
    assert option in refused(ran, "argument ").split("argument ")[1].split(":")[0]
    unchanged(peer, before)


# ---- 4: files that are not text are skipped, each named, and the rest stored ------------------


def test_ingest_skips_files_that_are_not_text_and_stores_the_others(
    peer: Peer, tmp_path: Path
) -> None:
    good_text = tmp_path / "notes.txt"
    good_text.write_text("Retries back off exponentially, at most five times.\n", "utf-8")
    good_lines = write_jsonl(tmp_path / "more.jsonl", [{"content": "Deploys happen on Tuesdays."}])
    nul = tmp_path / "image.txt"
    nul.write_bytes(b"GIF89a\x00\x01plain enough otherwise")
    latin = tmp_path / "latin1.md"
    latin.write_bytes("caf\u00e9 au lait".encode("latin-1"))
    json_file = tmp_path / "memories.json"
    json_file.write_text('[{"content": "a JSON array, not JSON Lines"}]', "utf-8")
    stored = peer.scalar("SELECT count(*) FROM observations")

    ran = dreamcycle(
        peer, "ingest", str(nul), str(good_text), str(latin), str(json_file), str(good_lines)
    )
    assert ran.code == EXIT_USAGE, ran
    assert len(ran.errors) == 3, ran.err
    for path, problem in ((nul, "NUL byte"), (latin, "not UTF-8"), (json_file, ".jsonl")):
        assert any(str(path) in line and problem in line for line in ran.errors), (path, ran.err)
    assert "new 2" in ran.out and "skipped 3" in ran.out
    assert peer.scalar("SELECT count(*) FROM observations") == stored + 2


def test_ingest_of_nothing_but_binary_stores_nothing_and_creates_nothing(tmp_path: Path) -> None:
    fresh = Peer(tmp_path / "new", "refusals", tmp_path / "zeitgeist")
    binary = tmp_path / "blob.jsonl"
    binary.write_bytes(b'{"content": "x"}\n\x00\x00')
    refused(dreamcycle(fresh, "ingest", str(binary)), str(binary), "NUL byte")
    assert not fresh.data_dir.exists()


# ---- 8: content ingested again brings its metadata ----------------------------------------------

SAME = "Backups run nightly at two and are kept for thirty days."


def test_reingest_updates_metadata_and_queues_a_revision(
    peer: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = {"content": SAME, "title": "backups", "project": "ops", "topic_key": "ops/backup"}
    ok(dreamcycle(peer, "ingest", str(write_jsonl(tmp_path / "a.jsonl", [first]))))
    changed = {**first, "title": "nightly backups", "project": "infra", "importance": 8}
    again = write_jsonl(tmp_path / "b.jsonl", [changed])
    ran = ok(dreamcycle(peer, "ingest", str(again)))
    assert "1 revisions queued" in ran.out and "1 chunks updated here" in ran.out
    row = "SELECT title, project, importance FROM observations WHERE content = ?"
    # The project at once (it only filters here); the title and importance at the next cycle.
    assert peer.query(row, (SAME,)) == [("backups", "infra", 5)]
    (revision,) = queued(peer, "reconsolidate")
    assert revision["changes"] == {"title": "nightly backups", "importance": 8}
    # Again before the cycle: nothing new to queue or change.
    assert "metadata" not in ok(dreamcycle(peer, "ingest", str(again))).out

    monkeypatch.setenv("DREAMCYCLE_SIGNING_KEYRING_FILE", str(peer.keyring_path))
    peer.provision_key()
    ok(dreamcycle(peer, "run", "--once"))
    assert peer.query(row, (SAME,)) == [("nightly backups", "infra", 8)]


def test_reingest_refuses_a_kind_that_needs_new_content(peer: Peer, tmp_path: Path) -> None:
    ok(dreamcycle(peer, "ingest", str(write_jsonl(tmp_path / "a.jsonl", [{"content": SAME}]))))
    before = peer.dump()
    other = write_jsonl(
        tmp_path / "b.jsonl", [{"content": "new"}, {"content": SAME, "kind": "fact"}]
    )
    refused(dreamcycle(peer, "ingest", str(other)), "b.jsonl:2", "kind 'note', not 'fact'")
    unchanged(peer, before)
