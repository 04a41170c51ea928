"""A full disk and a read-only data directory: the running daemon waits a full disk out
and resumes by itself, losing nothing; a data directory that cannot be written at all is
refused at start-up as a configuration error (exit 2, one line)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.daemon_helpers import (
    DREAMCYCLE,
    documentation_chunks,
    emitted_id,
    wait_until,
    write_jsonl,
)
from tests.fault_helpers import (
    admission_consistent,
    fill,
    metric_value,
    peer_with_probes,
    remount,
    small_tmpfs,
    storage_check,
    storage_fault_reported,
)

pytestmark = pytest.mark.slow

#: Room for the database, its WAL and the index of a few chunks, little more.
DATA_FS_SIZE = "24m"


def test_a_full_disk_is_waited_out_and_nothing_is_lost(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", DATA_FS_SIZE) as fs:
        peer, readyz = peer_with_probes(fs / "a", tmp_path / "zeitgeist")
        chunks = write_jsonl(tmp_path / "c.jsonl", documentation_chunks(["try"], 4))
        peer.dreamcycle("ingest", str(chunks))
        # The log off the disk that fills: a line written while it is full would be cut.
        with peer.start("--interval", "0.5", log_dir=tmp_path) as daemon:
            daemon.wait_ready()
            wait_until(lambda: peer.cycles_done() >= 1, what="a first cycle")
            # Queued before the disk fills: the daemon cannot apply it until space returns.
            pulse = emitted_id(
                peer.pulse_emit(
                    "pulse", "--text", "an except clause names the exception it handles",
                    "--kind", "reward", "--strength", "0.3", "--reason", "disk full",
                )
            )  # fmt: skip
            filler = fill(fs)
            check = wait_until(
                lambda: storage_fault_reported(readyz),
                what="/readyz to report the full disk",
                context=daemon.log_tail,
            )
            assert check["fault"] == "disk_full", check
            assert metric_value(readyz, "dreamcycle_storage_fault", 'kind="disk_full"') == 1.0
            assert daemon.returncode() is None, daemon.log_tail()
            # Reads are still served from the full disk.
            assert peer.dreamcycle("status").returncode == 0

            filler.unlink()
            wait_until(
                lambda: peer.pulse_status(pulse) == "applied",
                what="the pulse applied once space returned",
                context=daemon.log_tail,
            )
            wait_until(lambda: (c := storage_check(readyz)) and c["ok"], what="/readyz to clear")
            assert daemon.terminate() == 0
        log = daemon.log()
        assert "Traceback" not in log, log
        assert log.count("data directory not writable") == 1, log
        assert admission_consistent(peer) == 4
        assert peer.scalar("SELECT count(*) FROM applied_pulses") == 1


def test_a_data_directory_that_cannot_be_written_is_refused_at_start(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "fs", DATA_FS_SIZE) as fs:
        peer, _ = peer_with_probes(fs / "a", tmp_path / "zeitgeist")
        chunks = write_jsonl(tmp_path / "c.jsonl", documentation_chunks(["try"], 2))
        peer.dreamcycle("ingest", str(chunks))
        peer.provision_key()
        before = peer.dump()
        remount(fs, "ro")
        try:
            result = peer.run_cli(DREAMCYCLE, "run", "--once", expect=2)
        finally:
            remount(fs, "rw")
        lines = result.stderr.strip().splitlines()
        assert lines == [lines[-1]] and lines[0].startswith(
            "error: the data directory cannot be written"
        ), result.stderr
        assert "Read-only file system" in lines[0]
        assert peer.dump() == before
