"""Authority in-process: roles a keyring grants (observer, operator), and a keyring that
changes under a running peer (trust, revoke), on the daemon's real phases.

The attacks themselves, against separate daemon processes on S3, are in
tests/test_mesh_signed.py; these tests show the other side: what a key with the
right role may do, and that a revoked key loses it at the next cycle.
"""

from __future__ import annotations

from pathlib import Path

from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import SIGNING_KEYRING_FILE
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import read_keyring, write_keyring
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import OutcomeEntry, ReconsolidateEntry, encode_segment
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.object_keys import segment_key
from dreamcycle.zeitgeist.signing import Signer, generate_key
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import entry_status, peer, publish_as, wall_clock_ms

__all__ = ["peer"]  # the fixture, shared with the robustness tests


def rejections(reason: str, what: str = "entries_rejected") -> float:
    value = metrics.REGISTRY.get_sample_value(f"dreamcycle_{what}_total", {"reason": reason})
    return value or 0.0


def outbox_pulses(peer: Peer) -> int:
    rows = peer.db.conn.execute(
        "SELECT entry_id FROM outbox WHERE kind = 'salience_pulse'"
    ).fetchall()
    return len(rows)


def test_an_observer_reports_outcomes_of_this_peers_decisions_an_ordinary_peer_does_not(
    peer: Peer, tmp_path: Path
) -> None:
    found = recall(peer.runtime, "how are exceptions raised")
    assert found.decision_hash is not None and found.hits
    cited = (found.hits[0].content_hash,)
    now = HybridLogicalClock(wall_clock_ms).now()

    def outcome(origin: str, at: int) -> OutcomeEntry:
        return OutcomeEntry(
            hlc=at,
            origin=origin,
            decision_hash=found.decision_hash or "",
            reward=1.0,
            observer_peer=origin,
            reason="deploy held",
            cited=cited,
        )

    ordinary, observed = outcome("b", now), outcome("o", now + 1)
    refused_before = rejections("not_decision_owner")
    publish_as(tmp_path, "b", [ordinary])
    publish_as(tmp_path, "o", [observed], roles=("observer",))
    assert outbox_pulses(peer) == 0

    run_cycle_blocking(peer)

    status, reason = entry_status(peer, ordinary)
    assert status == "rejected" and reason is not None and "not_decision_owner" in reason
    assert entry_status(peer, observed) == ("applied", None)
    assert rejections("not_decision_owner") == refused_before + 1
    recorded = peer.db.conn.execute(
        "SELECT outcome_id, status FROM outcomes WHERE decision_hash = ?", (found.decision_hash,)
    ).fetchall()
    assert recorded == [(observed.id, "converted")]
    # The observer's outcome became this peer's Reward, published under its own name.
    assert outbox_pulses(peer) >= 1


def test_only_an_operator_changes_a_pin_and_anyone_trusted_may_rename(
    peer: Peer, tmp_path: Path
) -> None:
    chunk = peer.db.observation(3)
    assert chunk is not None
    now = HybridLogicalClock(wall_clock_ms).now()
    pin = ReconsolidateEntry(
        hlc=now, origin="op", content_hash=chunk.content_hash, changes={"pin_floor": 0.6}
    )
    unpin = ReconsolidateEntry(
        hlc=now + 1, origin="b", content_hash=chunk.content_hash, changes={"pin_floor": 0.0}
    )
    rename = ReconsolidateEntry(
        hlc=now + 2, origin="b", content_hash=chunk.content_hash, changes={"title": "renamed"}
    )
    publish_as(tmp_path, "op", [pin], roles=("operator",))
    publish_as(tmp_path, "b", [unpin, rename])

    run_cycle_blocking(peer)

    assert entry_status(peer, pin) == ("applied", None)
    status, reason = entry_status(peer, unpin)
    assert status == "rejected" and reason is not None and "not_operator" in reason
    assert entry_status(peer, rename) == ("applied", None)
    held = peer.db.observation(3)
    assert held is not None and held.pin_floor == 0.6 and held.title == "renamed"


def test_a_revoked_key_is_refused_from_the_next_cycle_without_a_restart(
    peer: Peer, tmp_path: Path
) -> None:
    keyring_path = tmp_path / "a" / SIGNING_KEYRING_FILE
    carol = Signer("c", generate_key())
    trust_key(keyring_path, carol)
    chunk = peer.db.observation(4)
    assert chunk is not None
    zeitgeist = DirectoryBackend(tmp_path / "zeitgeist")

    def publish(title: str, seq: int) -> ReconsolidateEntry:
        clock = HybridLogicalClock(wall_clock_ms)
        entry = carol.sign_entry(
            ReconsolidateEntry(
                hlc=clock.now(), origin="c", content_hash=chunk.content_hash,
                changes={"title": title},
            )
        )  # fmt: skip
        key = segment_key(clock.now(), "c", seq)
        zeitgeist.create(key, encode_segment([entry], seal=lambda d: carol.seal(key, d)))
        return entry

    before = publish("while trusted", 1)
    run_cycle_blocking(peer)
    assert entry_status(peer, before) == ("applied", None)

    write_keyring(keyring_path, read_keyring(keyring_path).revoke(carol.key_id))
    after = publish("after revocation", 2)
    refused_before = rejections("revoked_key", "segments_refused")
    run_cycle_blocking(peer)
    # Refused by its segment's seal: counted, and recorded nowhere.
    assert rejections("revoked_key", "segments_refused") == refused_before + 1
    assert not peer.db.entry_seen(after.id)
    held = peer.db.observation(4)
    assert held is not None and held.title == "while trusted"
