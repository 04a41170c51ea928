"""Bounds on everything that arrives through the zeitgeist, against the real log on S3.

Every string, list and embedding of every entry kind has a limit, and so do a line and a
segment (bytes before and after decompression, lines); what is beyond one is refused,
counted by reason and logged once per object, and the rest of a segment still reads.
Then the attacks of "Signed entries and hostile input" on the log itself:

- 9: a segment with a million attributions, a 130 KB segment of newlines (both refused at
  the line limit, in bounded memory), a segment under 1 KB of rejected lines (one log line,
  every line counted) and a malformed key met every poll (one log line);
- 6: a key dated 59 minutes ahead moves a cursor, yet later real segments are listed;
  a key beyond the allowed skew is neither returned nor observed, nor compacted over;
- 7: a snapshot keyed 7fff... (signed by a trusted key), one holding entries dated after
  itself and one dropping what the snapshot before it held are passed over.

The last test runs 6 and 7 against a real daemon process that bootstraps from the bucket.

One file: every test reads through the same counted reader on the one S3 server of the
session, and the limits and the attacks on them are one list to keep complete.
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
import random
import re
import time
import tracemalloc
from pathlib import Path
from typing import Any, Final

import blake3
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.pulses.constants import (
    ATTRIBUTION_MAX_CHUNKS,
    DECISION_TEXT_MAX_CHARS,
    EMBEDDING_DIM_MAX,
    REASON_MAX_CHARS,
)
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.backend import LogBackend
from dreamcycle.zeitgeist.entries import (
    CONTENT_MAX_CHARS,
    LABEL_MAX_CHARS,
    MAX_LINE_BYTES,
    TITLE_MAX_CHARS,
    AttributionEntry,
    CorruptSegment,
    Entry,
    PulseEntry,
    Refusal,
    SegmentLimits,
    canonical_json,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import HLC_MAX, HybridLogicalClock, hlc_from_ms, ms_to_hlc_span
from dreamcycle.zeitgeist.log import ClaimTaken, Heartbeat, Zeitgeist
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX, claim_key, segment_key, snapshot_key
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from scripts.fuzz import unit_vector, valid_entry
from scripts.local_servers import RunningS3
from tests.daemon_helpers import trust_key, wait_until, write_jsonl
from tests.test_mesh_s3 import make_peer, mesh_settings
from tests.test_mesh_signed import free_port, rejected_counts

NOW_MS: Final = 1_750_000_000_000
MINUTE_MS: Final = 60_000
HASH: Final = "ab" * 32


# ---- the log under test ---------------------------------------------------------------------


class Counted:
    """What the log told its refusal counter, by reason (the daemon's metric, in process)."""

    def __init__(self) -> None:
        self.by_reason: dict[str, int] = {}

    def __call__(self, reason: str, count: int) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + count


def reader(
    backend: LogBackend,
    clock: ManualClock,
    counted: Counted,
    *,
    verifier: Verifier | None = None,
    segment_limits: SegmentLimits | None = None,
) -> Zeitgeist:
    extra: dict[str, Any] = {} if segment_limits is None else {"segment_limits": segment_limits}
    return Zeitgeist(
        backend,
        "reader",
        HybridLogicalClock(clock.now_ms),
        wall_ms=clock.now_ms,
        window_ms=MINUTE_MS,
        verifier=verifier,
        on_refused=counted,
        **extra,
    )


@pytest.fixture
def bucket(s3_server: RunningS3, tmp_path: Path) -> LogBackend:
    return s3_server.backend(f"bounds-{tmp_path.name}")


def with_id(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with the id its content hashes to, so the line reaches the field rules."""
    body = {k: v for k, v in obj.items() if k != "id"}
    return {**body, "id": blake3.blake3(canonical_json(body)).digest(16).hex()}


def wire_of(kind: str, seed: int = 0, **fields: Any) -> dict[str, Any]:
    obj = json.loads(valid_entry(random.Random(seed), kind).wire_bytes)
    obj.update(hlc=hlc_from_ms(NOW_MS - MINUTE_MS), **fields)
    return with_id(obj)


def segment_of(lines: list[bytes]) -> bytes:
    return gzip.compress(b"".join(line + b"\n" for line in lines), mtime=0)


def logged_about(caplog: pytest.LogCaptureFixture, key: str) -> int:
    return sum(key in record.getMessage() for record in caplog.records)


# ---- limits on fields, lines and segments ------------------------------------------------------

LONG_LABEL: Final = "x" * (LABEL_MAX_CHARS + 1)
OVER_LIMIT: Final[list[tuple[str, str, dict[str, Any]]]] = [
    ("assert", "title", {"title": "t" * (TITLE_MAX_CHARS + 1)}),
    ("assert", "content", {"content": "c" * (CONTENT_MAX_CHARS + 1)}),
    ("assert", "project", {"project": LONG_LABEL}),
    ("assert", "scope", {"scope": LONG_LABEL}),
    ("assert", "model_id", {"model_id": LONG_LABEL}),
    (
        "assert",
        "embedding",
        {"embedding": base64.b64encode(bytes(4 * EMBEDDING_DIM_MAX + 4)).decode()},
    ),
    ("supersede", "reason", {"reason": "r" * (REASON_MAX_CHARS + 1)}),
    ("tombstone", "reason", {"reason": "r" * (REASON_MAX_CHARS + 1)}),
    ("outcome", "reason", {"reason": "r" * (REASON_MAX_CHARS + 1)}),
    ("outcome", "cited", {"cited": [HASH] * (ATTRIBUTION_MAX_CHUNKS + 1)}),
    ("attribution", "chunk_hashes", {"chunk_hashes": [HASH] * (ATTRIBUTION_MAX_CHUNKS + 1)}),
    ("attribution", "decision_text", {"decision_text": "d" * (DECISION_TEXT_MAX_CHARS + 1)}),
    ("retrieval_key", "text", {"text": "q" * (DECISION_TEXT_MAX_CHARS + 1)}),
    ("reconsolidate", "title", {"changes": {"title": "t" * (TITLE_MAX_CHARS + 1)}}),
]


def test_every_field_beyond_its_limit_is_refused_alone_and_counted(
    bucket: LogBackend, caplog: pytest.LogCaptureFixture
) -> None:
    good = valid_entry(random.Random(7), "outcome")
    lines = [
        json.dumps(wire_of(kind, i, **fields)).encode()
        for i, (kind, _, fields) in enumerate(OVER_LIMIT)
    ]
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 1)
    bucket.create(key, segment_of([*lines, good.wire_bytes]))
    counted = Counted()
    log = reader(bucket, ManualClock(NOW_MS), counted)
    with caplog.at_level(logging.WARNING, logger="dreamcycle.zeitgeist.log"):
        decoded = log.fetch(key)
    assert decoded.entries == [good]
    assert [line.line_no for line in decoded.rejected] == list(range(1, len(OVER_LIMIT) + 1))
    for line, (kind, name, _) in zip(decoded.rejected, OVER_LIMIT, strict=True):
        assert line.refusal is Refusal.OVER_LIMIT, line
        assert kind in line.reason and name in line.reason and "limit" in line.reason
    assert counted.by_reason == {"over_limit": len(OVER_LIMIT)}
    assert logged_about(caplog, key) == 1


def test_a_field_at_its_limit_is_accepted() -> None:
    at_limit = wire_of("attribution", chunk_hashes=[HASH] * ATTRIBUTION_MAX_CHUNKS)
    lines = [json.dumps(at_limit).encode()]
    from dreamcycle.zeitgeist.entries import decode_segment

    (entry,) = decode_segment(segment_of(lines)).entries
    assert isinstance(entry, AttributionEntry) and len(entry.chunk_hashes) == ATTRIBUTION_MAX_CHUNKS


def test_a_line_beyond_the_limit_is_refused_alone_in_bounded_memory(bucket: LogBackend) -> None:
    good = valid_entry(random.Random(3), "supersede")
    huge = b'{"v":1,"kind":"assert","title":"' + b"x" * (MAX_LINE_BYTES + 10) + b'"}'
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 2)
    bucket.create(key, segment_of([huge, good.wire_bytes]))
    del huge
    counted = Counted()
    tracemalloc.start()
    try:
        decoded = reader(bucket, ManualClock(NOW_MS), counted).fetch(key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert decoded.entries == [good]
    (rejected,) = decoded.rejected
    assert rejected.refusal is Refusal.LINE_TOO_LONG and rejected.line_no == 1
    assert counted.by_reason == {"line_too_long": 1}
    # The line is read up to the limit and skipped: not held whole, not parsed.
    assert peak < 3 * MAX_LINE_BYTES, peak


@pytest.mark.parametrize(
    ("limits", "payload", "refusal"),
    [
        (
            SegmentLimits(compressed_bytes=1_000),
            b"x" * 10 + bytes(range(256)) * 40,
            "segment_too_large",
        ),
        (SegmentLimits(expanded_bytes=10_000), b"{}\n" * 5_000, "segment_too_large"),
        (SegmentLimits(lines=100), b"{}\n" * 101, "segment_too_many_lines"),
    ],
    ids=["compressed", "expanded", "lines"],
)
def test_a_segment_beyond_a_limit_is_refused_whole_counted_and_logged_once(
    bucket: LogBackend,
    caplog: pytest.LogCaptureFixture,
    limits: SegmentLimits,
    payload: bytes,
    refusal: str,
) -> None:
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 3)
    data = gzip.compress(payload, compresslevel=0 if refusal == "segment_too_large" else 9)
    bucket.create(key, data)
    counted = Counted()
    log = reader(bucket, ManualClock(NOW_MS), counted, segment_limits=limits)
    with caplog.at_level(logging.WARNING, logger="dreamcycle.zeitgeist.log"):
        for _ in range(3):
            with pytest.raises(CorruptSegment) as refused:
                log.fetch(key)
            assert refused.value.refusal == refusal
    assert counted.by_reason == {refusal: 3}
    assert logged_about(caplog, key) == 1


# ---- attack 9: what a tiny object used to cost ---------------------------------------------------


def test_a_million_attributions_are_refused_at_the_line_limit_in_bounded_memory(
    bucket: LogBackend,
) -> None:
    block = b"".join(
        AttributionEntry(
            hlc=hlc_from_ms(NOW_MS - MINUTE_MS),
            origin="mallory",
            decision_hash=f"{i:064x}",
            chunk_hashes=(HASH,),
            decision_text="d",
        ).wire_bytes
        + b"\n"
        for i in range(1_000)
    )
    member = gzip.compress(block, mtime=0)
    data = member * 1_000  # gzip members concatenate: one stream of a million lines
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 9)
    bucket.create(key, data)
    counted = Counted()
    tracemalloc.start()
    try:
        with pytest.raises(CorruptSegment) as refused:
            reader(bucket, ManualClock(NOW_MS), counted).fetch(key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert refused.value.refusal is Refusal.SEGMENT_TOO_MANY_LINES
    assert counted.by_reason == {"segment_too_many_lines": 1}
    # The decoded entries of 20,000 lines at most, and the object itself.
    assert peak < 64 * 1024 * 1024, peak


def test_a_small_segment_of_newlines_is_refused_quickly_in_bounded_memory(
    bucket: LogBackend,
) -> None:
    data = gzip.compress(b"\n" * (130 * 1024 * 1024), mtime=0)
    assert len(data) < 200 * 1024  # about 130 KB
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 10)
    bucket.create(key, data)
    counted = Counted()
    tracemalloc.start()
    try:
        with pytest.raises(CorruptSegment, match="lines"):
            reader(bucket, ManualClock(NOW_MS), counted).fetch(key)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert counted.by_reason == {"segment_too_many_lines": 1}
    assert peak < 4 * 1024 * 1024, peak


def test_a_segment_under_1_kb_of_bad_lines_writes_one_log_line_and_counts_them_all(
    bucket: LogBackend, caplog: pytest.LogCaptureFixture
) -> None:
    data = gzip.compress(b"{}\n" * 19_000, mtime=0)
    assert len(data) < 1024
    key = segment_key(hlc_from_ms(NOW_MS), "mallory", 11)
    bucket.create(key, data)
    counted = Counted()
    log = reader(bucket, ManualClock(NOW_MS), counted)
    with caplog.at_level(logging.DEBUG, logger="dreamcycle.zeitgeist.log"):
        for _ in range(2):
            assert len(log.fetch(key).rejected) == 19_000
    assert counted.by_reason == {"malformed_line": 38_000}
    assert len(caplog.records) == 1
    assert len(caplog.text) < 1024


def test_a_malformed_key_is_logged_once_and_counted_every_poll(
    bucket: LogBackend, caplog: pytest.LogCaptureFixture
) -> None:
    bad = f"{SEGMENT_PREFIX}{'f' * 16}-not a peer!-x.ndjson.gz"
    bucket.create(bad, b"")
    counted = Counted()
    log = reader(bucket, ManualClock(NOW_MS), counted)
    with caplog.at_level(logging.DEBUG, logger="dreamcycle.zeitgeist.log"):
        for _ in range(5):
            assert log.poll(0, lambda key: False) == []
    assert counted.by_reason == {"malformed_key": 5}
    assert log.counters["segment_key_malformed"] == 5
    assert len(caplog.records) == 1


# ---- attack 6: keys from the future and cursors ---------------------------------------------------


def signed_segment(signer: Signer, key: str, entries: list[Entry]) -> bytes:
    signed = [signer.sign_entry(entry) for entry in entries]
    return encode_segment(signed, seal=lambda digest: signer.seal(key, digest))


def pulse_entry(origin: str, hlc: int, seed: int, index_version: str = "none") -> PulseEntry:
    pulse = SalientPulse(
        seed_embedding=unit_vector(random.Random(seed), 384),
        kind=PulseKind.REWARD,
        strength=0.1,
        sigma=0.3,
        max_hops=1,
        k=2,
        decay_per_hop=0.3,
        ts=hlc,
        origin_peer=origin,
        reason=f"bounds {seed}",
        ttl_s=86_400.0,
        index_version=index_version,
    ).with_id()
    return PulseEntry(hlc=hlc, origin=origin, pulse=pulse)


def test_a_key_59_minutes_ahead_does_not_hide_later_real_segments(bucket: LogBackend) -> None:
    clock = ManualClock(NOW_MS)
    counted = Counted()
    log = reader(bucket, clock, counted)
    ahead = segment_key(hlc_from_ms(NOW_MS + 59 * MINUTE_MS), "mallory", 1)
    beyond = segment_key(hlc_from_ms(NOW_MS + 2 * 60 * MINUTE_MS), "mallory", 2)
    for key in (ahead, beyond):
        bucket.create(key, encode_segment([pulse_entry("mallory", 1, len(key))]))
    assert log.poll(0, lambda key: False) == [ahead]
    # The cursor a reader keeps moves to the newest key it applied ...
    cursor = hlc_from_ms(NOW_MS + 59 * MINUTE_MS)
    assert log.clock.now() < hlc_from_ms(NOW_MS + 60 * MINUTE_MS)  # `beyond` was not observed
    clock.advance(5_000)
    real = segment_key(hlc_from_ms(NOW_MS + 1_000), "bob", 1)
    bucket.create(real, encode_segment([pulse_entry("bob", hlc_from_ms(NOW_MS), 1)]))
    # ... yet a real segment written after that poll is listed from it.
    assert log.poll(cursor, lambda key: key == ahead) == [real]
    assert counted.by_reason == {"from_the_future": 2}

    # Nor does compaction fold (and delete) segments a reader has not listed yet.
    writer = Zeitgeist(bucket, "bob", HybridLogicalClock(clock.now_ms), wall_ms=clock.now_ms)
    writer.heartbeat(Heartbeat("bob", cursor, clock.now_ms(), "none", None, 1))
    report = writer.compact(clock.now_ms())
    assert report is not None and report.horizon_hlc is not None
    assert report.horizon_hlc <= hlc_from_ms(clock.now_ms() - writer.window_ms)
    assert real in bucket.list_after(SEGMENT_PREFIX, "")


# ---- attack 7: snapshots a new peer would start from ------------------------------------------------


def test_only_a_trusted_snapshot_from_the_past_consistent_with_the_one_before_is_read(
    bucket: LogBackend,
) -> None:
    bob = Signer("bob", generate_key())
    verifier = Verifier(Keyring.of([bob.trusted_key()]), strict=True)
    clock = ManualClock(NOW_MS)
    counted = Counted()
    log = reader(bucket, clock, counted, verifier=verifier)
    early = [pulse_entry("bob", hlc_from_ms(NOW_MS - 50 * MINUTE_MS), i) for i in range(3)]
    kept: list[Entry] = [
        AttributionEntry(
            hlc=hlc_from_ms(NOW_MS - 40 * MINUTE_MS) + i,
            origin="bob",
            decision_hash=f"{i:064x}",
            chunk_hashes=(HASH,),
            decision_text="d",
        )
        for i in range(3)
    ]
    sound = snapshot_key(hlc_from_ms(NOW_MS - 30 * MINUTE_MS), "bob")
    bucket.create(sound, signed_segment(bob, sound, [*early, *kept]))

    def newest_with(hlc: int, entries: list[Entry]) -> str:
        key = snapshot_key(hlc, "bob")
        bucket.create(key, signed_segment(bob, key, entries))
        return key

    # Signed by a trusted key, dated 7fff...: a new peer would poll from there, deaf.
    deaf = newest_with(0x7FFF_FFFF_FFFF_FFFF & HLC_MAX, [*kept])
    found = log.latest_snapshot()
    assert found is not None and found.key == sound
    assert counted.by_reason == {"from_the_future": 1}
    bucket.delete([deaf])
    # Dated in the past, but holding an entry dated after itself.
    at = hlc_from_ms(NOW_MS - 10 * MINUTE_MS)
    late = newest_with(at, [*kept, pulse_entry("bob", at + 1, 7)])
    found = log.latest_snapshot()
    assert found is not None and found.key == sound
    bucket.delete([late])
    # Dropping entries the snapshot before it held (its expired pulses may go).
    dropping = newest_with(at, kept[:1])
    found = log.latest_snapshot()
    assert found is not None and found.key == sound
    assert counted.by_reason == {"from_the_future": 1, "snapshot_inconsistent": 2}
    bucket.delete([dropping])
    folded = newest_with(at, [*kept, pulse_entry("bob", at - 1, 8)])
    found = log.latest_snapshot()
    assert found is not None and found.key == folded and len(found.entries) == 4


# ---- attacks 6 and 7 against a daemon bootstrapping from the bucket -------------------------------------


def test_a_daemon_bootstraps_past_a_future_snapshot_and_hears_segments_after_a_future_key(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    prefix = f"bounds-daemon-{tmp_path.name}"[:60]
    alice = make_peer(tmp_path, "alice", mesh_settings(s3_server, prefix))
    port = free_port()
    alice.settings["DREAMCYCLE_METRICS_LISTEN"] = f"127.0.0.1:{port}"
    rows = [{"content": f"note {i} about retries and backoff", "title": f"n{i}"} for i in range(3)]
    alice.dreamcycle("ingest", str(write_jsonl(tmp_path / "chunks.jsonl", rows)))
    alice.provision_key()
    bob = Signer("bob", generate_key())
    trust_key(alice.keyring_path, bob)
    bucket = s3_server.backend(prefix)
    index_version = str(alice.query("SELECT index_version FROM observations LIMIT 1")[0][0])

    def bob_pulse(hlc: int, seed: int) -> PulseEntry:
        return pulse_entry("bob", hlc, seed, index_version)

    def publish(hlc: int, seq: int, entry: PulseEntry) -> None:
        key = segment_key(hlc, "bob", seq)
        bucket.create(key, signed_segment(bob, key, [entry]))

    # The daemon runs on the system clock; so does the attacker.
    now = hlc_from_ms(int(time.time() * 1000))
    in_snapshot = bob_pulse(now - 1, 1)
    deaf = snapshot_key(0x7FFF_FFFF_FFFF_FFFF & HLC_MAX, "bob")
    bucket.create(deaf, signed_segment(bob, deaf, [in_snapshot]))
    ahead = bob_pulse(now + ms_to_hlc_span(59 * MINUTE_MS), 2)
    ahead_key = segment_key(ahead.hlc + 1, "bob", 1)
    publish(ahead.hlc + 1, 1, ahead)
    beyond = bob_pulse(now + ms_to_hlc_span(120 * MINUTE_MS), 3)
    publish(beyond.hlc + 1, 2, beyond)

    with alice.start("--interval", "1") as daemon:
        wait_until(
            lambda: (
                alice.pulse_status(ahead.pulse.pulse_id) == "applied"
                # The cursor moves in the transaction that records the segment, after the pulse.
                and alice.query("SELECT 1 FROM applied_segments WHERE key = ?", (ahead_key,))
            ),
            what="the pulse dated 59 minutes ahead applied and its segment recorded",
            context=daemon.log_tail,
        )
        # Applied (it is within the allowed skew, signed by a trusted key), but the cursor
        # stays at the wall clock of the poll that listed it.
        cursor = int(alice.scalar("SELECT value FROM meta WHERE key = 'cursor_hlc'"))
        assert cursor < now + ms_to_hlc_span(5 * MINUTE_MS)
        later = bob_pulse(hlc_from_ms(int(time.time() * 1000)), 4)
        publish(later.hlc + 1, 3, later)
        wait_until(
            lambda: alice.pulse_status(later.pulse.pulse_id) == "applied",
            what="a real segment written after the cursor moved ahead",
            context=daemon.log_tail,
        )
        counts = rejected_counts(port)
        log_text = daemon.log()
    assert alice.pulse_status(in_snapshot.pulse.pulse_id) is None
    assert alice.pulse_status(beyond.pulse.pulse_id) is None
    assert counts.get("from_the_future", 0) >= 3, counts  # the snapshot, and the key per poll
    for key in (deaf, segment_key(beyond.hlc + 1, "bob", 2)):
        assert len(re.findall(re.escape(key), log_text)) == 1, key


def test_a_claim_nested_too_deeply_to_parse_is_a_forgery_not_a_crash(bucket: LogBackend) -> None:
    alice = Signer("alice", generate_key())
    clock = ManualClock(NOW_MS)
    log = Zeitgeist(
        bucket,
        "alice",
        HybridLogicalClock(clock.now_ms),
        wall_ms=clock.now_ms,
        signer=alice,
        verifier=Verifier(Keyring.of([alice.trusted_key()]), strict=True),
    )
    prepared = log.prepare([pulse_entry("alice", hlc_from_ms(NOW_MS), 1)], seq=1)
    bucket.create(
        claim_key("alice", 1), b"[" * 5_000 + b"]" * 5_000 + b"\n" + prepared.key.encode()
    )
    with pytest.raises(ClaimTaken):
        log.publish(prepared)
