"""The injectable clock: its kinds, its config, and a daemon that lives on simulated time."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.clock import (
    ClockFileError,
    FileClock,
    ManualClock,
    SystemClock,
    clock_from_config,
)
from dreamcycle.daemon.config import Config, ConfigError, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.database import NewObservation, initial_salience
from dreamcycle.store.timefmt import iso_from_ms

#: 2023-11-14T22:13:20Z: far enough from today that a stray system-time read shows.
START_MS: Final = 1_700_000_000_000
TWO_DAYS_MS: Final = 2 * 86_400_000
REPO: Final = Path(__file__).resolve().parents[1]
#: Packages that must take "now" from the injected clock.
CLOCKED_PACKAGES: Final = ("daemon", "zeitgeist", "store", "pulses")
SYSTEM_TIME_READS: Final = ("time.time(", "time.time_ns(", "datetime.now(")


# ---- ManualClock --------------------------------------------------------------------------


def test_manual_clock_moves_only_when_told() -> None:
    clock = ManualClock(START_MS)
    assert clock.now_ms() == START_MS
    clock.advance(250)
    clock.advance(0)
    assert clock.now_ms() == START_MS + 250
    clock.set(START_MS - 1_000)  # a clock stepped back is a case tests need
    assert clock.now_ms() == START_MS - 1_000


def test_manual_clock_refuses_a_negative_step_and_a_time_before_the_epoch() -> None:
    clock = ManualClock(START_MS)
    with pytest.raises(ValueError, match="advance step"):
        clock.advance(-1)
    with pytest.raises(ValueError, match=">= 0"):
        clock.set(-1)
    with pytest.raises(ValueError, match="start_ms"):
        ManualClock(-5)
    assert clock.now_ms() == START_MS


def test_manual_clock_loses_no_step_between_threads() -> None:
    clock = ManualClock(0)

    def tick() -> None:
        for _ in range(1_000):
            clock.advance(1)

    threads = [threading.Thread(target=tick) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert clock.now_ms() == 8_000


# ---- FileClock ----------------------------------------------------------------------------


def test_file_clock_reads_the_time_written_by_another_process(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    path.write_text(f" {START_MS}\n", encoding="utf-8")
    clock = FileClock(path)
    assert clock.now_ms() == START_MS
    FileClock(path).set(START_MS + TWO_DAYS_MS)  # as a second process would
    assert clock.now_ms() == START_MS + TWO_DAYS_MS


def test_file_clock_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere"
    with pytest.raises(ClockFileError, match=f"{re.escape(str(path))} does not exist"):
        FileClock(path).now_ms()


@pytest.mark.parametrize("text", ["", "tomorrow", "12.5", "-3"])
def test_file_clock_names_a_garbled_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "clock"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ClockFileError, match=re.escape(f"clock file {path} holds")):
        FileClock(path).now_ms()


# ---- config -----------------------------------------------------------------------------


def test_the_default_clock_is_the_system_clock() -> None:
    assert isinstance(clock_from_config(Config()), SystemClock)


def test_clock_config_from_the_environment_gives_a_file_clock(tmp_path: Path) -> None:
    path = tmp_path / "clock"
    path.write_text(str(START_MS), encoding="utf-8")
    config = load_config(
        environ={"DREAMCYCLE_CLOCK_SOURCE": "file", "DREAMCYCLE_CLOCK_FILE": str(path)}
    )
    clock = clock_from_config(config)
    assert isinstance(clock, FileClock)
    assert clock.now_ms() == START_MS


def test_clock_source_must_be_known() -> None:
    with pytest.raises(ConfigError, match=r"DREAMCYCLE_CLOCK_SOURCE: clock\.source must be one"):
        load_config(environ={"DREAMCYCLE_CLOCK_SOURCE": "sundial"})


def test_clock_file_is_required_with_a_file_source() -> None:
    with pytest.raises(ConfigError, match=r"clock\.file must be set when clock\.source = 'file'"):
        load_config(overrides={"clock.source": "file"}, environ={})


def test_a_missing_clock_file_stops_the_runtime_before_it_opens(tmp_path: Path) -> None:
    config = load_config(
        environ={},
        overrides={
            "peer.data_dir": str(tmp_path / "data"),
            "clock.source": "file",
            "clock.file": str(tmp_path / "clock"),
        },
    )
    with pytest.raises(ClockFileError, match="does not exist"):
        Runtime.open(config)
    assert not (tmp_path / "data").exists()


# ---- a daemon on simulated time ---------------------------------------------------------


def test_cycles_and_decay_follow_a_manual_clock(tmp_path: Path) -> None:
    config = load_config(
        environ={},
        overrides={
            "peer.id": "a",
            "peer.data_dir": str(tmp_path / "a"),
            "zeitgeist.dir": str(tmp_path / "zeitgeist"),
            "metrics.listen": "",
            # One cycle accounts for the whole step (tests/test_clock_jumps.py: the bound).
            "clock.max_step_s": TWO_DAYS_MS / 1000,
        },
    )
    clock = ManualClock(START_MS)
    rt = Runtime.open(config, clock=clock)
    try:
        ingest(
            rt,
            [
                [
                    NewObservation(content="Exceptions propagate up the call stack."),
                    NewObservation(content="A module is imported once per interpreter."),
                ]
            ],
        )
        peer = rt.open_peer()
        try:
            run_cycle_blocking(peer)
            clock.advance(TWO_DAYS_MS)
            run_cycle_blocking(peer)
        finally:
            peer.close()
        later = START_MS + TWO_DAYS_MS
        cycles = rt.db.conn.execute(
            "SELECT started_at, finished_at, status FROM cycles ORDER BY id"
        ).fetchall()
        assert [tuple(row) for row in cycles] == [
            (iso_from_ms(START_MS), iso_from_ms(START_MS), "done"),
            (iso_from_ms(later), iso_from_ms(later), "done"),
        ]
        decayed = rt.db.conn.execute(
            "SELECT last_decay_ts, salience FROM observations WHERE type != 'efficacy'"
        ).fetchall()
        assert len(decayed) == 2
        expected = initial_salience(5) * 0.5 ** (
            TWO_DAYS_MS / 1000 / config.downscale.half_life("note")
        )
        for last_decay_ts, salience in decayed:
            assert last_decay_ts == iso_from_ms(later)
            assert salience == pytest.approx(expected)
    finally:
        rt.close()


# ---- one reader of the system time --------------------------------------------------------


def test_only_daemon_clock_reads_the_system_time() -> None:
    clock_module = REPO / "daemon" / "clock.py"
    assert "time.time_ns(" in clock_module.read_text(encoding="utf-8")  # the check can see
    readers = [
        f"{path.relative_to(REPO)}: {pattern}"
        for package in CLOCKED_PACKAGES
        for path in sorted((REPO / package).rglob("*.py"))
        if path != clock_module
        for pattern in SYSTEM_TIME_READS
        if pattern in path.read_text(encoding="utf-8")
    ]
    assert readers == [], "read the Runtime's clock instead of the system time"
