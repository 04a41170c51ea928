"""Many lightweight log clients in one process against one SeaweedFS: what a reader pays.

No daemons: each client is the log layer alone (`Zeitgeist`, signing and verifying, on the
S3 backend). Every simulated cycle each of N clients publishes one small signed segment;
then `sample` readers, each with a backend of its own whose requests are counted, poll and
read every new segment, as a daemon's scan does: from roll-ups when they are on (one
client, also counted, holds the roll-up lease and writes them), else one GET each. Time is
simulated (the clients' wall clock steps a cycle interval per cycle); the requests are real.
The writers share one backend: what a peer's publishing costs (two PUTs: claim and
segment) does not depend on N.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Final

import blake3

from dreamcycle.zeitgeist.entries import ReconsolidateEntry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.object_keys import parse_segment_key
from dreamcycle.zeitgeist.s3 import S3Backend
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from scripts.local_servers import start_seaweedfs

INTERVAL_MS: Final = 30_000
WINDOW_MS: Final = 60_000
START_MS: Final = 1_800_000_000_000


class SimulatedWall:
    def __init__(self) -> None:
        self.ms = START_MS

    def __call__(self) -> int:
        return self.ms


def _log(
    backend: S3Backend, name: str, wall: SimulatedWall, keyring: Keyring, signer: Signer
) -> Zeitgeist:
    return Zeitgeist(
        backend,
        name,
        HybridLogicalClock(wall),
        wall_ms=wall,
        window_ms=WINDOW_MS,
        signer=signer,
        verifier=Verifier(keyring, strict=True),
    )


def _entry(name: str, cycle: int, wall: SimulatedWall) -> ReconsolidateEntry:
    digest = blake3.blake3(f"{name} {cycle}".encode()).hexdigest()
    return ReconsolidateEntry(
        hlc=hlc_from_ms(wall.ms), origin=name, content_hash=digest, changes={"title": name}
    )


def _counted(backend: S3Backend) -> dict[str, int]:
    counts = backend.requests.snapshot()
    backend.requests.reset()
    return counts


def simulate_one(
    server: Any, clients: int, sample: int, cycles: int, rollups: bool
) -> dict[str, Any]:
    prefix = f"sim-{clients}-{'on' if rollups else 'off'}-{time.monotonic_ns()}"
    wall = SimulatedWall()
    names = [f"c{i:04d}" for i in range(clients)]
    signers = {name: Signer(name, generate_key()) for name in names}
    keyring = Keyring.of([s.trusted_key() for s in signers.values()])
    shared = server.backend(prefix)
    writers = [_log(shared, name, wall, keyring, signers[name]) for name in names]
    reader_backends = [server.backend(prefix) for _ in range(sample)]
    readers = [
        _log(backend, names[i + 1], wall, keyring, signers[names[i + 1]])
        for i, backend in enumerate(reader_backends)
    ]
    holder_backend = server.backend(prefix)
    holder = _log(holder_backend, names[0], wall, keyring, signers[names[0]])
    if rollups:
        for log in (*readers, holder):
            log.configure_rollups(wait_ms=2 * INTERVAL_MS)
    applied: list[set[str]] = [set() for _ in (*readers, holder)]
    cursors = [0 for _ in (*readers, holder)]
    totals = {"list": 0, "get": 0, "put": 0, "writer_get": 0, "read_s": 0.0}
    for cycle in range(cycles):
        wall.ms += INTERVAL_MS
        _counted(shared)
        for log in writers:
            log.publish(log.prepare([_entry(log.peer_id, cycle, wall)], cycle))
        totals["put"] += _counted(shared).get("PutObject", 0) / clients
        wall.ms += 1_000
        # The roll-up writer reads what is new and rolls it up (it takes the lease the
        # first time: nobody rolls up yet).
        cursors[-1] = _read(holder, applied[-1], cursors[-1])
        holder.roll_up(wall.ms)
        totals["writer_get"] += _counted(holder_backend).get("GetObject", 0)
        wall.ms += 1_000
        for number, (reader, backend) in enumerate(zip(readers, reader_backends, strict=True)):
            _counted(backend)
            started = time.perf_counter()
            cursors[number] = _read(reader, applied[number], cursors[number])
            totals["read_s"] += (time.perf_counter() - started) / sample
            counts = _counted(backend)
            totals["list"] += counts.get("ListObjectsV2", 0) / sample
            totals["get"] += counts.get("GetObject", 0) / sample
    return {
        "clients": clients,
        "rollups": "on" if rollups else "off",
        **{key: value / cycles for key, value in totals.items()},
    }


def _read(log: Zeitgeist, applied: set[str], cursor: int) -> int:
    """A scan from `cursor`: poll, what roll-ups hold, the rest fetched (a reader that waits
    for a roll-up reads it next cycle); the cursor after it."""
    keys = [k for k in log.poll(cursor, applied.__contains__) if f"-{log.peer_id}-" not in k]
    rolled = log.read_rollups(keys)
    applied.update(rolled.segments)
    for key in keys:
        if key not in rolled.segments and key not in rolled.deferred:
            log.fetch(key)
            applied.add(key)
    read = [parse_segment_key(k).hlc for k in keys if k in applied]
    waiting = [parse_segment_key(k).hlc for k in rolled.deferred]
    position = max([cursor, *read])
    return min([position, *waiting]) if waiting else position


def simulate(sizes: list[int], sample: int, cycles: int) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix="mesh-simulate-") as scratch:
        server = start_seaweedfs(Path(scratch) / "weed")
        try:
            rows = []
            for clients in sizes:
                for rollups in (False, True):
                    row = simulate_one(server, clients, min(sample, clients - 1), cycles, rollups)
                    print(row, flush=True)
                    rows.append(row)
            return rows
        finally:
            server.stop()
