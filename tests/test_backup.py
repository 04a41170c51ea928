"""`dreamcycle backup`: a consistent copy taken while a real daemon runs cycles."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from tests.daemon_helpers import Peer, documentation_chunks, wait_until, write_jsonl


def test_a_backup_under_a_running_daemon_is_consistent_and_complete(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "saved", tmp_path / "zeitgeist")
    first = documentation_chunks(["exceptions"], 8)
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "a.jsonl", first)))
    copies = [tmp_path / f"copy-{n}.db" for n in range(3)]
    with peer.start("--interval", "0.1") as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 2, what="two cycles", timeout_s=30)
        # Cycles commit (and the CLI writes) while each copy is taken.
        peer.pulse_emit(
            "pulse", "--kind", "reward", "--text", "exceptions and tracebacks", "--reason", "test"
        )
        for copy in copies:
            result = peer.dreamcycle("backup", str(copy))
            assert "integrity ok" in result.stdout
        refused = peer.dreamcycle("backup", str(copies[0]), expect=2)
        assert "exists" in refused.stderr
        assert daemon.terminate() == 0
    for copy in copies:
        with closing(sqlite3.connect(copy)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)
            chunks = conn.execute("SELECT count(*) FROM observations WHERE type != 'efficacy'")
            assert chunks.fetchone() == (len(first),)
            assert conn.execute("SELECT count(*) FROM cycles").fetchone()[0] >= 2
        assert not copy.with_name(copy.name + "-wal").exists()
    assert not list(tmp_path.glob(".*.partial"))


def test_restoring_a_backup_brings_the_memories_back(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "restored", tmp_path / "zeitgeist")
    peer.dreamcycle(
        "ingest", str(write_jsonl(tmp_path / "a.jsonl", documentation_chunks(["try"], 4)))
    )
    peer.dreamcycle("run", "--once")
    peer.dreamcycle("backup", str(tmp_path / "saved.db"))
    before = peer.salience()
    # The documented restore: stop the daemon, put the copy in place, drop the WAL files.
    for leftover in peer.data_dir.glob("dreamcycle.db*"):
        leftover.unlink()
    (tmp_path / "saved.db").rename(peer.database_path)
    peer.dreamcycle("run", "--once")
    assert peer.salience().keys() == before.keys()
    typo = Peer(tmp_path / "no", "restored", tmp_path / "zeitgeist")
    missing = typo.dreamcycle("backup", str(tmp_path / "x.db"), expect=2)
    assert "no dreamcycle data directory at" in missing.stderr
    assert not typo.data_dir.exists()
