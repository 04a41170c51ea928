"""Five daemons (separate processes) on one S3 server, a few hundred pulses and outcomes.

The small version of scripts/mesh_run.py: every peer holds the same chunks; pulses and
outcomes are queued on all of them, in a burst and then a few at a time while the daemons
run. Every pulse any peer originated (outcomes become pulses on the peer that made the
decision) must be applied by every peer exactly once, each peer's salience must be what
replaying its own order gives bit for bit, and all peers must agree bit for bit
whatever order they applied the pulses in (the strengths keep salience away from the
clamps, and changes move salience by whole steps that add exactly). Roll-ups are on (the default): the peers must have read segments from
them.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import pytest

from scripts.local_servers import RunningS3
from scripts.mesh_check import (
    Settled,
    agreement,
    compare_replicas,
    exactly_once,
    journal_pulse_order,
    journal_pulses,
    replay,
)
from scripts.mesh_load import Emitter, documentation_rows, write_rows
from scripts.mesh_peers import MeshPeer, mesh_settings

pytestmark = pytest.mark.slow

PEERS: Final = 5
CHUNKS: Final = 40
BURST: Final = 200
STEADY: Final = 100
STEADY_BATCHES: Final = 10
#: One outcome in this many items; the rest are pulses.
OUTCOME_EVERY: Final = 5
INTERVAL_S: Final = 1.0
WINDOW_S: Final = 3.0
CONVERGE_TIMEOUT_S: Final = 180.0
#: Polls (0.2 s apart) the originated pulses must stay the same once queues are empty.
SETTLE_POLLS: Final = 5
START_TIMEOUT_S: Final = 180.0


@pytest.fixture
def mesh(s3_server: RunningS3, tmp_path: Path) -> Iterator[list[MeshPeer]]:
    settings = mesh_settings(
        s3_server.bucket,
        f"scale-{uuid.uuid4().hex[:12]}",
        s3_server.endpoint_url,
        {"AWS_ACCESS_KEY_ID": s3_server.access_key_id,
         "AWS_SECRET_ACCESS_KEY": s3_server.secret_access_key},
    ) | {
        "DREAMCYCLE_ZEITGEIST_WINDOW_S": str(WINDOW_S),
        "DREAMCYCLE_ZEITGEIST_COMPACTION_INTERVAL_S": "10",
        "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
        "DREAMCYCLE_SWEEP_ENABLED": "false",
    }  # fmt: skip
    peers = [MeshPeer(tmp_path, f"m{i}", dict(settings)) for i in range(PEERS)]
    chunks = write_rows(tmp_path / "chunks.jsonl", documentation_rows(CHUNKS))
    with ThreadPoolExecutor(PEERS) as pool:
        list(pool.map(lambda p: p.command("ingest --no-embed", str(chunks)), peers))
    for peer in peers:
        peer.start(INTERVAL_S)
    yield peers
    for peer in peers:
        if peer.running():
            peer.kill()


def admitted(peer: MeshPeer) -> bool:
    if peer.cycles_done() == 0:
        return False
    rows = peer.query("SELECT count(*) FROM observations WHERE admitted_seq IS NOT NULL")
    return bool(rows[0][0] >= CHUNKS)


def wait_for(probe: Callable[[], bool], what: str, timeout_s: float, peers: list[MeshPeer]) -> None:
    deadline = time.monotonic() + timeout_s
    while not probe():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}\n" + "\n".join(
                p.log_tail() for p in peers))  # fmt: skip
        time.sleep(0.2)


def test_five_daemons_apply_every_pulse_once_and_agree(
    mesh: list[MeshPeer], tmp_path: Path
) -> None:
    wait_for(lambda: all(admitted(p) for p in mesh), "every peer to admit", START_TIMEOUT_S, mesh)
    emitters = [Emitter(peer, seed=number) for number, peer in enumerate(mesh)]
    try:
        sent = 0

        def emit(count: int) -> None:
            nonlocal sent
            for _ in range(count):
                emitter = emitters[sent % PEERS]
                emitter.outcome() if sent % OUTCOME_EVERY == 0 else emitter.pulse()
                sent += 1

        emit(BURST)
        for _ in range(STEADY_BATCHES):
            emit(STEADY // STEADY_BATCHES)
            time.sleep(INTERVAL_S / 2)
    finally:
        for emitter in emitters:
            emitter.close()

    settled = Settled(lambda: mesh, SETTLE_POLLS)
    wait_for(settled, "every pulse on every peer", CONVERGE_TIMEOUT_S, mesh)
    expected = settled.expected
    assert len(expected) >= BURST + STEADY - (BURST + STEADY) // OUTCOME_EVERY
    for peer in mesh:
        report = exactly_once(peer, expected)
        assert report.exactly_once, report

    # Bit for bit: each peer reproduces its own order, and every order gives one salience.
    orders = {p.peer_id: journal_pulse_order(p) for p in mesh}
    pulses = journal_pulses(mesh[0])
    for peer in mesh:
        assert replay(peer, orders[peer.peer_id], pulses, tmp_path).salience == peer.salience()
    for other in mesh[1:]:
        comparison = compare_replicas(mesh[0], other, tmp_path)
        assert comparison.explained_by_clamping == 0, comparison
        assert other.salience() == mesh[0].salience()
    agreed = agreement(mesh)
    assert agreed.identical == agreed.common >= CHUNKS, agreed

    # The peers read others' segments from roll-ups.
    from_rollups = sum(
        json.loads(phases).get("scan", {}).get("from_rollups", 0)
        for peer in mesh
        for (phases,) in peer.query("SELECT phases_json FROM cycles")
    )
    assert from_rollups > 0
    for peer in mesh:
        assert peer.stop() == 0, peer.log_tail()
