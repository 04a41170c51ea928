"""Real daemons on one zeitgeist: data directories, keys, processes and what they stored.

What scripts/mesh_run.py (twenty daemons) and tests/test_mesh_scale.py (five) share. Each
peer is a data directory driven through the `dreamcycle` console script as a user runs
it; what is emitted is queued through the functions `pulse-emit` and `recall` run
(daemon/emit.py, daemon/recall.py), in this process, against each peer's database while
its daemon runs, as `pulse-emit` does (a process per pulse would cost a second each).
What each peer stored is read with the standard library's sqlite3.
"""

from __future__ import annotations

import fcntl
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.zeitgeist.signing import Signer

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


def provision_key(data_dir: Path, peer_id: str, keyring_path: Path) -> None:
    """What `dreamcycle keys init` and an operator distributing the keyring do, in process:
    a key file in the data directory, its public key in the shared keyring (peers set up
    side by side take turns on the keyring). Nothing when the key file exists."""
    from dreamcycle.daemon.defaults import KEYS_KEY_FILE
    from dreamcycle.daemon.keys import write_private_key
    from dreamcycle.zeitgeist.signing import generate_key

    key_path = data_dir / KEYS_KEY_FILE
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
    from dreamcycle.daemon.keys import read_keyring, write_keyring

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
        env["DREAMCYCLE_KEYS_KEYRING_FILE"] = str(self.keyring_path)
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
        with closing(sqlite3.connect(self.database_path, timeout=DB_TIMEOUT_S)) as conn:
            return conn.execute(sql, tuple(params)).fetchall()

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
        except sqlite3.OperationalError:
            return 0

    def requests(self) -> dict[str, int]:
        """Requests this daemon sent to the store since it started, by operation (its
        metrics; empty when it does not run or serves none)."""
        if self.metrics_port is None or not self.running():
            return {}
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                text = answer.read().decode()
        except OSError:
            return {}
        counts: dict[str, int] = {}
        for line in text.splitlines():
            if line.startswith(REQUESTS_METRIC + "{"):
                labels, _, value = line.rpartition(" ")
                operation = labels.split('operation="', 1)[1].split('"', 1)[0]
                counts[operation] = int(float(value))
        return counts

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
