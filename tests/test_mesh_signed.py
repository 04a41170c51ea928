"""Two daemons with exchanged keys on a real S3 server, and an attacker with write access
to the bucket.

alice and bob trust each other's keys (one keyring, as an operator distributes it).
Their pulses propagate as before. The attacker writes segments under bob's name with
a forged tombstone of one of alice's chunks, a forged reconsolidate that unpins a
pinned chunk and renames it, and an oversized pulse (strength 1e308, k 255,
max_hops 23, which the pulse invariants alone let through): once unsigned, once
signed and sealed with a key that claims to be bob's but is in no keyring. Nothing
of alice's memory changes; every forged entry is recorded as rejected with its
reason and counted in dreamcycle_entries_rejected_total; and bob's next real pulse
still reaches alice.
"""

from __future__ import annotations

import re
import socket
import urllib.request
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest

from daemon.clock import SystemClock
from pulses.pulse import PulseKind, SalientPulse
from scripts.local_servers import RunningS3
from tests.daemon_helpers import Peer, emitted_id, wait_until
from tests.test_mesh_s3 import (
    PINNED_TOPIC,
    SHARED_TOPICS,
    chunk_file,
    ingest_all,
    make_peer,
    mesh_settings,
    wait_started,
)
from zeitgeist.entries import (
    Entry,
    PulseEntry,
    ReconsolidateEntry,
    TombstoneEntry,
    encode_segment,
)
from zeitgeist.hlc import HybridLogicalClock
from zeitgeist.keys import segment_key
from zeitgeist.signing import Signer, generate_key

pytestmark = pytest.mark.slow

CYCLE_INTERVAL: Final = "1"
#: Far above any sequence number bob reaches in this test: the attacker's keys never
#: collide with bob's own.
ATTACK_SEQ: Final = 0x00F0_0000
METRIC: Final = "dreamcycle_entries_rejected_total"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rejected_counts(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    pattern = rf'^{METRIC}{{reason="([a-z_]+)"}} ([0-9.e+]+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.MULTILINE)}


def memory_state(peer: Peer) -> list[tuple[Any, ...]]:
    """What a forged entry could change: every chunk's text, pin, salience and deletion."""
    return peer.query(
        "SELECT content_hash, title, topic_key, pin_floor, salience, deleted_at, cold_at "
        "FROM observations WHERE type != 'efficacy' ORDER BY content_hash"
    )


def forgeries(victim: Peer) -> list[Entry]:
    """What an attacker would write under bob's name to damage alice's memory."""
    now = HybridLogicalClock(SystemClock().now_ms).now()
    rows = victim.query(
        "SELECT content_hash, title, index_version FROM observations "
        "WHERE type != 'efficacy' AND deleted_at IS NULL ORDER BY rowid"
    )
    pinned = next(h for h, title, _ in rows if title == PINNED_TOPIC)
    target = next(h for h, title, _ in rows if title != PINNED_TOPIC)
    index_version = str(rows[0][2])
    seed = next(iter(victim.embeddings().values()))
    oversized = SalientPulse(
        seed_embedding=seed,
        kind=PulseKind.DECAY,
        strength=1e308,
        sigma=0.3,
        max_hops=23,
        k=255,
        decay_per_hop=0.0039,
        ts=now + 2,
        origin_peer="bob",
        reason="forged",
        ttl_s=3600.0,
        index_version=index_version,
    ).with_id()
    return [
        TombstoneEntry(
            hlc=now,
            origin="bob",
            content_hash=target,
            reason="forged",
            collectable_after_ms=None,
            forget_pulse=None,
        ),
        ReconsolidateEntry(
            hlc=now + 1,
            origin="bob",
            content_hash=pinned,
            changes={"title": "forged", "pin_floor": 0.0},
        ),
        PulseEntry(hlc=now + 2, origin="bob", pulse=oversized),
    ]


def entry_statuses(peer: Peer, entries: list[Entry]) -> dict[str, tuple[str, str]]:
    marks = ",".join("?" * len(entries))
    rows = peer.query(
        f"SELECT entry_id, status, reason FROM seen_entries WHERE entry_id IN ({marks})",
        [e.id for e in entries],
    )
    return {str(i): (str(s), str(r)) for i, s, r in rows}


def test_signed_mesh_propagates_and_forgeries_change_nothing(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    prefix = f"signed-{tmp_path.name}"
    settings = mesh_settings(s3_server, prefix)
    alice, bob = make_peer(tmp_path, "alice", settings), make_peer(tmp_path, "bob", settings)
    port = free_port()
    alice.settings["DREAMCYCLE_METRICS_LISTEN"] = f"127.0.0.1:{port}"
    chunks = chunk_file(tmp_path / "shared.jsonl", SHARED_TOPICS)
    ingest_all([(alice, chunks), (bob, chunks)])

    with (
        alice.start("--interval", CYCLE_INTERVAL) as alice_daemon,
        bob.start("--interval", CYCLE_INTERVAL) as bob_daemon,
    ):
        daemons = [alice_daemon, bob_daemon]
        wait_started([alice, bob], daemons)

        def logs() -> str:
            return "\n".join(d.log_tail() for d in daemons)

        # Signed entries propagate between peers that trust each other.
        first = emitted_id(bob.pulse_emit("pulse", "--text", "exceptions", "--kind", "decay"))
        wait_until(
            lambda: alice.pulse_status(first) == "applied",
            what="bob's pulse applied on alice",
            context=logs,
        )
        # Wait for a quiet cycle, so nothing legitimate is still moving.
        cycles = alice.cycles_done()
        wait_until(lambda: alice.cycles_done() > cycles + 1, what="two more cycles")
        before = memory_state(alice)

        forged = forgeries(alice)
        at = forged[0].hlc
        bucket = s3_server.backend(prefix)
        bucket.create(segment_key(at + 10, "bob", ATTACK_SEQ), encode_segment(forged))
        mallory = Signer("bob", generate_key())  # claims bob's name; in no keyring
        signed = [mallory.sign_entry(entry) for entry in forged]
        key = segment_key(at + 11, "bob", ATTACK_SEQ + 1)
        sealed = encode_segment(signed, seal=lambda digest: mallory.seal(key, digest))
        bucket.create(key, sealed)

        def all_recorded() -> dict[str, tuple[str, str]] | None:
            found = entry_statuses(alice, forged)
            return found if len(found) == len(forged) else None

        statuses = wait_until(all_recorded, what="alice to record every forged entry", context=logs)
        assert all(status == "rejected" for status, _ in statuses.values()), statuses
        # Both forged copies share each id (ids are content hashes); one reason is kept.
        assert all(
            "unsigned" in reason or "unknown_key" in reason for _, reason in statuses.values()
        ), statuses
        oversized = forged[2]
        assert isinstance(oversized, PulseEntry)
        assert alice.pulse_status(oversized.pulse.pulse_id) == "rejected"

        def both_counted() -> dict[str, float] | None:
            found = rejected_counts(port)
            enough = all(found.get(r, 0) >= len(forged) for r in ("unsigned", "unknown_key"))
            return found if enough else None

        counts = wait_until(both_counted, what="both kinds of forgery counted", context=logs)
        assert set(counts) <= {"unsigned", "unknown_key"}, counts
        assert memory_state(alice) == before
        # Logged once per object, not once per entry or per cycle.
        cycles = alice.cycles_done()
        wait_until(lambda: alice.cycles_done() > cycles + 1, what="two more cycles")
        assert alice_daemon.log().count("entries rejected") == 2, alice_daemon.log_tail()

        # The mesh still works: bob's next pulse reaches alice.
        second = emitted_id(bob.pulse_emit("pulse", "--text", "loops", "--kind", "reward"))
        wait_until(
            lambda: alice.pulse_status(second) == "applied",
            what="bob's second pulse applied on alice",
            context=logs,
        )
        assert np.isfinite([row[4] for row in memory_state(alice)]).all()
        assert alice_daemon.terminate() == 0
        assert bob_daemon.terminate() == 0
