"""The hybrid logical clock and the log layer's own rules, on the directory backend."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.zeitgeist.backend import MAX_OBJECT_BYTES, LogBackend, Versioned
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import Entry, PulseEntry, TombstoneEntry
from dreamcycle.zeitgeist.hlc import COUNTER_BITS, HybridLogicalClock, InvalidHlc, hlc_from_ms
from dreamcycle.zeitgeist.log import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_LIVENESS_TIMEOUT_MS,
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_WINDOW_MS,
    CompactionOutcome,
    EmptySegment,
    FencedOut,
    Heartbeat,
    InvalidHeartbeat,
    InvalidSetting,
    Zeitgeist,
)
from dreamcycle.zeitgeist.object_keys import (
    LEASE_KEY,
    claim_key,
    claim_prefix,
    heartbeat_key,
    parse_segment_key,
)
from dreamcycle.zeitgeist.snapshot import fold_entries
from tests.test_zeitgeist_codec import BASE_MS, content_hash, make_pulse, one_of_each_kind


class ManualClock:
    """A wall clock in milliseconds that moves only when told to (or backwards)."""

    def __init__(self, ms: int = BASE_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms

    def advance(self, ms: int) -> None:
        self.ms += ms


class CountingBackend:
    """A real backend behind a proxy that counts requests and can delay creates."""

    def __init__(self, inner: LogBackend, on_create: Callable[[str], None] | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: Counter[str] = Counter()
        self.on_create = on_create

    def probe(self) -> None:
        self.calls["probe"] += 1
        self.inner.probe()

    def create(self, key: str, data: bytes) -> None:
        self.calls["create"] += 1
        self.inner.create(key, data)
        if self.on_create is not None:
            self.on_create(key)

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        self.calls["read"] += 1
        return self.inner.read(key, max_bytes=max_bytes)

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        self.calls["list_after"] += 1
        return self.inner.list_after(prefix, start_after)

    def delete(self, keys: list[str]) -> None:
        self.calls["delete"] += 1
        self.inner.delete(keys)

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        self.calls["read_versioned"] += 1
        return self.inner.read_versioned(key, max_bytes=max_bytes)

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        self.calls["write_versioned"] += 1
        return self.inner.write_versioned(key, data, expect)

    def write_overwrite(self, key: str, data: bytes) -> None:
        self.calls["write_overwrite"] += 1
        self.inner.write_overwrite(key, data)

    def close(self) -> None:
        self.inner.close()


def make_zeitgeist(
    backend: LogBackend, peer_id: str, wall: ManualClock, **options: Any
) -> Zeitgeist:
    return Zeitgeist(backend, peer_id, HybridLogicalClock(wall), wall_ms=wall, **options)


def beat(peer_id: str, cursor_hlc: int, last_seen_ms: int, seq: int = 0) -> Heartbeat:
    return Heartbeat(
        peer_id=peer_id,
        cursor_hlc=cursor_hlc,
        last_seen_ms=last_seen_ms,
        index_version="minilm-int8-v1",
        public_key=None,
        seq=seq,
    )


# ---- hybrid logical clock ---------------------------------------------------------------


def test_hlc_never_goes_backwards_when_the_wall_clock_does() -> None:
    wall = ManualClock(100_000)
    clock = HybridLogicalClock(wall)
    values = [clock.now()]
    for step in (0, -5_000, -1, 0, 7_000, -60_000, 1):
        wall.advance(step)
        values.append(clock.now())
    assert all(a < b for a, b in itertools.pairwise(values))
    physical = [HybridLogicalClock.physical_ms(v) for v in values]
    counters = [HybridLogicalClock.counter(v) for v in values]
    assert physical == [100_000] * 5 + [101_999] * 3  # held while the wall lagged
    assert counters == [0, 1, 2, 3, 4, 0, 1, 2]


def test_hlc_stays_above_a_remote_value_far_ahead() -> None:
    wall = ManualClock(10_000)
    clock = HybridLogicalClock(wall)
    before = clock.now()
    remote = hlc_from_ms(10_000 + 3_600_000) | 41
    clock.observe(remote)
    clock.observe(before)  # an older value changes nothing
    after = [clock.now() for _ in range(3)]
    assert after == [remote + 1, remote + 2, remote + 3]
    wall.advance(3_600_001)
    assert clock.now() == hlc_from_ms(10_000 + 3_600_001)


def test_hlc_counter_overflow_carries_into_the_physical_part() -> None:
    clock = HybridLogicalClock(ManualClock(5))
    values = [clock.now() for _ in range((1 << COUNTER_BITS) + 2)]
    assert len(set(values)) == len(values) and values == sorted(values)
    assert HybridLogicalClock.physical_ms(values[-1]) == 6
    assert HybridLogicalClock.counter(values[-1]) == 1


def test_hlc_rejects_values_outside_64_bits() -> None:
    clock = HybridLogicalClock(ManualClock())
    with pytest.raises(InvalidHlc, match="observed hlc"):
        clock.observe(1 << 64)
    with pytest.raises(InvalidHlc, match="observed hlc"):
        clock.observe(-1)
    with pytest.raises(InvalidHlc, match="integer"):
        clock.observe("12")  # type: ignore[arg-type]


# ---- publishing and polling ------------------------------------------------------------


def test_idle_poll_is_a_single_request(tmp_path: Path) -> None:
    wall = ManualClock()
    writer = make_zeitgeist(DirectoryBackend(tmp_path), "writer", wall)
    published = []
    for seq in range(5):
        entries = one_of_each_kind(origin="writer", base_ms=wall.ms)
        published.append(writer.publish(writer.prepare(entries, seq)).key)
        wall.advance(1_000)

    counting = CountingBackend(DirectoryBackend(tmp_path))
    reader = make_zeitgeist(counting, "reader", ManualClock())
    applied: set[str] = set()
    first = reader.poll(0, applied.__contains__)
    assert first == published
    assert counting.calls == {"list_after": 1}
    applied.update(first)
    counting.calls.clear()
    cursor = max(parse_segment_key(k).hlc for k in applied)
    assert reader.poll(cursor, applied.__contains__) == []
    assert counting.calls == {"list_after": 1}
    # Polling observed the writer's keys, so the reader now stamps above them.
    assert reader.clock.now() > cursor


def test_keys_from_far_in_the_future_are_deferred_not_observed(tmp_path: Path) -> None:
    two_hours_ms = 2 * 3_600_000
    future_wall = ManualClock(BASE_MS + two_hours_ms)
    writer = make_zeitgeist(DirectoryBackend(tmp_path), "hasty", future_wall)
    key = writer.publish(writer.prepare(one_of_each_kind("hasty", future_wall.ms), 0)).key
    wall = ManualClock()
    reader = make_zeitgeist(DirectoryBackend(tmp_path), "reader", wall)
    assert reader.poll(0, lambda k: False) == []
    assert reader.counters["segment_from_the_future"] == 1
    assert HybridLogicalClock.physical_ms(reader.clock.now()) == BASE_MS
    wall.advance(two_hours_ms - DEFAULT_MAX_FUTURE_MS + 1)
    assert reader.poll(0, lambda k: False) == [key]
    assert reader.clock.now() > parse_segment_key(key).hlc


def test_late_publish_is_flagged(tmp_path: Path) -> None:
    wall = ManualClock()
    delay_ms = {"seg/": 0}

    def slow_segment_writes(key: str) -> None:
        if key.startswith("seg/"):
            wall.advance(delay_ms["seg/"])

    backend = CountingBackend(DirectoryBackend(tmp_path), on_create=slow_segment_writes)
    log = make_zeitgeist(backend, "slowpoke", wall)
    on_time = log.publish(log.prepare(one_of_each_kind("slowpoke", wall.ms), 0))
    assert not on_time.late
    delay_ms["seg/"] = DEFAULT_WINDOW_MS // 2
    assert not log.publish(log.prepare(one_of_each_kind("slowpoke", wall.ms), 1)).late
    delay_ms["seg/"] = DEFAULT_WINDOW_MS // 2 + 1
    late = log.publish(log.prepare(one_of_each_kind("slowpoke", wall.ms), 2))
    assert late.late
    # The republished copy goes under a fresh, later key.
    delay_ms["seg/"] = 0
    again = log.publish(log.prepare(one_of_each_kind("slowpoke", wall.ms), 3))
    assert not again.late and again.key > late.key


def test_segment_key_is_above_every_entry_hlc(tmp_path: Path) -> None:
    wall = ManualClock()
    log = make_zeitgeist(DirectoryBackend(tmp_path), "p", wall)
    ahead = one_of_each_kind("p", base_ms=wall.ms + 90_000)
    prepared = log.prepare(ahead, 0)
    assert prepared.hlc > max(e.hlc for e in ahead)
    assert parse_segment_key(prepared.key).hlc == prepared.hlc


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    wall = ManualClock()
    log = make_zeitgeist(DirectoryBackend(tmp_path), "p", wall)
    with pytest.raises(EmptySegment, match="empty segment"):
        log.prepare([], 0)
    with pytest.raises(InvalidSetting, match="window_ms"):
        make_zeitgeist(DirectoryBackend(tmp_path), "p", wall, window_ms=0)
    with pytest.raises(InvalidHeartbeat, match="cannot write the heartbeat of peer q"):
        log.heartbeat(beat("q", 0, wall.ms))


def test_a_second_process_is_fenced_below_the_peers_claims_even_after_compaction(
    tmp_path: Path,
) -> None:
    backend = DirectoryBackend(tmp_path)
    wall = ManualClock()
    first = make_zeitgeist(backend, "p", wall, window_ms=10_000)
    for seq in range(3):
        first.publish(first.prepare(one_of_each_kind("p", wall.ms), seq))
        wall.advance(10_000)
    wall.advance(30_000)
    first.heartbeat(beat("p", hlc_from_ms(wall.ms), wall.ms))
    report = first.compact(wall.ms)
    assert report is not None and report.outcome is CompactionOutcome.COMPACTED
    assert (report.segments_folded, report.claims_deleted) == (3, 2)
    assert backend.list_after(claim_prefix("p"), "") == [claim_key("p", 2)]
    # A second process, or a database from before the last publish: its counter is behind.
    for seq in (0, 1):
        second = make_zeitgeist(backend, "p", wall, window_ms=10_000)
        with pytest.raises(FencedOut, match="seq 2 is claimed under this peer's key"):
            second.publish(second.prepare(one_of_each_kind("p", wall.ms), seq))
    # The owner goes on above its claims.
    first.publish(first.prepare(one_of_each_kind("p", wall.ms), 3))
    assert backend.list_after(claim_prefix("p"), "") == [claim_key("p", 2), claim_key("p", 3)]


# ---- heartbeats ---------------------------------------------------------------------------


def test_heartbeats_round_trip_and_unreadable_ones_are_counted(tmp_path: Path) -> None:
    backend = DirectoryBackend(tmp_path)
    wall = ManualClock()
    alive = make_zeitgeist(backend, "alive", wall)
    alive.heartbeat(beat("alive", 123, wall.ms, seq=4))
    make_zeitgeist(backend, "silent", wall).heartbeat(
        beat("silent", 99, wall.ms - DEFAULT_LIVENESS_TIMEOUT_MS - 1)
    )
    backend.write_overwrite(heartbeat_key("garbled"), b"{not json")
    backend.write_overwrite(heartbeat_key("impostor"), beat("alive", 1, wall.ms).to_bytes())

    beats = alive.heartbeats()
    assert sorted(b.peer_id for b in beats) == ["alive", "silent"]
    assert beat("alive", 123, wall.ms, seq=4) in beats
    assert alive.counters["heartbeat_unreadable"] == 2
    assert [b.peer_id for b in alive.live_peers(wall.ms)] == ["alive"]


# ---- compaction lease and folding -------------------------------------------------------


def test_compaction_lease_is_exclusive_until_it_expires(tmp_path: Path) -> None:
    backend = DirectoryBackend(tmp_path)
    wall = ManualClock()
    first = make_zeitgeist(backend, "first", wall)
    second = make_zeitgeist(backend, "second", wall)
    # Simulate a compactor that took the lease and crashed before releasing it.
    backend.write_versioned(
        LEASE_KEY, b'{"expires_ms":%d,"holder":"first"}' % (wall.ms + 1_000), None
    )
    assert second.compact(wall.ms) is None
    first.heartbeat(beat("first", 0, wall.ms))
    report = first.compact(wall.ms)  # its own stale lease does not block it
    assert report is not None and report.outcome is CompactionOutcome.NOTHING_TO_FOLD
    assert second.compact(wall.ms) is not None  # released after use
    backend.write_versioned(
        LEASE_KEY,
        b'{"expires_ms":%d,"holder":"first"}' % (wall.ms + DEFAULT_LEASE_TTL_MS),
        backend.read_versioned(LEASE_KEY).etag,  # type: ignore[union-attr]
    )
    assert second.compact(wall.ms + DEFAULT_LEASE_TTL_MS) is None
    assert second.compact(wall.ms + DEFAULT_LEASE_TTL_MS + 1) is not None  # expired: taken over


def test_fold_drops_expired_pulses_and_duplicates() -> None:
    entries = one_of_each_kind()
    short_lived = PulseEntry(
        hlc=entries[4].hlc + 1,
        origin="peer_a",
        pulse=make_pulse(PulseKind.DECAY, ts_ms=BASE_MS, ttl_s=10.0, seed=3),
    )
    folded = fold_entries([*reversed(entries), short_lived, *entries[:3]], [], BASE_MS + 20_000)
    assert folded.duplicates_dropped == 3
    assert folded.expired_pulses_dropped == 1
    assert folded.forget_pulses_stripped == 0
    assert folded.entries == entries  # ordered by (hlc, origin, id)

    much_later = BASE_MS + 10 * 3600 * 1000
    old = content_hash("old peer_a")
    stripped_once = fold_entries(entries, [], much_later)
    assert stripped_once.expired_pulses_dropped == 1
    assert stripped_once.forget_pulses_stripped == 1
    tombstones = [e for e in stripped_once.entries if isinstance(e, TombstoneEntry)]
    assert [(t.content_hash, t.forget_pulse) for t in tombstones] == [(old, None)]
    # Folding the stripped snapshot together with the original segment keeps one tombstone.
    again: list[Entry] = [*stripped_once.entries, *entries]
    refolded = fold_entries(again, [], much_later)
    assert refolded.entries == stripped_once.entries


def test_fold_keeps_unknown_entries_once() -> None:
    future = {"v": 2, "kind": "assert", "hlc": 5, "origin": "p", "id": "x"}
    folded = fold_entries([], [future, dict(future), {"v": 3}], BASE_MS)
    assert folded.unknown == [{"v": 3}, future]
