"""A flood of unsigned entries in the bucket, against real daemons on a real S3 server.

A writer of the bucket holding no key writes tens of thousands of unsigned entries: one
segment under a made-up name, one under bob's, and a snapshot. alice, running, refuses
both segments by their seals and records none of their entries (not one row in
`seen_entries`), her database barely grows, and she keeps publishing what bob applies.
carol, a new peer starting beside the forged snapshot, refuses it and starts all the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.zeitgeist.entries import Entry, TombstoneEntry, encode_segment
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.object_keys import segment_key, snapshot_key
from scripts.local_servers import RunningS3
from tests.daemon_helpers import Peer, wait_until, write_jsonl
from tests.test_mesh_hostile import cycles_later, emit_applied, running, two_peers
from tests.test_mesh_s3 import ingest_all, make_peer, mesh_settings
from tests.test_mesh_signed import SEAL_METRIC, chunk_rows, rejected_counts

pytestmark = pytest.mark.slow

#: Entries in each forged object: a row each would show; none may be written.
FLOOD: Final = 5_000
#: What the database of a peer that records nothing of the flood may grow by meanwhile
#: (its own cycles, segments and journal), far below a row per forged entry.
DB_GROWTH_BYTES: Final = 1024 * 1024
#: Rows a forged entry would add: every forged entry is a tombstone, and mallory is no
#: peer. bob's own asserts may still arrive meanwhile, so other rows are not counted.
FORGEABLE_ROWS: Final = (
    "SELECT count(*) FROM seen_entries WHERE kind = 'tombstone' OR origin = 'mallory'"
)


def forged(origin: str, at_ms: int, count: int) -> list[Entry]:
    return [
        TombstoneEntry(
            hlc=hlc_from_ms(at_ms) + n,
            origin=origin,
            content_hash=f"{n:064x}",
            reason="flood",
            collectable_after_ms=None,
            forget_pulse=None,
        )
        for n in range(count)
    ]


def database_bytes(peer: Peer) -> int:
    path = peer.database_path
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())


def test_a_flood_of_unsigned_entries_costs_no_row_and_stops_no_peer(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    prefix = f"flood-{tmp_path.name}"
    alice, bob, bucket, port = two_peers(s3_server, tmp_path, prefix)
    with running(bob) as bob_daemon, running(alice) as alice_daemon:

        def logs() -> str:
            return "\n".join(d.log_tail() for d in (alice_daemon, bob_daemon))

        emit_applied(alice, bob, "exceptions", logs)
        seen_before = alice.scalar(FORGEABLE_ROWS)
        size_before = database_bytes(alice)
        now_ms = SystemClock().now_ms()
        bucket.create(
            segment_key(hlc_from_ms(now_ms), "mallory", 1),
            encode_segment(forged("mallory", now_ms, FLOOD)),
        )
        bucket.create(
            segment_key(hlc_from_ms(now_ms) + 1, "bob", 1 << 20),
            encode_segment(forged("bob", now_ms, FLOOD)),
        )
        bucket.create(
            snapshot_key(hlc_from_ms(now_ms - 1_000), "mallory"),
            encode_segment(forged("mallory", now_ms - 60_000, FLOOD)),
        )

        # Both forged segments read and refused (on a loaded machine a poll may not list a
        # segment created during it; the next one does).
        wait_until(
            lambda: rejected_counts(port, SEAL_METRIC).get("unsigned", 0) >= 2,
            what="alice to refuse both forged segments",
            context=logs,
        )
        cycles_later(alice, 1, logs)
        assert alice.scalar(FORGEABLE_ROWS) == seen_before
        assert alice.scalar("SELECT count(*) FROM seen_entries") < FLOOD // 10
        assert database_bytes(alice) - size_before < DB_GROWTH_BYTES
        emit_applied(alice, bob, "loops", logs)

        # A new peer starts beside the forged snapshot: refused, and it starts all the same.
        carol = make_peer(tmp_path, "carol", mesh_settings(s3_server, prefix))
        ingest_all([(carol, write_jsonl(tmp_path / "carol.jsonl", chunk_rows()))])
        with running(carol) as carol_daemon:
            cycles_later(carol, 2, carol_daemon.log_tail)
            assert "unsigned" in carol_daemon.log()
            assert carol.scalar("SELECT count(*) FROM seen_entries WHERE origin = 'mallory'") == 0
            emit_applied(alice, carol, "context managers", logs)
