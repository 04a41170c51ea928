"""A wall clock stepped forward by days and back again: what it may and may not do.

Decay and the sweep measure accounted time (daemon/cycle/accounted.py), which follows the clock
by at most `clock.max_step_s` per cycle and never back; the HLC comes back with the wall
clock (daemon/cycle/hlc_recovery.py), and this host's own entries stamped while it was ahead
still apply here.

One file: each test follows the same jump through a different part of the daemon, from one
template of chunks embedded once per module.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.cli.main import main
from dreamcycle.daemon.clock import FileClock, ManualClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.daemon.memory.forgetting import move_to_cold
from dreamcycle.daemon.memory.rebuild import replay
from dreamcycle.daemon.runtime import HLC_META_KEY, Peer, Runtime
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.pulses.sweep import SweepPlan
from dreamcycle.store.database import NewObservation
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import TombstoneEntry, encode_segment
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import DEFAULT_MAX_FUTURE_MS, Heartbeat
from dreamcycle.zeitgeist.object_keys import heartbeat_key, segment_key
from tests.daemon_helpers import Peer as ProcessPeer
from tests.daemon_helpers import documentation_chunks, emitted_id, wait_until

START_MS: Final = 1_700_000_000_000
HOUR_MS: Final = 3_600_000
DAY_MS: Final = 24 * HOUR_MS
JUMP_MS: Final = 3 * DAY_MS
CHUNKS: Final = 80
TOPICS: Final = ("assert", "for", "while", "try", "if", "with", "class", "function", "import")


def _config(data_dir: Path, **overrides: Any) -> Config:
    return load_config(
        None,
        environ={},
        overrides={
            "peer.id": "a",
            "peer.data_dir": str(data_dir),
            "zeitgeist.dir": str(data_dir.parent / f"{data_dir.name}-zeitgeist"),
            "metrics.listen": "",
            "efficacy.enabled": False,
            "signing.mode": "permissive",
            # Young is two days here: a three-day jump would make every chunk old enough.
            "sweep.grace_s": 2 * DAY_MS / 1000,
            "sweep.min_population": 10,
            "sweep.cold_retention_s": 2 * DAY_MS / 1000,
            **overrides,
        },
    )


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """80 chunks ingested at START_MS (embedded once for every test)."""
    data_dir = tmp_path_factory.mktemp("jumps") / "template"
    rt = Runtime.open(_config(data_dir), clock=ManualClock(START_MS))
    try:
        ingest(
            rt,
            [
                [
                    NewObservation(content=c["content"], title=c["title"], importance=i % 11)
                    for i, c in enumerate(documentation_chunks(TOPICS, CHUNKS))
                ]
            ],
        )
    finally:
        rt.close()
    return data_dir


@contextmanager
def _peer(template: Path, data_dir: Path, clock: ManualClock, **overrides: Any) -> Iterator[Peer]:
    shutil.copytree(template, data_dir)
    with _peer_again(data_dir, clock, **overrides) as peer:
        yield peer


@contextmanager
def _peer_again(data_dir: Path, clock: ManualClock, **overrides: Any) -> Iterator[Peer]:
    rt = Runtime.open(_config(data_dir, **overrides), clock=clock)
    try:
        peer = rt.open_peer()
        try:
            yield peer
        finally:
            peer.close()
    finally:
        rt.close()


def _scalar(peer: Peer, sql: str, params: tuple[Any, ...] = ()) -> Any:
    row = peer.db.conn.execute(sql, params).fetchone()
    assert row is not None, sql
    return row[0]


def _cycle(peer: Peer) -> dict[str, dict[str, Any]]:
    return run_cycle_blocking(peer).stats


def _salience(peer: Peer) -> dict[int, float]:
    return {row.rowid: row.salience for row in peer.db.salience_rows()}


def _cold(peer: Peer) -> int:
    return int(_scalar(peer, "SELECT count(*) FROM observations WHERE cold_at IS NOT NULL"))


def _one_step_factor(peer: Peer) -> dict[int, float]:
    """What one decay step of max_step_s multiplies each chunk's salience by."""
    half_lives = HalfLives.from_config(peer.config.downscale)
    max_step_s = peer.config.clock.max_step_s
    return {
        int(rowid): 0.5 ** (max_step_s / half_lives.of(str(kind), float(stability)))
        for rowid, kind, stability in peer.db.conn.execute(
            "SELECT id, kind, stability FROM observations WHERE type != 'efficacy'"
        )
    }


def _assert_replay_matches(peer: Peer) -> None:
    state, _index = replay(peer.runtime)
    assert state.snapshot() == _salience(peer)


# ---- decay and the sweep ------------------------------------------------------------------


def test_a_jump_ahead_and_back_sweeps_nothing_and_decays_one_bounded_step(
    template: Path, tmp_path: Path
) -> None:
    jumped_clock, steady_clock = ManualClock(START_MS), ManualClock(START_MS)
    with (
        _peer(template, tmp_path / "jumped", jumped_clock) as jumped,
        _peer(template, tmp_path / "steady", steady_clock) as steady,
    ):
        for peer, clock in ((jumped, jumped_clock), (steady, steady_clock)):
            for _ in range(3):  # an hour apart: within the bound
                _cycle(peer)
                clock.advance(HOUR_MS)
            clock.set(START_MS + 2 * HOUR_MS)
        before = _salience(jumped)
        assert before == _salience(steady)

        jumped_clock.set(START_MS + 2 * HOUR_MS + JUMP_MS)
        stats = _cycle(jumped)
        assert stats["percentile_sweep"].get("skipped") == "interval"
        assert _cold(jumped) == 0
        assert stats["downscale"]["accounted_lag_ms"] == JUMP_MS - HOUR_MS
        factor = _one_step_factor(jumped)
        during = _salience(jumped)
        for rowid, value in during.items():
            assert value == pytest.approx(before[rowid] * factor[rowid], rel=1e-12)

        # Back: nothing decays until the clock passes the hour already accounted.
        jumped_clock.set(START_MS + 2 * HOUR_MS + 30_000)
        steady_clock.set(START_MS + 2 * HOUR_MS + 30_000)
        _cycle(jumped)
        _cycle(steady)
        assert _salience(jumped) == during
        assert _cold(jumped) == 0
        steady_now = _salience(steady)
        for rowid, value in _salience(jumped).items():
            assert steady_now[rowid] * factor[rowid] * (1 - 1e-12) <= value <= steady_now[rowid]

        # Once the clock has caught up, the jump cost nothing: decay composes.
        for hours in (3, 4):
            for peer, clock in ((jumped, jumped_clock), (steady, steady_clock)):
                clock.set(START_MS + hours * HOUR_MS)
                _cycle(peer)
        caught_up, steady_now = _salience(jumped), _salience(steady)
        assert caught_up.keys() == steady_now.keys()
        for rowid, value in caught_up.items():
            assert value == pytest.approx(steady_now[rowid], rel=1e-12)
        assert value < before[rowid]  # the check can see decay
        _assert_replay_matches(jumped)


def test_without_the_bound_the_same_jump_sweeps_young_chunks(
    template: Path, tmp_path: Path
) -> None:
    """The scenario above is one that sweeps when a cycle may account for the whole jump."""
    clock = ManualClock(START_MS)
    with _peer(
        template, tmp_path / "unbounded", clock, **{"clock.max_step_s": 10 * DAY_MS / 1000}
    ) as peer:
        _cycle(peer)
        clock.advance(2 * HOUR_MS)
        _cycle(peer)
        clock.advance(JUMP_MS)
        stats = _cycle(peer)
        assert stats["percentile_sweep"]["cold"] > 0
        assert _cold(peer) == stats["percentile_sweep"]["cold"]


def test_a_jump_back_decays_nothing_and_sweeps_nothing(template: Path, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    with _peer(
        template, tmp_path / "back", clock, **{"sweep.interval_s": 0.0, "sweep.grace_s": 0.0}
    ) as peer:
        for _ in range(3):  # an hour apart: accounted time is the clock's
            _cycle(peer)
            clock.advance(HOUR_MS)
        clock.set(START_MS + 2 * HOUR_MS)
        cold = _cold(peer)
        assert cold > 0  # it sweeps every cycle: the check can see a sweep
        before = _salience(peer)
        decayed_at = peer.db.conn.execute("SELECT id, last_decay_ts FROM observations").fetchall()
        for back_to in (START_MS + 2 * HOUR_MS - JUMP_MS, START_MS + 2 * HOUR_MS + 60_000):
            clock.set(back_to)
            stats = _cycle(peer)
            assert stats["downscale"]["changed"] == 0
            assert stats["percentile_sweep"].get("cold", 0) == 0
            assert _salience(peer) == before
            assert _cold(peer) == cold
            assert (
                peer.db.conn.execute("SELECT id, last_decay_ts FROM observations").fetchall()
                == decayed_at
            )
        _assert_replay_matches(peer)


def test_a_jump_ahead_expires_no_cold_chunk_early(template: Path, tmp_path: Path) -> None:
    clock = ManualClock(START_MS)
    with _peer(template, tmp_path / "retention", clock, **{"sweep.enabled": False}) as peer:
        _cycle(peer)
        chunk = min(_salience(peer))
        plan = SweepPlan(threshold=None, population=0, doomed=(chunk,), skipped_reason=None)
        assert move_to_cold(peer, plan, START_MS) == [chunk]
        clock.set(START_MS + JUMP_MS)  # past the two days of retention, by the clock only
        stats = _cycle(peer)
        assert "expired" not in stats["percentile_sweep"]
        obs = peer.db.observations([chunk])[chunk]
        assert obs.deleted_at is None and obs.cold_at is not None
        for _ in range(47):  # two days of accounted time, an hour per cycle
            _cycle(peer)
        assert peer.db.observations([chunk])[chunk].deleted_at is None
        stats = _cycle(peer)
        assert stats["percentile_sweep"]["expired"] == 1
        assert peer.db.observations([chunk])[chunk].deleted_at is not None


# ---- the hybrid logical clock ---------------------------------------------------------------


def _pulse(peer: Peer, text: str) -> str:
    return emit_pulse(
        peer.runtime,
        PulseRequest(
            text=text,
            kind=PulseKind.REWARD,
            strength=0.3,
            sigma=0.5,
            k=4,
            max_hops=2,
            decay_per_hop=0.2,
            ttl_s=DAY_MS / 1000,
            reason="clock jump test",
        ),
    ).entry_id


def _status(peer: Peer, entry_id: str) -> tuple[str, str | None]:
    row = peer.db.conn.execute(
        "SELECT status, reason FROM seen_entries WHERE entry_id = ?", (entry_id,)
    ).fetchone()
    assert row is not None, f"entry {entry_id} was never applied nor rejected"
    return str(row[0]), row[1]


def _hlc_ms(peer: Peer) -> int:
    return HybridLogicalClock.physical_ms(int(peer.db.get_meta(HLC_META_KEY) or "0"))


def test_after_a_jump_ahead_and_back_own_entries_apply_and_the_hlc_returns(
    template: Path, tmp_path: Path
) -> None:
    clock = ManualClock(START_MS)
    with _peer(template, tmp_path / "hlc", clock) as peer:
        _cycle(peer)
        clock.set(START_MS + JUMP_MS)
        _pulse(peer, "while loops run until the condition is false")
        _cycle(peer)
        assert _hlc_ms(peer) >= START_MS + JUMP_MS
        clock.set(START_MS + 60_000)
        # pulse-emit stamps from the persisted clock: still three days ahead.
        early = _pulse(peer, "assert statements raise AssertionError when false")
        assert (
            HybridLogicalClock.physical_ms(
                int(_scalar(peer, "SELECT hlc FROM outbox WHERE entry_id = ?", (early,)))
            )
            >= START_MS + JUMP_MS
        )
        _cycle(peer)
        assert _status(peer, early) == ("applied", None)
        clock.advance(30_000)
        _cycle(peer)  # the segment of that entry took the clock up again; this one lowers it
        assert _hlc_ms(peer) <= clock.now_ms() + DEFAULT_MAX_FUTURE_MS
        late = _pulse(peer, "a for loop iterates over any iterable")
        late_hlc = int(_scalar(peer, "SELECT hlc FROM outbox WHERE entry_id = ?", (late,)))
        assert HybridLogicalClock.physical_ms(late_hlc) <= clock.now_ms() + DEFAULT_MAX_FUTURE_MS
        _cycle(peer)
        assert _status(peer, late) == ("applied", None)

        # Another peer's entry stamped as far ahead is still refused.
        digest = _scalar(peer, "SELECT content_hash FROM observations LIMIT 1")
        forged = TombstoneEntry(
            hlc=hlc_from_ms(clock.now_ms() + JUMP_MS),
            origin="b",
            content_hash=str(digest),
            reason="from the future",
            collectable_after_ms=None,
            forget_pulse=None,
        )
        backend = DirectoryBackend(peer.config.zeitgeist_dir)
        backend.create(segment_key(hlc_from_ms(clock.now_ms()), "b", 1), encode_segment([forged]))
        clock.advance(30_000)
        _cycle(peer)
        status, reason = _status(peer, forged.id)
        assert status == "rejected" and "allowed skew ahead" in str(reason)
        assert peer.db.observation_by_hash(str(digest)).deleted_at is None  # type: ignore[union-attr]


def test_the_hlc_stays_up_while_a_live_peer_lists_from_ahead(
    template: Path, tmp_path: Path
) -> None:
    """This peer's clock may be the wrong one: a peer that read up to the HLC keeps it."""
    clock = ManualClock(START_MS)
    with _peer(template, tmp_path / "held", clock) as peer:
        _cycle(peer)
        clock.set(START_MS + JUMP_MS)
        _pulse(peer, "while loops run until the condition is false")
        _cycle(peer)
        high = int(peer.db.get_meta(HLC_META_KEY) or "0")
        beat = Heartbeat(
            peer_id="b",
            cursor_hlc=high,
            last_seen_ms=START_MS + JUMP_MS + 60_000,
            index_version=peer.embedder.index_version,
            public_key=None,
            seq=0,
        )
        DirectoryBackend(peer.config.zeitgeist_dir).write_overwrite(
            heartbeat_key("b"), beat.to_bytes()
        )
        clock.set(START_MS + 60_000)
        _cycle(peer)
        assert int(peer.db.get_meta(HLC_META_KEY) or "0") >= high
        assert peer.clock.last >= high


# ---- a daemon process on a file clock -------------------------------------------------------


def test_a_daemon_on_a_file_clock_jumped_ahead_and_back(template: Path, tmp_path: Path) -> None:
    """`dreamcycle run` and `pulse-emit` sharing one clock file that jumps three days ahead
    and back: nothing is swept, and the host's pulse emitted after the jump applies."""
    clock = FileClock(tmp_path / "clock")
    clock.set(START_MS)
    data_dir = tmp_path / "daemon"
    shutil.copytree(template, data_dir)
    peer = ProcessPeer(
        data_dir,
        "a",
        tmp_path / "zeitgeist",
        settings={
            "DREAMCYCLE_CLOCK_SOURCE": "file",
            "DREAMCYCLE_CLOCK_FILE": str(clock.path),
            "DREAMCYCLE_CYCLE_INTERVAL_S": "0.2",
            "DREAMCYCLE_EFFICACY_ENABLED": "false",
            "DREAMCYCLE_SWEEP_GRACE_S": str(2 * DAY_MS / 1000),
            "DREAMCYCLE_SWEEP_MIN_POPULATION": "10",
        },
    )

    def hlc_high() -> int:
        return int(peer.scalar("SELECT value FROM meta WHERE key = ?", (HLC_META_KEY,)))

    def wait_applied(entry_id: str) -> str:
        rows = wait_until(
            lambda: peer.query("SELECT status FROM seen_entries WHERE entry_id = ?", (entry_id,)),
            what=f"entry {entry_id} applied or rejected",
        )
        return str(rows[0][0])

    with peer.start() as daemon:
        daemon.wait_ready()
        wait_until(lambda: peer.cycles_done() >= 2, what="two cycles", context=daemon.log_tail)
        clock.set(START_MS + JUMP_MS)
        ahead = emitted_id(peer.pulse_emit("pulse", "--text", "for loops", "--kind", "reward"))
        assert wait_applied(ahead) == "applied"
        assert HybridLogicalClock.physical_ms(hlc_high()) >= START_MS + JUMP_MS
        clock.set(START_MS + 60_000)
        back = emitted_id(
            peer.pulse_emit("pulse", "--text", "a with statement wraps a block", "--kind", "reward")
        )
        assert wait_applied(back) == "applied"
        assert peer.scalar("SELECT count(*) FROM observations WHERE cold_at IS NOT NULL") == 0
        wait_until(
            lambda: (
                HybridLogicalClock.physical_ms(hlc_high())
                <= START_MS + 60_000 + DEFAULT_MAX_FUTURE_MS
            ),
            what="the HLC back near the wall clock",
            context=daemon.log_tail,
        )
        assert daemon.terminate() == 0


def test_the_sweep_command_counts_grace_in_accounted_time(
    template: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`dreamcycle sweep` under a clock stepped three days ahead dooms nothing young, as
    the daemon's own sweep would not; the same command at the accounted time's own
    distance, once the cycles caught up, does."""
    data_dir = tmp_path / "manual"
    clock = ManualClock(START_MS)
    with _peer(template, data_dir, clock) as peer:
        _cycle(peer)
    clock_file = tmp_path / "clock"

    def doomed_at(now_ms: int) -> int:
        clock_file.write_text(str(now_ms))
        argv = ["sweep", "--dry-run", "--data-dir", str(data_dir), "--peer-id", "a",
                "--zeitgeist-dir", str(tmp_path / "manual-zeitgeist"), "--min-population", "10"]  # fmt: skip
        environ = {"DREAMCYCLE_CLOCK_SOURCE": "file", "DREAMCYCLE_CLOCK_FILE": str(clock_file),
                   "DREAMCYCLE_SWEEP_GRACE_S": str(2 * DAY_MS / 1000),
                   "DREAMCYCLE_SIGNING_MODE": "permissive"}  # fmt: skip
        with pytest.MonkeyPatch.context() as patch:
            for name, value in environ.items():
                patch.setenv(name, value)
            assert main(argv) == 0
        printed = capsys.readouterr().out
        return int(printed.split("doomed ")[1].split()[0])

    assert doomed_at(START_MS + JUMP_MS) == 0
    # The cycles account for three days (an hour each), then the same sweep dooms chunks.
    with _peer_again(data_dir, clock, **{"sweep.enabled": False}) as peer:
        for _ in range(3 * 24 + 1):
            clock.advance(HOUR_MS)
            _cycle(peer)
    assert doomed_at(START_MS + JUMP_MS) > 0
