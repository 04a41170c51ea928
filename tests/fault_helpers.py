"""What the fault tests share: a daemon whose /readyz can be read, and small file systems
that can be filled or made read-only (tmpfs mounts; the tests skip where mounting is not
permitted)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.pulse import PulseKind
from scripts.local_servers import pick_free_ports
from tests.daemon_helpers import Peer

#: How long a daemon may take to exit after SIGTERM, whatever phase it is in.
STOP_LIMIT_S: Final = 10.0
READYZ_TIMEOUT_S: Final = 5.0


def peer_with_probes(data_dir: Path, zeitgeist_dir: Path, **settings: str) -> tuple[Peer, str]:
    """A peer whose daemon serves /readyz on a free loopback port (the URL is returned)."""
    (port,) = pick_free_ports(1)
    peer = Peer(
        data_dir,
        "a",
        zeitgeist_dir,
        settings={"DREAMCYCLE_METRICS_LISTEN": f"127.0.0.1:{port}", **settings},
    )
    return peer, f"http://127.0.0.1:{port}/readyz"


def readiness(url: str) -> dict[str, Any] | None:
    """The /readyz document (200 or 503), None while nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=READYZ_TIMEOUT_S) as answer:
            return dict(json.loads(answer.read()))
    except urllib.error.HTTPError as error:
        return dict(json.loads(error.read()))
    except OSError:
        return None


def storage_check(url: str) -> dict[str, Any] | None:
    document = readiness(url)
    return None if document is None else dict(document["checks"]["storage"])


def storage_fault_reported(url: str) -> dict[str, Any] | None:
    """/readyz's storage check while it fails, None while it passes or nothing answers."""
    check = storage_check(url)
    return None if check is None or check["ok"] else check


def metric_value(url: str, name: str, labels: str) -> float | None:
    """One sample of the daemon's Prometheus exposition (next to /readyz)."""
    metrics_url = url.rsplit("/", 1)[0] + "/metrics"
    with urllib.request.urlopen(metrics_url, timeout=READYZ_TIMEOUT_S) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(f"{name}{{{labels}}} "):
                return float(line.rsplit(" ", 1)[1])
    return None


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` at `path` (skips the test where mounting is not permitted)."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path))
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"cannot mount a tmpfs here: {error}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False, capture_output=True)


def remount(path: Path, mode: str) -> None:
    """Remount the tmpfs at `path` read-only ("ro") or writable ("rw")."""
    _mount("-o", f"remount,{mode}", str(path))


def fill(path: Path) -> Path:
    """Write zeros into a file under `path` until the file system is full."""
    filler = path / "filler"
    subprocess.run(
        ["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], check=False, capture_output=True
    )
    return filler


def admission_consistent(peer: Peer) -> int:
    """Every admitted chunk journaled once and announced once (an `assert` queued), every
    pending one neither: the number admitted. Efficacy rows are the daemon's own records.
    Read in one snapshot: the daemon admits while this looks."""
    admitted_rows, pending_rows, journal_rows, outbox_rows = peer.query_together(
        "SELECT content_hash FROM observations "
        "WHERE admitted_seq IS NOT NULL AND type != 'efficacy'",
        "SELECT content_hash FROM observations WHERE admitted_seq IS NULL",
        "SELECT ref FROM journal WHERE kind = 'chunk'",
        "SELECT body FROM outbox WHERE kind = 'assert'",
    )
    admitted = {str(digest) for (digest,) in admitted_rows}
    pending = {str(digest) for (digest,) in pending_rows}
    journaled = Counter(str(ref) for (ref,) in journal_rows)
    announced = Counter(str(json.loads(body)["content_hash"]) for (body,) in outbox_rows)
    for digest in admitted:
        assert journaled[digest] == 1, f"{digest} journaled {journaled[digest]} times"
        assert announced[digest] == 1, f"{digest} announced {announced[digest]} times"
    for digest in pending:
        assert journaled[digest] == 0 and announced[digest] == 0, f"{digest} half admitted"
    return len(admitted)


def queue_seeded_pulses(
    rt: Runtime, count: int, *, strength: float, k: int, max_hops: int, decay_per_hop: float
) -> None:
    """`count` Reward pulses queued as pulse-emit does, each seeded at a stored chunk in turn
    (no text to embed), with the given shape."""
    seeds = [
        str(r[0])
        for r in rt.db.fetch_all(
            "SELECT content_hash FROM observations WHERE embedding IS NOT NULL "
            "AND type != 'efficacy'"
        )
    ]
    for n in range(count):
        request = PulseRequest(
            text="", kind=PulseKind.REWARD, strength=strength, sigma=0.5, k=k,
            max_hops=max_hops, decay_per_hop=decay_per_hop, ttl_s=86_400.0, reason="",
            nonce=str(n), seed_chunk=seeds[n % len(seeds)],
        )  # fmt: skip
        emit_pulse(rt, request)
