"""Another process holding the database's write lock: commands wait for it instead of
failing, and the daemon waits it out (reads served, the fault in /readyz and a metric)
instead of exiting."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import apsw
import pytest

from tests.daemon_helpers import documentation_chunks, emitted_id, wait_until, write_jsonl
from tests.fault_helpers import (
    metric_value,
    peer_with_probes,
    readiness,
    storage_check,
    storage_fault_reported,
)

pytestmark = pytest.mark.slow

#: Longer than the 10 s busy timeout: the daemon's next write gives up on the lock.
LONG_LOCK_S = 11.0
#: Shorter than the busy timeout: a command waits it out.
SHORT_LOCK_S = 2.0


class ForeignLock:
    """A connection of another process's kind holding BEGIN IMMEDIATE (the write lock)."""

    def __init__(self, database: Path) -> None:
        self.conn = apsw.Connection(str(database))
        self.conn.execute("BEGIN IMMEDIATE")

    def release(self) -> None:
        self.conn.execute("ROLLBACK")
        self.conn.close()


def test_a_foreign_write_lock_is_waited_out_by_commands_and_the_daemon(tmp_path: Path) -> None:
    peer, readyz = peer_with_probes(tmp_path / "a", tmp_path / "zeitgeist")
    chunks = write_jsonl(tmp_path / "c.jsonl", documentation_chunks(["try"], 4))
    peer.dreamcycle("ingest", str(chunks))
    with peer.start("--interval", "0.5") as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 1, what="a first cycle", context=daemon.log_tail)

        lock = ForeignLock(peer.database_path)
        held_since = time.monotonic()
        # Reads go on under the lock (WAL): a command that only reads answers at once.
        assert "chunks" in peer.dreamcycle("status").stdout.lower()
        check = wait_until(
            lambda: storage_fault_reported(readyz),
            what="/readyz to report the lock",
            timeout_s=LONG_LOCK_S + 10,
            context=daemon.log_tail,
        )
        assert check["fault"] == "busy", check
        assert daemon.returncode() is None, daemon.log_tail()
        assert metric_value(readyz, "dreamcycle_storage_fault", 'kind="busy"') == 1.0
        assert time.monotonic() - held_since >= 9.0  # the busy timeout was waited first

        # A command writing under the lock waits for it (bestpractice's 100 ms no longer
        # applies before the busy timeout), and succeeds once it is released.
        threading.Timer(SHORT_LOCK_S, lock.release).start()
        started = time.monotonic()
        pulse = emitted_id(
            peer.pulse_emit(
                "pulse", "--text", "an except clause names the exception it handles",
                "--kind", "reward", "--strength", "0.3", "--reason", "after the lock",
            )
        )  # fmt: skip
        assert time.monotonic() - started >= SHORT_LOCK_S - 0.5

        # The daemon retries with backoff and takes up its work again by itself.
        wait_until(
            lambda: peer.pulse_status(pulse) == "applied",
            what="the pulse applied after the lock",
            context=daemon.log_tail,
        )
        wait_until(
            lambda: (c := storage_check(readyz)) and c["ok"],
            what="/readyz to clear",
            context=daemon.log_tail,
        )
        document = readiness(readyz)
        assert document is not None and document["checks"]["storage"] == {"ok": True}
        assert metric_value(readyz, "dreamcycle_storage_fault", 'kind="busy"') == 0.0
        assert daemon.terminate() == 0
    log = daemon.log()
    assert "Traceback" not in log, log
    # Logged when it began and when it ended, not once per retry.
    assert log.count("data directory not writable") == 1, log
    assert log.count("data directory writable again") == 1, log
