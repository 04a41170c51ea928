"""Real daemons on one zeitgeist: data directories, keys, processes and what they stored.

What scripts/mesh_run.py (twenty daemons), scripts/chaos.py (three, under faults) and
tests/test_mesh_scale.py (five) share. Each peer is a data directory driven through the
`dreamcycle` console script as a user runs it; what is emitted is queued through the
functions `pulse-emit` and `recall` run (daemon/intake/emit_*.py, daemon/recall/retrieve.py), in this
process, against each peer's database while its daemon runs, as `pulse-emit` does (a
process per pulse would cost a second each). What each peer stored is read with apsw, the
SQLite library the daemon and the emitters use (`MeshPeer.query` says why); what its
daemon counted, from its metrics; its memory, from /proc.
"""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import apsw

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.zeitgeist.signing import Signer
from scripts.bench_common import BenchmarkError

BIN_DIR: Final = Path(sys.executable).parent
DREAMCYCLE: Final = str(BIN_DIR / "dreamcycle")
DATABASE_FILE: Final = "dreamcycle.db"
KEYRING_FILE: Final = "keyring.json"
COMMAND_TIMEOUT_S: Final = 300.0
STOP_TIMEOUT_S: Final = 60.0
DB_TIMEOUT_S: Final = 60.0
#: Settings every peer of a mesh gets: no network for the embedding model.
BASE_SETTINGS: Final = {"HF_HUB_OFFLINE": "1"}
REQUESTS_METRIC: Final = "dreamcycle_zeitgeist_requests_total"
#: Daemons ingesting at once (each loads the embedding model's tokenizer).
INGEST_WORKERS: Final = 4
WAIT_POLL_S: Final = 1.0


def provision_key(data_dir: Path, peer_id: str, keyring_path: Path) -> None:
    """What `dreamcycle keys init` and an operator distributing the keyring do, in process:
    a key file in the data directory, its public key in the shared keyring (peers set up
    side by side take turns on the keyring). Nothing when the key file exists."""
    from dreamcycle.daemon.defaults import SIGNING_KEY_FILE
    from dreamcycle.daemon.signing_keys import write_private_key
    from dreamcycle.zeitgeist.signing import generate_key

    key_path = data_dir / SIGNING_KEY_FILE
    if key_path.exists():
        return
    key = generate_key()
    try:
        write_private_key(key_path, key)
    except FileExistsError:
        return  # provisioned by a command started beside this one
    except OSError:
        return  # a data directory that cannot hold files: the command under test says so
    trust_key(keyring_path, Signer(peer_id, key))


def trust_key(keyring_path: Path, signer: Signer, roles: Sequence[str] = ("peer",)) -> None:
    """Add `signer`'s public key, trusted for `roles`, to the keyring at `keyring_path`
    (others may do so too)."""
    from dreamcycle.daemon.signing_keys import read_keyring, write_keyring

    keyring_path.parent.mkdir(parents=True, exist_ok=True)
    with (keyring_path.parent / f".{keyring_path.name}.lock").open("a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        keyring = read_keyring(keyring_path)
        write_keyring(keyring_path, keyring.with_key(signer.trusted_key(roles)))


@dataclass
class MeshPeer:
    """One data directory of a mesh under `root`, all peers trusting one keyring."""

    root: Path
    peer_id: str
    #: DREAMCYCLE_* (and AWS_*) settings of every command and daemon of this peer.
    settings: dict[str, str] = field(default_factory=dict)
    metrics_port: int | None = None
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def data_dir(self) -> Path:
        return self.root / self.peer_id

    @property
    def database_path(self) -> Path:
        return self.data_dir / DATABASE_FILE

    @property
    def keyring_path(self) -> Path:
        return self.root / KEYRING_FILE

    @property
    def log_path(self) -> Path:
        return self.root / f"{self.peer_id}.log"

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
        env.update(BASE_SETTINGS)
        env["DREAMCYCLE_SIGNING_KEYRING_FILE"] = str(self.keyring_path)
        listen = "" if self.metrics_port is None else f"127.0.0.1:{self.metrics_port}"
        env["DREAMCYCLE_METRICS_LISTEN"] = listen
        env.update(self.settings)
        return env

    def options(self) -> list[str]:
        return ["--data-dir", str(self.data_dir), "--peer-id", self.peer_id]

    def command(self, verb: str, *args: str) -> subprocess.CompletedProcess[str]:
        """`dreamcycle verb args`; a non-zero exit raises, with its output."""
        result = subprocess.run(
            [DREAMCYCLE, *verb.split(), *args, *self.options()],
            capture_output=True,
            text=True,
            env=self.environment(),
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"dreamcycle {verb} on {self.peer_id} exited {result.returncode}:\n"
                f"{result.stdout}\n{result.stderr}"
            )
        return result

    def start(self, interval_s: float) -> None:
        """`dreamcycle run --interval` in the background, its log appended to `log_path`."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        provision_key(self.data_dir, self.peer_id, self.keyring_path)
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                [DREAMCYCLE, "run", "--interval", str(interval_s), *self.options(),
                 "--log-format", "text"],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=self.environment(),
            )  # fmt: skip
        self.starts += 1

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self) -> int:
        """SIGTERM, then the exit code."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=STOP_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL: nothing is flushed, as in a crash or a lost machine."""
        assert self.process is not None
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=STOP_TIMEOUT_S)

    def log_tail(self, lines: int = 30) -> str:
        text = self.log_path.read_text(encoding="utf-8", errors="replace")
        return f"--- {self.peer_id} ---\n" + "\n".join(text.splitlines()[-lines:])

    # ---- what it stored --------------------------------------------------------------

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows `sql` reads from this peer's database, through apsw: the SQLite library
        that the daemon and this process's emitters (mesh_load.Emitter) use.

        Not the standard library's sqlite3, which links a second copy of SQLite into this
        process: when one copy closes its connection to a file, the POSIX locks that the
        other copy's connections hold on the file are released (sqlite.org/howtocorrupt.html,
        "Multiple copies of SQLite linked into the same application"). Read that way while
        emitters were open, a peer whose daemon was stopped or killed and started again
        lost what the emitters queued on it from then on: acknowledged, yet in no outbox
        that any other connection read."""
        conn = apsw.Connection(str(self.database_path), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            conn.set_busy_timeout(int(DB_TIMEOUT_S * 1000))
            return [tuple(row) for row in conn.execute(sql, tuple(params))]
        finally:
            conn.close()

    def salience(self) -> dict[str, float]:
        """Content hash -> stored salience."""
        rows = self.query(
            "SELECT content_hash, salience FROM observations WHERE type != 'efficacy'"
        )
        return {str(h): float(s) for h, s in rows}

    def cycles_done(self) -> int:
        if not self.database_path.exists():
            return 0
        try:
            return int(self.query("SELECT count(*) FROM cycles WHERE status = 'done'")[0][0])
        except apsw.SQLError:  # no cycles table yet
            return 0

    def requests(self) -> dict[str, int]:
        """Requests this daemon sent to the store since it started, by operation (its
        metrics; empty when it does not run or serves none)."""
        return {k: int(v) for k, v in self.counter(REQUESTS_METRIC, "operation").items()}

    def counter(self, metric: str, label: str) -> dict[str, float]:
        """The daemon's counter `metric` since it started, by the value of `label` (its
        metrics; empty when it does not run or serves none)."""
        if self.metrics_port is None or not self.running():
            return {}
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return {}
        counts: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith(metric + "{") and f'{label}="' in line:
                labels, _, value = line.rpartition(" ")
                name = labels.split(f'{label}="', 1)[1].split('"', 1)[0]
                counts[name] = float(value)
        return counts

    def memory_kib(self) -> tuple[int, int] | None:
        """The daemon's resident set now and at its peak (VmRSS, VmHWM of /proc), in KiB;
        None when it does not run."""
        if self.process is None or self.process.poll() is not None:
            return None
        try:
            status = Path(f"/proc/{self.process.pid}/status").read_text(encoding="utf-8")
        except OSError:
            return None
        fields = {name: value for name, _, value in (x.partition(":") for x in status.splitlines())}
        try:
            return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
        except (KeyError, ValueError, IndexError):
            return None

    def database_bytes(self) -> int:
        """The database's size on disk, its write-ahead log and shared memory included."""
        total = 0
        for suffix in ("", "-wal", "-shm"):
            try:
                total += self.database_path.with_name(DATABASE_FILE + suffix).stat().st_size
            except FileNotFoundError:
                continue
        return total

    def runtime(self) -> Runtime:
        """This peer's database and embedder opened in this process, as `pulse-emit` opens
        them (close it when done)."""
        config = load_config(
            None,
            environ=self.environment(),
            overrides={"peer.data_dir": str(self.data_dir), "peer.id": self.peer_id},
        )
        return Runtime.open(config)


def mesh_settings(
    bucket: str, prefix: str, endpoint_url: str, credentials: Mapping[str, str]
) -> dict[str, str]:
    """Every peer on one S3 bucket and prefix."""
    return {
        "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
        "DREAMCYCLE_ZEITGEIST_S3_BUCKET": bucket,
        "DREAMCYCLE_ZEITGEIST_S3_PREFIX": prefix,
        "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": endpoint_url,
        **credentials,
    }


def ingest_all(peers: Sequence[MeshPeer], chunks: Path) -> None:
    """`dreamcycle ingest --no-embed chunks` on every peer, a few at a time (the daemon
    embeds them in its first cycle)."""
    with ThreadPoolExecutor(INGEST_WORKERS) as pool:
        list(pool.map(lambda p: p.command("ingest --no-embed", str(chunks)), peers))


def admitted(peer: MeshPeer, chunks: int) -> bool:
    """Whether `peer` finished a cycle and admitted at least `chunks` chunks."""
    if peer.cycles_done() == 0:
        return False
    rows = peer.query("SELECT count(*) FROM observations WHERE admitted_seq IS NOT NULL")
    return bool(rows[0][0] >= chunks)


def wait_for(
    probe: Callable[[], bool], what: str, timeout_s: float, peers: Callable[[], Sequence[MeshPeer]]
) -> None:
    """Poll `probe` until it holds; past `timeout_s`, BenchmarkError with the tails of the
    logs of `peers()`."""
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            tails = "\n".join(p.log_tail() for p in peers())
            raise BenchmarkError(f"timed out waiting for {what}\n{tails}")
        time.sleep(WAIT_POLL_S)
