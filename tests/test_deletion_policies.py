"""Deletion policies against real sweeps: `never` and `manual_only` chunks are never swept
(only an explicit tombstone retracts a `manual_only` one), `auto_prune` chunks are."""

from __future__ import annotations

from pathlib import Path

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.store.database import NewObservation
from tests.test_daemon_learning import (
    DAY_MS,
    START_MS,
    cold_hashes,
    corpus,
    open_runtime,
    sweep_every_cycle,
)

#: One chunk in four is never swept, one in four manual only, the rest pruned automatically.
POLICIES = ("never", "manual_only", "auto_prune", "auto_prune")


def test_only_auto_prune_chunks_are_swept_and_manual_only_ones_yield_to_a_tombstone(
    tmp_path: Path,
) -> None:
    clock = ManualClock(START_MS)
    rt = open_runtime(tmp_path, clock)
    try:
        chunks = [
            NewObservation(content=text, deletion_policy=POLICIES[n % len(POLICIES)])
            for n, text in enumerate(corpus())
        ]
        ingest(rt, [chunks])
        policy_of = {
            str(h): str(p)
            for h, p in rt.db.fetch_all("SELECT content_hash, deletion_policy FROM observations")
        }
        peer = rt.open_peer()
        try:
            run_cycle_blocking(peer)
            sweep_every_cycle(peer)
            swept: set[str] = set()
            for _ in range(5):
                clock.advance(DAY_MS)
                run_cycle_blocking(peer)
                swept |= cold_hashes(peer)
            assert swept, "the sweep moved nothing: the test proves nothing"
            assert {policy_of[h] for h in swept} == {"auto_prune"}

            manual = min(h for h, p in policy_of.items() if p == "manual_only")
            emit_tombstone(rt, digest=manual, reason="wrong", ttl_s=3600.0)
            clock.advance(1_000)
            run_cycle_blocking(peer)
            obs = peer.db.observation_by_hash(manual)
            assert obs is not None and obs.deleted_at is not None
        finally:
            peer.close()
    finally:
        rt.close()
