"""Reads from the log stop one byte past the object's limit, on every backend.

A segment, snapshot, claim, heartbeat or lease larger than its limit is refused by the
backend after at most limit + 1 bytes (S3: a ranged GET; Redis: measured on the server;
directory: its size, then a bounded read), then refused by the log like any other object
beyond its limits: counted every time, logged once, skipped, never fatal. Each backend is a
real store (SeaweedFS, redis-server, a directory); a daemon's cycle skips such a segment and
applies the ones after it.
"""

from __future__ import annotations

import gzip
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.observe.backend_health import BackendHealth, ObservedBackend
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import NewObservation
from dreamcycle.zeitgeist.backend import MAX_OBJECT_BYTES, LogBackend, ObjectTooLarge, Versioned
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import CorruptSegment, ReconsolidateEntry, Refusal, SegmentLimits
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.log import (
    MAX_CLAIM_BYTES,
    MAX_HEARTBEAT_BYTES,
    MAX_LEASE_BYTES,
    OBJECT_TOO_LARGE,
    Heartbeat,
    Zeitgeist,
)
from dreamcycle.zeitgeist.object_keys import LEASE_KEY, claim_key, heartbeat_key, segment_key
from scripts.local_servers import RunningS3
from tests.test_daemon_robustness import entry_status, open_peer, paragraphs, publish_as
from tests.test_zeitgeist_bounds import Counted, logged_about, reader

NOW_MS: Final = 1_750_000_000_000
#: The segment limit the tests read under: small, so an object just over it is cheap.
LIMIT: Final = 4_096
#: An object far over the limit: what the bound saves (it is never read whole).
HUGE_BYTES: Final = 8 * 1024 * 1024


@dataclass
class Received:
    """A backend behind a proxy that records, per read, the bound asked for and how many
    bytes came back (or reached this process before the object was refused)."""

    inner: LogBackend
    reads: list[tuple[str, int, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def probe(self) -> None:
        self.inner.probe()

    def create(self, key: str, data: bytes) -> None:
        self.inner.create(key, data)

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        try:
            data = self.inner.read(key, max_bytes=max_bytes)
        except ObjectTooLarge as refused:
            self.reads.append((key, max_bytes, refused.received))
            raise
        self.reads.append((key, max_bytes, len(data)))
        return data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        return self.inner.list_after(prefix, start_after)

    def delete(self, keys: list[str]) -> None:
        self.inner.delete(keys)

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        try:
            found = self.inner.read_versioned(key, max_bytes=max_bytes)
        except ObjectTooLarge as refused:
            self.reads.append((key, max_bytes, refused.received))
            raise
        self.reads.append((key, max_bytes, 0 if found is None else len(found.data)))
        return found

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        return self.inner.write_versioned(key, data, expect)

    def write_overwrite(self, key: str, data: bytes) -> None:
        self.inner.write_overwrite(key, data)

    def close(self) -> None:
        self.inner.close()


def one_byte_over(limit: int) -> bytes:
    """An object of limit + 1 bytes that is a real gzip stream, so only its size is wrong."""
    payload = random.Random(limit).randbytes(2 * limit)
    data = gzip.compress(payload, compresslevel=0, mtime=0)
    return data[: limit + 1] if len(data) > limit + 1 else data + bytes(limit + 1 - len(data))


# ---- the backends ------------------------------------------------------------------------------


def test_every_backend_stops_one_byte_past_the_bound(backend: LogBackend) -> None:
    backend.create("seg/at-limit", b"a" * LIMIT)
    backend.create("seg/over", b"o" * (LIMIT + 1))
    backend.create("seg/huge", bytes(HUGE_BYTES))
    backend.create("seg/empty", b"")
    assert backend.read("seg/at-limit", max_bytes=LIMIT) == b"a" * LIMIT
    assert backend.read("seg/empty", max_bytes=0) == b""
    assert backend.read("seg/empty", max_bytes=LIMIT) == b""
    for key, size in (("seg/over", LIMIT + 1), ("seg/huge", HUGE_BYTES)):
        with pytest.raises(ObjectTooLarge) as refused:
            backend.read(key, max_bytes=LIMIT)
        assert refused.value.received <= LIMIT + 1, refused.value
        assert refused.value.size == size and refused.value.key == key
        assert f"more than the {LIMIT} its reader accepts" in str(refused.value)
    with pytest.raises(KeyError):
        backend.read("seg/missing", max_bytes=LIMIT)
    with pytest.raises(ValueError, match="max_bytes must be a non-negative integer"):
        backend.read("seg/over", max_bytes=-1)

    backend.write_overwrite("peers/big.json", b"h" * (LIMIT + 1))
    with pytest.raises(ObjectTooLarge):
        backend.read_versioned("peers/big.json", max_bytes=LIMIT)
    small = backend.read_versioned("peers/big.json", max_bytes=LIMIT + 1)
    assert small is not None and len(small.data) == LIMIT + 1
    # A compare-and-swap still sees the version of an object too large to read.
    new_etag = backend.write_versioned("peers/big.json", b"small", expect=small.etag)
    assert backend.read_versioned("peers/big.json", max_bytes=5) == Versioned(b"small", new_etag)


def test_s3_asks_for_a_range_and_receives_one_byte_over(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    bucket = s3_server.backend(f"range-{tmp_path.name}")
    bucket.create("seg/huge", bytes(HUGE_BYTES))
    ranges: list[str] = []

    def record_range(request: Any, **_: Any) -> None:
        value = request.headers.get("Range")
        ranges.append(value.decode() if isinstance(value, bytes) else str(value))

    bucket.client.meta.events.register("before-send.s3.GetObject", record_range)
    with pytest.raises(ObjectTooLarge) as refused:
        bucket.read("seg/huge", max_bytes=LIMIT)
    assert ranges == [f"bytes=0-{LIMIT}"]
    assert refused.value.received == LIMIT + 1
    assert refused.value.size == HUGE_BYTES


# ---- the log -------------------------------------------------------------------------------------


def test_a_segment_one_byte_over_is_refused_and_the_segments_after_it_read(
    backend: LogBackend, caplog: pytest.LogCaptureFixture
) -> None:
    received = Received(backend)
    counted = Counted()
    clock = ManualClock(NOW_MS)
    log = reader(received, clock, counted, segment_limits=SegmentLimits(compressed_bytes=LIMIT))
    hostile = segment_key(hlc_from_ms(NOW_MS - 3_000), "mallory", 1)
    backend.create(hostile, one_byte_over(LIMIT))
    good = [
        ReconsolidateEntry(
            hlc=hlc_from_ms(NOW_MS - 2_000) + seq,
            origin="bob",
            content_hash="ab" * 32,
            changes={"title": f"title {seq}"},
        )
        for seq in range(2)
    ]
    writer = Zeitgeist(backend, "bob", HybridLogicalClock(clock.now_ms), wall_ms=clock.now_ms)
    for seq, entry in enumerate(good, start=1):
        writer.publish(writer.prepare([entry], seq))

    keys = log.poll(0, lambda key: False)
    assert keys[0] == hostile and len(keys) == 3
    decoded = []
    with caplog.at_level(logging.WARNING, logger="dreamcycle.zeitgeist.log"):
        for _ in range(2):  # polled again: counted again, logged once
            with pytest.raises(CorruptSegment) as refused:
                log.fetch(hostile)
            assert refused.value.refusal is Refusal.SEGMENT_TOO_LARGE
        decoded = [log.fetch(key) for key in keys[1:]]
    assert [d.entries for d in decoded] == [[entry] for entry in good]
    assert counted.by_reason == {"segment_too_large": 2}
    assert logged_about(caplog, hostile) == 1
    over = [(bound, got) for key, bound, got in received.reads if key == hostile]
    assert over and all(bound == LIMIT and got <= LIMIT + 1 for bound, got in over), over


def test_claims_heartbeats_and_the_lease_are_read_within_their_limits(
    backend: LogBackend,
) -> None:
    received = Received(backend)
    clock = ManualClock(NOW_MS)
    counted = Counted()
    log = Zeitgeist(
        received,
        "alice",
        HybridLogicalClock(clock.now_ms),
        wall_ms=clock.now_ms,
        on_refused=counted,
    )
    backend.write_overwrite(heartbeat_key("mallory"), b" " * (MAX_HEARTBEAT_BYTES + 1))
    log.heartbeat(Heartbeat("alice", 0, NOW_MS, "none", None, 0))
    assert [beat.peer_id for beat in log.heartbeats()] == ["alice"]
    # A claim of alice's next sequence number, too large to be one: it fences her.
    entry = ReconsolidateEntry(
        hlc=hlc_from_ms(NOW_MS - 1_000),
        origin="alice",
        content_hash="ab" * 32,
        changes={"title": "t"},
    )
    prepared = log.prepare([entry], 1)
    backend.create(claim_key("alice", 1), b"c" * (MAX_CLAIM_BYTES + 1))
    with pytest.raises(Exception, match="another process is publishing as peer alice"):
        log.publish(prepared)
    backend.write_overwrite(LEASE_KEY, b"l" * (MAX_LEASE_BYTES + 1))
    assert log.compact(NOW_MS) is None
    assert counted.by_reason == {"heartbeat_unreadable": 1, OBJECT_TOO_LARGE: 2}
    limits = {MAX_HEARTBEAT_BYTES, MAX_CLAIM_BYTES, MAX_LEASE_BYTES}
    for key, bound, got in received.reads:
        assert bound in limits | {len(prepared.data)} and got <= bound + 1, (key, bound, got)


def test_the_observed_backend_passes_the_bound_and_calls_a_refusal_an_answer(
    tmp_path: Path,
) -> None:
    inner = DirectoryBackend(tmp_path / "log")
    inner.create("seg/over", b"x" * (LIMIT + 1))
    health = BackendHealth("dir")
    observed = ObservedBackend(inner, health, lambda: NOW_MS)
    with pytest.raises(ObjectTooLarge):
        observed.read("seg/over", max_bytes=LIMIT)
    assert health.reachable is True and health.last_error is None
    with pytest.raises(ObjectTooLarge):
        observed.read_versioned("seg/over", max_bytes=LIMIT)
    assert observed.read("seg/over", max_bytes=LIMIT + 1) == b"x" * (LIMIT + 1)


# ---- a daemon's cycle ----------------------------------------------------------------------------


@pytest.fixture
def small_limit_peer(tmp_path: Path) -> Iterator[Peer]:
    peer = open_peer(tmp_path, **{"zeitgeist.max_segment_bytes": LIMIT})
    ingest(peer.runtime, [[NewObservation(content=text) for text in paragraphs(4)]])
    run_cycle_blocking(peer)
    yield peer
    peer.close()
    peer.runtime.close()


def test_a_cycle_skips_a_segment_one_byte_over_and_applies_the_ones_after_it(
    small_limit_peer: Peer, tmp_path: Path
) -> None:
    peer = small_limit_peer
    received = Received(peer.zeitgeist.backend)
    peer.zeitgeist.backend = received
    hostile = segment_key(HybridLogicalClock(peer.runtime.clock.now_ms).now(), "mallory", 1)
    DirectoryBackend(tmp_path / "zeitgeist").create(hostile, one_byte_over(LIMIT))
    chunk = peer.db.observation(1)
    assert chunk is not None
    renames: list[tuple[str, ReconsolidateEntry]] = []
    for seq in (1, 2):
        hlc = HybridLogicalClock(peer.runtime.clock.now_ms).now()
        entry = ReconsolidateEntry(
            hlc=hlc, origin="bob", content_hash=chunk.content_hash, changes={"title": f"t{seq}"}
        )
        renames.append((publish_as(tmp_path, "bob", [entry], seq=seq), entry))
    state = run_cycle_blocking(peer)

    assert state.stats["scan"]["fetched"] == 2
    for key, entry in renames:
        assert peer.db.segment_applied(key)
        assert entry_status(peer, entry) == ("applied", None)
    assert peer.db.observation(1).title == "t2"  # type: ignore[union-attr]
    # Recorded as a rejected segment, not retried every cycle.
    assert peer.db.segment_applied(hostile)
    over = [(bound, got) for key, bound, got in received.reads if key == hostile]
    assert over == [(LIMIT, 0)] or over == [(LIMIT, LIMIT + 1)], over
    assert run_cycle_blocking(peer).stats["scan"]["fetched"] == 0
