"""Run dreamcycle the way a user does: console scripts in subprocesses, real files.

A `Peer` is one data directory with a peer id and a zeitgeist directory; its
methods run `dreamcycle` and `pulse-emit` against it and read its database
with the standard library's sqlite3, never through the code under test.

One module: the tests that drive real processes share its Peer and Daemon, and a peer's
methods are the one place that knows how a user runs the commands.
"""

from __future__ import annotations

import base64
import functools
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path
from pydoc_data.topics import topics
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np
import numpy.typing as npt
import pytest

from dreamcycle.daemon.scheduling.cycle_thread import idle_is_reversible

# Re-exported: the tests that provision keys import them from here.
from scripts.mesh_peers import provision_key as provision_key
from scripts.mesh_peers import trust_key as trust_key

if TYPE_CHECKING:
    from dreamcycle.daemon.service.loop import Service

T = TypeVar("T")

#: For tests of what runs under SCHED_IDLE: where it cannot be left again, nothing does.
needs_reversible_idle = pytest.mark.skipif(
    idle_is_reversible() is not None,
    reason=f"SCHED_IDLE cannot be left here: {idle_is_reversible()}",
)

#: The console scripts installed beside the interpreter running the tests.
BIN_DIR: Final = Path(sys.executable).parent
DREAMCYCLE: Final = str(BIN_DIR / "dreamcycle")
PULSE_EMIT: Final = str(BIN_DIR / "pulse-emit")

DATABASE_FILE: Final = "dreamcycle.db"
#: Commands run side by side by `Peer.run_concurrently` (each loads the model on one core).
CONCURRENT_COMMANDS: Final = 4
#: A CLI that takes longer than this is hung (the slowest, ingest, takes ~6 s).
CLI_TIMEOUT_S: Final = 120.0
#: How long a daemon may take to exit after SIGTERM before a test calls it hung. Its
#: interpreter's exit alone took over 10 s on a loaded machine; how soon a stop request
#: ends the work is bounded by the SIGTERM tests, each with a bound of its own.
STOP_TIMEOUT_S: Final = 30.0
#: How long a SIGKILLed daemon is waited for before the test fails.
KILL_TIMEOUT_S: Final = 60.0
POLL_INTERVAL_S: Final = 0.05
#: How long to wait for a daemon to reach a state before calling it stuck.
WAIT_TIMEOUT_S: Final = 60.0
#: Paragraphs shorter than this are headings or fragments, not memories.
MIN_PARAGRAPH_CHARS: Final = 80
#: Lines of a daemon's log shown when a wait times out.
LOG_TAIL_LINES: Final = 40
#: Settings every command gets unless a test overrides them: no metrics port to fight
#: over, no network for the embedding model.
#: One embedding thread per command and daemon: three test processes share two cores, and
#: a pool per process would only add onnxruntime threads spinning between calls.
BASE_SETTINGS: Final = {
    "DREAMCYCLE_METRICS_LISTEN": "",
    "HF_HUB_OFFLINE": "1",
    "DREAMCYCLE_EMBEDDING_THREADS": "1",
}

HEX_DECISION: Final = r"decision ([0-9a-f]{64})"
#: Logged once the daemon has locked its data directory and opened its index and log.
READY_MESSAGE: Final = "daemon ready"


# ---- real text --------------------------------------------------------------------------


def documentation_chunks(
    topic_names: Sequence[str], limit: int | None = None
) -> list[dict[str, str]]:
    """Paragraphs of the standard library's bundled documentation, as ingestible JSON objects."""
    chunks: list[dict[str, str]] = []
    seen: set[str] = set()
    for name in topic_names:
        if name not in topics:
            raise KeyError(f"pydoc_data.topics has no topic {name!r}")
        for paragraph in topics[name].split("\n\n"):
            text = paragraph.strip()
            if len(text) >= MIN_PARAGRAPH_CHARS and text not in seen:
                seen.add(text)
                chunks.append({"content": text, "title": name, "topic_key": f"python/{name}"})
    if limit is not None:
        if len(chunks) < limit:
            raise AssertionError(f"topics {list(topic_names)} give only {len(chunks)} paragraphs")
        chunks = chunks[:limit]
    return chunks


def thread_policies(pid: int) -> list[tuple[str, int]]:
    """Each thread's name and scheduling policy, from /proc (policy is stat's 41st field).
    A thread takes the name of the thread that started it."""
    policies = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        stat = (task / "stat").read_text()
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        policies.append((name, int(stat[stat.rindex(")") + 2 :].split()[41 - 3])))
    return policies


# ---- commands in this process -----------------------------------------------------------


@dataclass(frozen=True)
class Ran:
    """What a command run in this process returned and printed."""

    code: int
    out: str
    err: str

    @property
    def errors(self) -> list[str]:
        return [line for line in self.err.splitlines() if "error:" in line]


def run_in_process(entry: Callable[[Sequence[str]], int], argv: Sequence[str]) -> Ran:
    """One command (a program's `main`) in this process, its output captured (argparse exits
    by SystemExit): for refusals, which a process would spend most of its time starting."""
    out, err = io.StringIO(), io.StringIO()
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


def write_jsonl(path: Path, rows: Sequence[Mapping[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


# ---- waiting ----------------------------------------------------------------------------


def run_service_while(service: Service, work: Callable[[], object]) -> None:
    """`service.run()` in this process, while `work()` runs in a thread beside it; stopped
    as a SIGTERM stops it once `work` returns (or raises)."""
    import trio

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(service.run)
            try:
                await trio.to_thread.run_sync(work)
            finally:
                service.stop_requested.set()
                service.stop.set()

    trio.run(main)


def wait_until(
    probe: Callable[[], T | None],
    *,
    what: str,
    timeout_s: float = WAIT_TIMEOUT_S,
    context: Callable[[], str] = lambda: "",
) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}\n{context()}")
        time.sleep(POLL_INTERVAL_S)


def side_by_side(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Call each function in its own thread (commands that mostly wait on a subprocess)."""
    with ThreadPoolExecutor(max_workers=CONCURRENT_COMMANDS) as pool:
        futures = [pool.submit(call) for call in calls]
        return [future.result() for future in futures]


# ---- processes ----------------------------------------------------------------------------


@dataclass
class Daemon:
    """A `dreamcycle run` subprocess; its log (stderr) goes to a file so it never blocks."""

    process: subprocess.Popen[bytes]
    log_path: Path
    name: str

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def log_tail(self) -> str:
        lines = self.log().splitlines()[-LOG_TAIL_LINES:]
        return f"--- last log lines of {self.name} ---\n" + "\n".join(lines)

    def returncode(self) -> int | None:
        return self.process.poll()

    def wait_ready(self, timeout_s: float = WAIT_TIMEOUT_S) -> None:
        """Until the daemon holds its data directory and runs cycles; fails if it exits first."""
        wait_until(
            lambda: READY_MESSAGE in self.log() or self.returncode() is not None,
            what=f"{self.name} to become ready",
            timeout_s=timeout_s,
            context=self.log_tail,
        )
        assert self.returncode() is None, f"{self.name} exited early\n{self.log_tail()}"

    def wait_exit(self, timeout_s: float = WAIT_TIMEOUT_S) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.name} did not exit within {timeout_s:g} s\n{self.log_tail()}"
            ) from None

    def terminate(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """SIGTERM, then the exit code; a daemon that ignores it fails the test."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait_exit(timeout_s)

    def kill(self) -> None:
        """SIGKILL: no handler runs, nothing is flushed."""
        if self.process.poll() is None:
            self.process.kill()
        # A killed process cannot refuse; on a loaded machine tearing down its memory can
        # still take longer than a stop is given.
        self.process.wait(timeout=KILL_TIMEOUT_S)

    def __enter__(self) -> Daemon:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill()


def _fail_with_output(
    command: Sequence[str], result: subprocess.CompletedProcess[str], expected: int
) -> str:
    return (
        f"{' '.join(command)} exited {result.returncode}, expected {expected}\n"
        f"--- stdout ---\n{result.stdout}\n--- stderr ---\n{result.stderr}"
    )


# ---- one peer ----------------------------------------------------------------------------


@dataclass
class Peer:
    """A data directory, a peer id and a zeitgeist directory, driven through the real CLIs."""

    data_dir: Path
    peer_id: str
    zeitgeist_dir: Path
    #: DREAMCYCLE_* settings passed to every command of this peer (environment overrides).
    settings: dict[str, str] = field(default_factory=dict)

    @property
    def database_path(self) -> Path:
        return self.data_dir / DATABASE_FILE

    @property
    def keyring_path(self) -> Path:
        """One keyring for every peer of a mesh (they share the zeitgeist directory's name),
        as an operator would distribute it."""
        return self.zeitgeist_dir.parent / f"{self.zeitgeist_dir.name}.keyring.json"

    def provision_key(self) -> None:
        """Give this peer a signing key, trusted in the mesh's keyring (once)."""
        provision_key(self.data_dir, self.peer_id, self.keyring_path)

    def options(self) -> list[str]:
        return [
            "--data-dir", str(self.data_dir),
            "--peer-id", self.peer_id,
            "--zeitgeist-dir", str(self.zeitgeist_dir),
            "--log-format", "text",
        ]  # fmt: skip

    def environment(self, settings: Mapping[str, str] | None = None) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
        env.update(BASE_SETTINGS)
        env["DREAMCYCLE_SIGNING_KEYRING_FILE"] = str(self.keyring_path)
        env.update(self.settings)
        env.update(settings or {})
        return env

    def run_cli(
        self,
        program: str,
        verb: str,
        *args: str,
        expect: int | None = 0,
        settings: Mapping[str, str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `program verb args` against this peer; check the exit code unless `expect` is None."""
        if program == DREAMCYCLE and verb == "run":
            self.provision_key()
        command = [program, verb, *args, *self.options()]
        result = subprocess.run(
            command,
            capture_output=True,
            text=True,
            env=self.environment(settings),
            timeout=CLI_TIMEOUT_S,
            check=False,
        )
        if expect is not None:
            assert result.returncode == expect, _fail_with_output(command, result, expect)
        return result

    def dreamcycle(self, verb: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run_cli(DREAMCYCLE, verb, *args, **kwargs)

    def pulse_emit(self, verb: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return self.run_cli(PULSE_EMIT, verb, *args, **kwargs)

    def run_concurrently(
        self, commands: Sequence[Sequence[str]]
    ) -> list[subprocess.CompletedProcess[str]]:
        """Run (program, verb, *args) commands side by side; exit codes are left to the caller."""
        return side_by_side(
            [functools.partial(self.run_cli, c[0], c[1], *c[2:], expect=None) for c in commands]
        )

    def start(
        self,
        *args: str,
        settings: Mapping[str, str] | None = None,
        name: str = "",
        log_dir: Path | None = None,
    ) -> Daemon:
        """`dreamcycle run args` in the background, its output kept in a file in `log_dir`
        (beside the data directory unless given: elsewhere when that file system is made
        to fail, or the log would lose lines)."""
        label = name or f"daemon {self.peer_id}"
        log_path = (log_dir or self.data_dir.parent) / (
            f"{self.data_dir.name}-{self.peer_id}-{time.monotonic_ns()}.log"
        )
        self.provision_key()
        with log_path.open("wb") as log_file:
            process = subprocess.Popen(
                [DREAMCYCLE, "run", *args, *self.options()],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.environment(settings),
            )
        return Daemon(process, log_path, label)

    def copy_to(self, data_dir: Path, **changes: Any) -> Peer:
        """The same stored state in a new data directory (no process may be using this one)."""
        shutil.copytree(self.data_dir, data_dir)
        return replace(self, data_dir=data_dir, **changes)

    # ---- reading the database ----------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(self.database_path, timeout=WAIT_TIMEOUT_S)) as conn:
            return conn.execute(sql, tuple(params)).fetchall()

    def query_together(self, *sqls: str) -> list[list[tuple[Any, ...]]]:
        """The rows of each query, all read in one snapshot (the daemon may commit between
        separate reads)."""
        with closing(sqlite3.connect(self.database_path, timeout=WAIT_TIMEOUT_S)) as conn:
            conn.execute("BEGIN")
            try:
                return [conn.execute(sql).fetchall() for sql in sqls]
            finally:
                conn.rollback()

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self.query(sql, params)
        assert len(rows) == 1, f"{sql} returned {len(rows)} rows"
        return rows[0][0]

    def salience(self, *, live_only: bool = False) -> dict[str, float]:
        """Content hash -> stored salience; `live_only`: neither tombstoned nor cold."""
        where = " WHERE type != 'efficacy'"
        if live_only:
            where += " AND deleted_at IS NULL AND cold_at IS NULL"
        return {
            str(h): float(s)
            for h, s in self.query(f"SELECT content_hash, salience FROM observations{where}")
        }

    def embeddings(self) -> dict[str, npt.NDArray[np.float32]]:
        """Content hash -> stored unit embedding."""
        return {
            str(h): np.frombuffer(bytes(blob), dtype="<f4").astype(np.float32)
            for h, blob in self.query(
                "SELECT content_hash, embedding FROM observations WHERE embedding IS NOT NULL"
            )
        }

    def cycles_done(self) -> int:
        if not self.database_path.exists():
            return 0
        try:
            return int(self.scalar("SELECT count(*) FROM cycles WHERE status = 'done'"))
        except sqlite3.OperationalError:
            return 0  # the daemon has not created its tables yet

    def pulse_status(self, pulse_id: str) -> str | None:
        rows = self.query("SELECT status FROM applied_pulses WHERE pulse_id = ?", (pulse_id,))
        return None if not rows else str(rows[0][0])

    def dump(self) -> list[str]:
        """Every row of every table, as SQL: equal dumps mean an unchanged database.

        SQLite's planner statistics (sqlite_stat*, refreshed by PRAGMA optimize on close)
        are left out: they describe the data, they are not data.
        """
        with closing(sqlite3.connect(self.database_path, timeout=WAIT_TIMEOUT_S)) as conn:
            return [line for line in conn.iterdump() if "sqlite_stat" not in line]


def pulse_seed(peer: Peer, pulse_id: str) -> npt.NDArray[np.float32]:
    """The seed embedding of a pulse this peer applied, from its journal."""
    body = json.loads(
        peer.scalar("SELECT body FROM journal WHERE kind = 'pulse' AND ref = ?", (pulse_id,))
    )
    raw = base64.b64decode(body["pulse"]["seed_embedding"])
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def nearest(
    embeddings: Mapping[str, npt.NDArray[np.float32]], seed: npt.NDArray[np.float32]
) -> list[tuple[str, float]]:
    """(content hash, cosine similarity to `seed`), most similar first."""
    unit = seed / np.linalg.norm(seed)
    ranked = [(digest, float(np.dot(vector, unit))) for digest, vector in embeddings.items()]
    return sorted(ranked, key=lambda pair: (-pair[1], pair[0]))


def emitted_id(result: subprocess.CompletedProcess[str]) -> str:
    """The entry id from pulse-emit's "queued <kind> <id>" line."""
    words = result.stdout.split()
    assert words and words[0] in ("queued", "already"), (
        f"unexpected pulse-emit output: {result.stdout!r}"
    )
    return words[-1]
