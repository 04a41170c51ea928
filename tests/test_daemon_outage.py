"""An S3 outage stalls the daemon's log reads and publishing, never the process or local work,
and nothing is lost when the server comes back."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from scripts.local_servers import RunningS3, start_seaweedfs
from tests.daemon_helpers import Peer, documentation_chunks, emitted_id, wait_until, write_jsonl

pytestmark = pytest.mark.slow

PREFIX = "outage"
#: The S3 backend retries for 20 s before a cycle gives up on the log; allow a few cycles.
OUTAGE_WAIT_S = 120.0
UNPUBLISHED = (
    "SELECT count(*) FROM outbox WHERE segment_seq IS NULL "
    "OR segment_seq IN (SELECT seq FROM segments_out WHERE status != 'published')"
)


def published_payload(server: RunningS3) -> bytes:
    """Every segment in the bucket, decompressed and concatenated."""
    client = server.client()
    listing = client.list_objects_v2(Bucket=server.bucket, Prefix=f"{PREFIX}/seg/")
    return b"".join(
        gzip.decompress(client.get_object(Bucket=server.bucket, Key=obj["Key"])["Body"].read())
        for obj in listing.get("Contents", [])
    )


def test_the_daemon_outlives_an_s3_outage_and_publishes_what_waited(tmp_path: Path) -> None:
    server = start_seaweedfs(tmp_path / "s3")
    try:
        peer = Peer(
            tmp_path / "a",
            "a",
            tmp_path / "unused",
            settings={
                "DREAMCYCLE_ZEITGEIST_BACKEND": "s3",
                "DREAMCYCLE_ZEITGEIST_S3_BUCKET": server.bucket,
                "DREAMCYCLE_ZEITGEIST_S3_PREFIX": PREFIX,
                "DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL": server.endpoint_url,
                "AWS_ACCESS_KEY_ID": server.access_key_id,
                "AWS_SECRET_ACCESS_KEY": server.secret_access_key,
                "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
            },
        )
        chunks = write_jsonl(tmp_path / "chunks.jsonl", documentation_chunks(["try"], 6))
        peer.dreamcycle("ingest", str(chunks))
        with peer.start("--interval", "0.5") as daemon:
            daemon.wait_ready()
            wait_until(lambda: peer.scalar(UNPUBLISHED) == 0, what="the chunks announced")
            server.stop()

            during = emitted_id(
                peer.pulse_emit(
                    "pulse", "--text", "an except clause names the exception it handles",
                    "--kind", "decay", "--strength", "0.4", "--reason", "outage",
                )
            )  # fmt: skip
            # Local work goes on: the pulse is applied while the log is unreachable.
            wait_until(
                lambda: peer.pulse_status(during) == "applied",
                what="the pulse applied during the outage",
                timeout_s=OUTAGE_WAIT_S,
            )
            assert daemon.returncode() is None, daemon.log_tail()
            assert "zeitgeist unreachable" in daemon.log()
            assert peer.scalar(UNPUBLISHED) >= 1  # waiting, not lost

            server = server.restart()
            wait_until(
                lambda: peer.scalar(UNPUBLISHED) == 0,
                what="everything queued during the outage published",
                timeout_s=OUTAGE_WAIT_S,
            )
            assert daemon.terminate() == 0
        assert during.encode() in published_payload(server)
    finally:
        server.stop()
