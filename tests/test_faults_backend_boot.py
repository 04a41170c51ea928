"""The zeitgeist down at boot: the daemon starts anyway (reads served, local phases run,
its entries queued), probes the store again before writing to it, and catches up when
it returns."""

from __future__ import annotations

from pathlib import Path

import pytest

from scripts.local_servers import start_seaweedfs
from tests.daemon_helpers import documentation_chunks, wait_until, write_jsonl
from tests.fault_helpers import admission_consistent, peer_with_probes, readiness

pytestmark = pytest.mark.slow

PREFIX = "boot"
UNPUBLISHED = (
    "SELECT count(*) FROM outbox WHERE segment_seq IS NULL "
    "OR segment_seq IN (SELECT seq FROM segments_out WHERE status != 'published')"
)
#: The backend's own retries wait 20 s per call before a cycle moves on.
OUTAGE_WAIT_S = 90.0


def test_the_daemon_starts_while_s3_is_down_and_publishes_when_it_returns(tmp_path: Path) -> None:
    server = start_seaweedfs(tmp_path / "s3")
    server.stop()
    try:
        peer, readyz = peer_with_probes(
            tmp_path / "a",
            tmp_path / "unused",
            DREAMCYCLE_ZEITGEIST_BACKEND="s3",
            DREAMCYCLE_ZEITGEIST_S3_BUCKET=server.bucket,
            DREAMCYCLE_ZEITGEIST_S3_PREFIX=PREFIX,
            DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL=server.endpoint_url,
            AWS_ACCESS_KEY_ID=server.access_key_id,
            AWS_SECRET_ACCESS_KEY=server.secret_access_key,
            DREAMCYCLE_DOWNSCALE_ENABLED="false",
        )
        chunks = write_jsonl(tmp_path / "c.jsonl", documentation_chunks(["try"], 3))
        peer.dreamcycle("ingest", str(chunks), "--no-embed")
        with peer.start("--interval", "0.5") as daemon:
            daemon.wait_ready()
            assert "zeitgeist unreachable at start-up" in daemon.log()
            document = readiness(readyz)
            assert document is not None and document["checks"]["backend"]["ok"] is False
            # Local phases run during the outage: the chunks are admitted, their
            # announcements queued.
            wait_until(
                lambda: admission_consistent(peer) == 3,
                what="the chunks admitted during the outage",
                timeout_s=OUTAGE_WAIT_S,
                context=daemon.log_tail,
            )
            assert peer.scalar(UNPUBLISHED) == 3
            assert daemon.returncode() is None, daemon.log_tail()

            server = server.restart()
            wait_until(
                lambda: peer.scalar(UNPUBLISHED) == 0,
                what="the queued entries published once S3 returned",
                timeout_s=OUTAGE_WAIT_S,
                context=daemon.log_tail,
            )
            wait_until(
                lambda: (d := readiness(readyz)) and d["checks"]["backend"]["ok"],
                what="/readyz to see the backend again",
            )
            assert daemon.terminate() == 0
        listing = server.client().list_objects_v2(Bucket=server.bucket, Prefix=f"{PREFIX}/seg/")
        assert listing.get("KeyCount", 0) >= 1
    finally:
        server.stop()
