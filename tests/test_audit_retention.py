"""The journal's retention: checkpoints equal replay, pruning keeps rebuild bit for bit.

One store on a manual clock (real chunks, the real embedder and database) lives through
admissions, Reward and Decay pulses, downscales, a tombstone, a sweep into the cold tier,
a revival and a pin, with a checkpoint at most every two days and a retention of three.
Each checkpoint must hold exactly what replaying the journal up to its step produces;
once old steps are deleted, rebuild starts from the checkpoint and reproduces the live
salience exactly, and explain says from when it holds history.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from dreamcycle.daemon.api import model_fields
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.intake.emit_revisions import emit_revision
from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.rebuild import rebuild, replay_steps
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.store import checkpoints, tiers
from dreamcycle.store.database import NewObservation
from dreamcycle.store.timefmt import ms_from_iso
from tests.daemon_helpers import documentation_chunks

START_MS = 1_800_000_000_000
DAY_MS = 86_400_000
CHUNKS = 40


def _config(root: Path) -> Config:
    return load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(root / "data"),
            "peer.id": "audit",
            "metrics.listen": "",
            "zeitgeist.dir": str(root / "zeitgeist"),
            "sweep.grace_s": 0.0,
            "sweep.min_population": 10,
            "sweep.percentile": 30.0,
            "efficacy.enabled": False,
            "audit.checkpoint_interval_s": 2 * DAY_MS / 1000,
            "audit.retention_s": 3 * DAY_MS / 1000,
            # Cycles days apart account for the whole gap (the bound: tests/test_clock_jumps.py).
            "clock.max_step_s": 4 * DAY_MS / 1000,
        },
    )


def _pulse(peer: Peer, text: str, kind: PulseKind, strength: float) -> None:
    emit_pulse(
        peer.runtime,
        PulseRequest(
            text=text,
            kind=kind,
            strength=strength,
            sigma=0.5,
            k=4,
            max_hops=2,
            decay_per_hop=0.2,
            ttl_s=30 * DAY_MS / 1000,
            reason="audit test",
        ),
    )


def _cycle(peer: Peer, clock: ManualClock, days: float) -> dict[str, object]:
    clock.advance(int(days * DAY_MS))
    audit: dict[str, object] = run_cycle_blocking(peer).stats["promote"]["audit"]
    return audit


def _assert_checkpoint_is_replay(peer: Peer, seq: int) -> None:
    written = checkpoints.checkpoint_at(peer.db, seq)
    assert written is not None
    replayed = replay_steps(peer.runtime, until_seq=seq).chunks()
    assert written.chunks == replayed
    assert {c.tier for c in written.chunks} >= {"live", "tombstoned"}


@pytest.fixture(scope="module")
def lived(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Peer, ManualClock]]:
    root = tmp_path_factory.mktemp("audit")
    clock = ManualClock(START_MS)
    rt = Runtime.open(_config(root), clock=clock)
    items = [
        NewObservation(content=c["content"], title=c["title"], importance=i % 11)
        for i, c in enumerate(documentation_chunks(("assert", "for", "while", "try"), CHUNKS))
    ]
    ingest(rt, [items])
    peer = rt.open_peer()
    first = run_cycle_blocking(peer).stats["promote"]["audit"]
    assert first["checkpoint_seq"] == checkpoints.journal_head(rt.db)  # the first cycle's

    hashes = [str(r[0]) for r in rt.db.fetch_all("SELECT content_hash FROM observations")]
    _pulse(peer, "an assert statement raises AssertionError", PulseKind.REWARD, 0.6)
    _pulse(peer, "the while loop repeats", PulseKind.DECAY, 0.4)
    emit_tombstone(rt, digest=hashes[3], reason="wrong", ttl_s=3600.0)
    emit_revision(rt, digest=hashes[5], changes={"pin_floor": 0.4}, nonce="pin")
    assert "checkpoint_seq" not in _cycle(peer, clock, 1.0)  # within the interval
    swept = _cycle(peer, clock, 1.0)  # the sweep is due, and so is a checkpoint
    cold = [r[0] for r in rt.db.fetch_all("SELECT id FROM observations WHERE cold_at IS NOT NULL")]
    assert cold, "the sweep moved nothing to the cold tier"
    _assert_checkpoint_is_replay(peer, int(swept["checkpoint_seq"]))  # type: ignore[call-overload]

    with rt.db.transaction():
        tiers.request_revival(rt.db, int(cold[0]), now_ms=clock.now_ms())
    _pulse(peer, "try and except handle exceptions", PulseKind.REWARD, 0.5)
    _cycle(peer, clock, 0.5)
    yield peer, clock
    peer.close()
    rt.close()


def test_old_steps_go_only_up_to_a_checkpoint_and_rebuild_still_replays_bit_for_bit(
    lived: tuple[Peer, ManualClock],
) -> None:
    peer, clock = lived
    db = peer.db
    assert checkpoints.pruned_through(db) == 0
    whole = int(db.fetch_one("SELECT count(*) FROM journal")[0])
    kept_pulses = int(db.fetch_one("SELECT count(*) FROM applied_pulses")[0])

    # The first checkpoint's steps are now older than the retention: they go.
    audit = _cycle(peer, clock, 1.0)
    first = int(db.fetch_one("SELECT min(seq) FROM journal_checkpoints")[0])
    assert audit["pruned_through_seq"] == first == checkpoints.pruned_through(db)
    assert int(db.fetch_one("SELECT min(seq) FROM journal")[0]) == first + 1
    assert 0 < int(audit["pruned_steps"]) < whole  # type: ignore[call-overload]
    assert int(db.fetch_one("SELECT count(*) FROM applied_pulses")[0]) == kept_pulses
    # The admissions are gone, the pulses, sweep and revival after the cut are not.
    kinds = {str(r[0]) for r in db.fetch_all("SELECT DISTINCT kind FROM journal")}
    assert "chunk" not in kinds and {"pulse", "sweep", "revive", "downscale"} <= kinds

    replayed = replay_steps(peer.runtime)
    assert replayed.started_after == first
    assert replayed.chunks() == checkpoints.current_chunks(db)
    report = rebuild(peer.runtime)
    assert (report.changed, report.max_difference) == (0, 0.0)

    # A later prune drops the older checkpoints with the steps.
    _cycle(peer, clock, 2.0)
    _cycle(peer, clock, 3.5)
    assert checkpoints.pruned_through(db) > first
    assert int(db.fetch_one("SELECT min(seq) FROM journal_checkpoints")[0]) == (
        checkpoints.pruned_through(db)
    )
    assert rebuild(peer.runtime).changed == 0


def test_explain_says_from_when_it_holds_history(lived: tuple[Peer, ManualClock]) -> None:
    peer, clock = lived
    if not checkpoints.pruned_through(peer.db):
        _cycle(peer, clock, 1.0)
    ops = Operations(peer.runtime, embedder=peer.embedder)
    ops.attach(peer)
    try:
        digest = str(peer.db.fetch_one("SELECT content_hash FROM observations LIMIT 1")[0])
        explained = ops.explain(model_fields.RefRequest(ref=digest))
    finally:
        ops.close()
    oldest = int(peer.db.fetch_one("SELECT at_ms FROM journal ORDER BY seq LIMIT 1")[0])
    assert explained.history_since_ms == oldest
    assert all(step.at_ms >= oldest for step in explained.history)
    assert all(step.step != "chunk" for step in explained.history)  # its admission went


def test_a_checkpoint_holds_each_chunks_state_as_stored_whatever_its_dates_format(
    tmp_path: Path,
) -> None:
    rt = Runtime.open(_config(tmp_path), clock=ManualClock(START_MS))
    try:
        db = rt.db
        with db.transaction():
            added = db.add_observations(
                [NewObservation(content=f"chunk {i}", kind="fact") for i in range(4)],
                now_ms=START_MS,
            )
            rowids = [a.rowid for a in added]
            db.conn.execute("UPDATE observations SET admitted_seq = 1")
            db.write_salience({rowids[1]: 0.25})
            # Dates as engram wrote them: a basic-format one only Python's parser reads.
            db.conn.execute(
                "UPDATE observations SET created_at = '20270115T080000Z' WHERE id = ?",
                (rowids[2],),
            )
            db.conn.execute(
                "UPDATE observations SET last_decay_ts = '2027-01-15 08:00:00.250' WHERE id = ?",
                (rowids[3],),
            )
            tiers.move_to_cold(db, [rowids[0]], reason="test", now_ms=START_MS)
            db.journal(JournalKind.SWEEP, "h", {"rowid": rowids[0]}, now_ms=START_MS)
            written = checkpoints.write_checkpoint(db, now_ms=START_MS + 1)
        assert written is not None and written.chunks == 4
        held = checkpoints.checkpoint_at(db, written.seq)
        assert held is not None
        assert held.chunks == checkpoints.current_chunks(db)
        by_id = {chunk.chunk_id: chunk for chunk in held.chunks}
        assert [by_id[r].tier for r in rowids] == ["cold", "live", "live", "live"]
        assert by_id[rowids[1]].salience == 0.25
        assert by_id[rowids[0]].decay_from_ms == START_MS
        assert by_id[rowids[2]].decay_from_ms == ms_from_iso("2027-01-15T08:00:00Z")
        assert by_id[rowids[3]].decay_from_ms == ms_from_iso("2027-01-15T08:00:00.250Z")
    finally:
        rt.close()
