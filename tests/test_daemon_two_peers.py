"""Two daemon processes sharing one local-directory zeitgeist, each with its own memories."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from tests.daemon_helpers import (
    Daemon,
    Peer,
    documentation_chunks,
    emitted_id,
    nearest,
    pulse_seed,
    side_by_side,
    wait_until,
    write_jsonl,
)

pytestmark = pytest.mark.slow

#: Peer a remembers the debugger and imports, peer b string methods: no chunk in common.
A_TOPICS = ("debugger", "import")
B_TOPICS = ("string-methods",)
CHUNKS_PER_PEER = 90
#: About b's memories only; a holds nothing like it.
DECAY_TEXT = "Return a copy of the string with all the cased characters converted to uppercase."
#: More cycles than any test needs: the daemons are stopped with SIGTERM.
CYCLES = "400"
INTERVAL_S = "0.5"
#: Sweeps and downscale off: salience moves only by the pulses under test.
SETTINGS = {"DREAMCYCLE_SWEEP_ENABLED": "false", "DREAMCYCLE_DOWNSCALE_ENABLED": "false"}
EXIT_OK = 0
EXIT_FATAL = 3
#: How much b's chunks closest to the text must drop (strength 1.0, first hop x0.3).
CLOSE_DROP = 0.1


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> tuple[Peer, Peer]:
    """Peers a and b with their own slices ingested (side by side), before any cycle."""
    root = tmp_path_factory.mktemp("mesh")
    a = Peer(root / "a", "a", root / "zeitgeist", dict(SETTINGS))
    b = Peer(root / "b", "b", root / "zeitgeist", dict(SETTINGS))
    a_file = write_jsonl(root / "a.jsonl", documentation_chunks(A_TOPICS, CHUNKS_PER_PEER))
    b_file = write_jsonl(root / "b.jsonl", documentation_chunks(B_TOPICS, CHUNKS_PER_PEER))
    side_by_side(
        [
            functools.partial(peer.dreamcycle, "ingest", str(path))
            for peer, path in ((a, a_file), (b, b_file))
        ]
    )
    return a, b


@pytest.fixture
def pair(templates: tuple[Peer, Peer], tmp_path: Path) -> tuple[Peer, Peer]:
    """Fresh copies of a and b sharing a fresh zeitgeist directory."""
    zeitgeist = tmp_path / "zeitgeist"
    a, b = templates
    return (
        a.copy_to(tmp_path / "a", zeitgeist_dir=zeitgeist),
        b.copy_to(tmp_path / "b", zeitgeist_dir=zeitgeist),
    )


def start(peer: Peer, name: str = "") -> Daemon:
    daemon = peer.start("--cycles", CYCLES, "--interval", INTERVAL_S, name=name)
    daemon.wait_ready()
    return daemon


def wait_for_pulse(peer: Peer, daemon: Daemon, pulse_id: str) -> str:
    return wait_until(
        lambda: peer.pulse_status(pulse_id),
        what=f"peer {peer.peer_id} to apply pulse {pulse_id}",
        context=daemon.log_tail,
    )


def wait_for_cycle(peer: Peer, daemon: Daemon) -> None:
    wait_until(
        lambda: peer.cycles_done() >= 1,
        what=f"{daemon.name}'s first cycle",
        context=daemon.log_tail,
    )


def test_pulse_emitted_on_one_peer_lowers_the_others_neighbourhood(pair: tuple[Peer, Peer]) -> None:
    a, b = pair
    with start(a) as daemon_a, start(b) as daemon_b:
        wait_for_cycle(a, daemon_a)
        wait_for_cycle(b, daemon_b)
        before = b.salience()
        assert set(before).isdisjoint(a.salience())

        queued = a.pulse_emit(
            "pulse",
            "--text",
            DECAY_TEXT,
            "--kind",
            "decay",
            "--strength",
            "1.0",
            "--reason",
            "stale",
        )
        pulse_id = emitted_id(queued)
        assert wait_for_pulse(b, daemon_b, pulse_id) == "applied"
        assert a.pulse_status(pulse_id) == "applied"
        after = b.salience()

        origin, changed = b.query(
            "SELECT origin_peer, changed FROM applied_pulses WHERE pulse_id = ?", (pulse_id,)
        )[0]
        assert origin == "a"
        assert changed > 0
        closest = [digest for digest, _ in nearest(b.embeddings(), pulse_seed(b, pulse_id))[:3]]
        for digest in closest:
            assert after[digest] <= before[digest] - CLOSE_DROP, digest
        assert all(after[d] <= before[d] for d in before)
        assert sum(after[d] < before[d] for d in before) == changed

        assert daemon_a.terminate() == EXIT_OK
        assert daemon_b.terminate() == EXIT_OK


def test_second_process_with_the_same_peer_id_is_fenced_out(
    pair: tuple[Peer, Peer], tmp_path: Path
) -> None:
    a, b = pair
    impostor = Peer(tmp_path / "impostor", a.peer_id, a.zeitgeist_dir, dict(SETTINGS))
    with start(a) as daemon_a, start(b) as daemon_b:
        wait_for_cycle(a, daemon_a)  # a has published its chunks' asserts
        # The impostor has an entry of its own to publish, so it tries to write as "a" too.
        impostor.pulse_emit("pulse", "--text", DECAY_TEXT, "--kind", "reward")
        with impostor.start(
            "--cycles", CYCLES, "--interval", INTERVAL_S, name="impostor"
        ) as fenced:
            assert fenced.wait_exit() == EXIT_FATAL, fenced.log_tail()
        assert "another process is publishing as peer a" in fenced.log()

        # The first owner of the id carries on publishing, and b keeps reading it.
        assert daemon_a.returncode() is None, daemon_a.log_tail()
        queued = a.pulse_emit("pulse", "--text", DECAY_TEXT, "--kind", "decay", "--strength", "0.2")
        assert wait_for_pulse(b, daemon_b, emitted_id(queued)) == "applied"
        assert daemon_a.terminate() == EXIT_OK
        assert daemon_b.terminate() == EXIT_OK
