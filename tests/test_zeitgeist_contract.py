"""The backend contract, run against every backend (dir, s3, redis) on real stores.

The first half checks the LogBackend primitives; the second half checks the log
built on them: polling windows, fencing, crash-retry, compaction and bootstrap.

One file: the contract is one list of properties every backend must have, each test run
against all of them (but the directory's own few at the end), so a property cannot hold for
one backend unseen.
"""

from __future__ import annotations

import multiprocessing
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.zeitgeist.backend import BackendError, KeyExists, LogBackend, PreconditionFailed
from dreamcycle.zeitgeist.directory import DirectoryBackend, InvalidBackendKey
from dreamcycle.zeitgeist.entries import Entry, PulseEntry, encode_entry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.log import CompactionOutcome, FencedOut, Zeitgeist
from dreamcycle.zeitgeist.object_keys import (
    SEGMENT_PREFIX,
    SNAPSHOT_PREFIX,
    claim_key,
    claim_prefix,
    parse_segment_key,
    segment_key,
)
from tests.test_zeitgeist_codec import (
    BASE_MS,
    make_assert,
    make_pulse,
    ndjson_segment,
    one_of_each_kind,
)
from tests.test_zeitgeist_log import CountingBackend, ManualClock, beat, make_zeitgeist

PAGED_KEY_COUNT = 1100
WRITER_THREADS = 8
#: A short window keeps the compaction timeline readable: horizon = cursor - 5 s.
TEST_WINDOW_MS = 5_000


# ---- primitives ------------------------------------------------------------------------


def test_create_then_read(backend: LogBackend) -> None:
    backend.create("seg/a", b"\x00first\xff")
    assert backend.read("seg/a") == b"\x00first\xff"
    with pytest.raises(KeyError):
        backend.read("seg/missing")


def test_create_never_overwrites(backend: LogBackend) -> None:
    backend.create("seg/once", b"original")
    with pytest.raises(KeyExists):
        backend.create("seg/once", b"impostor")
    assert backend.read("seg/once") == b"original"


def test_list_after_is_ordered_exclusive_and_pages(backend: LogBackend) -> None:
    keys = [f"seg/{i:06d}" for i in range(PAGED_KEY_COUNT)]
    with ThreadPoolExecutor(WRITER_THREADS) as pool:
        list(pool.map(lambda key: backend.create(key, b"."), reversed(keys)))
    backend.create("snap/000500", b".")
    backend.create("peers/000500.json", b"{}")
    assert backend.list_after(SEGMENT_PREFIX, "") == keys
    assert backend.list_after(SEGMENT_PREFIX, "seg/000499") == keys[500:]
    assert backend.list_after(SEGMENT_PREFIX, "seg/0004995") == keys[500:]
    assert backend.list_after(SEGMENT_PREFIX, keys[-1]) == []
    assert backend.list_after(SNAPSHOT_PREFIX, "") == ["snap/000500"]
    assert backend.list_after("peers/", "peers/000500.json") == []
    # Bounds that are no key of the prefix: below all of them, and above all of them.
    assert backend.list_after(SEGMENT_PREFIX, "peers/zzz") == keys
    assert backend.list_after(SEGMENT_PREFIX, "se") == keys
    assert backend.list_after(SEGMENT_PREFIX, "snap/") == []
    assert backend.list_after("seg/0009", "seg/000949") == keys[950:1000]


def test_write_versioned_is_compare_and_swap(backend: LogBackend) -> None:
    assert backend.read_versioned("lease/x.json") is None
    first = backend.write_versioned("lease/x.json", b"one", None)
    with pytest.raises(PreconditionFailed):
        backend.write_versioned("lease/x.json", b"two", None)
    second = backend.write_versioned("lease/x.json", b"two", first)
    assert second != first
    with pytest.raises(PreconditionFailed):
        backend.write_versioned("lease/x.json", b"three", first)
    current = backend.read_versioned("lease/x.json")
    assert current is not None and (current.data, current.etag) == (b"two", second)
    with pytest.raises(PreconditionFailed):
        backend.write_versioned("lease/absent.json", b"x", second)


def test_write_versioned_has_one_winner(backend: LogBackend) -> None:
    start = threading.Barrier(WRITER_THREADS)

    def contend(n: int) -> bool:
        start.wait()
        try:
            backend.write_versioned("lease/race.json", b"%d" % n, None)
        except PreconditionFailed:
            return False
        return True

    with ThreadPoolExecutor(WRITER_THREADS) as pool:
        wins = list(pool.map(contend, range(WRITER_THREADS)))
    assert wins.count(True) == 1
    winner = wins.index(True)
    current = backend.read_versioned("lease/race.json")
    assert current is not None and current.data == b"%d" % winner


def test_write_overwrite_replaces(backend: LogBackend) -> None:
    backend.write_overwrite("peers/p.json", b"v1")
    backend.write_overwrite("peers/p.json", b"v2")
    assert backend.read("peers/p.json") == b"v2"
    assert backend.list_after("peers/", "") == ["peers/p.json"]


def test_delete_is_idempotent(backend: LogBackend) -> None:
    backend.create("seg/doomed", b"x")
    backend.create("seg/kept", b"y")
    backend.delete(["seg/doomed", "seg/never-existed"])
    backend.delete(["seg/doomed"])
    backend.delete([])
    assert backend.list_after(SEGMENT_PREFIX, "") == ["seg/kept"]
    with pytest.raises(KeyError):
        backend.read("seg/doomed")
    backend.create("seg/doomed", b"again")  # a deleted key can be created anew
    assert backend.read("seg/doomed") == b"again"


def test_probe_accepts_a_working_store(backend: LogBackend) -> None:
    backend.probe()
    assert backend.list_after(SEGMENT_PREFIX, "") == []


# ---- the log on top -------------------------------------------------------------------------


def publish_cycle(log: Zeitgeist, wall: ManualClock, seq: int, entries: list[Entry]) -> str:
    result = log.publish(log.prepare(entries, seq))
    assert not result.late
    return result.key


def entry_ids(log: Zeitgeist, keys: Iterable[str]) -> set[str]:
    ids: set[str] = set()
    for key in keys:
        decoded = log.fetch(key)
        assert decoded.rejected == []
        ids.update(e.id for e in decoded.entries)
    return ids


def test_append_then_poll_after_a_cursor(backend: LogBackend) -> None:
    wall = ManualClock()
    writer = make_zeitgeist(backend, "writer", wall, window_ms=TEST_WINDOW_MS)
    reader = make_zeitgeist(backend, "reader", ManualClock(), window_ms=TEST_WINDOW_MS)
    keys = []
    for seq in range(4):
        keys.append(publish_cycle(writer, wall, seq, one_of_each_kind("writer", wall.ms)))
        wall.advance(10_000)
    applied: set[str] = set()
    assert reader.poll(0, applied.__contains__) == keys
    first = reader.fetch(keys[0]).entries
    assert first == one_of_each_kind("writer", BASE_MS)
    applied.update(keys[:2])
    cursor = parse_segment_key(keys[1]).hlc
    # Everything from cursor - window on, minus what is applied.
    assert reader.poll(cursor, applied.__contains__) == keys[2:]
    applied.update(keys)
    assert reader.poll(parse_segment_key(keys[-1]).hlc, applied.__contains__) == []


def test_late_segment_inside_the_window_is_still_polled(backend: LogBackend) -> None:
    wall = ManualClock()
    prompt = make_zeitgeist(backend, "prompt", wall, window_ms=TEST_WINDOW_MS)
    laggard = make_zeitgeist(
        backend, "laggard", ManualClock(wall.ms - 3_000), window_ms=TEST_WINDOW_MS
    )
    ancient = make_zeitgeist(
        backend, "ancient", ManualClock(wall.ms - 9_000), window_ms=TEST_WINDOW_MS
    )
    reader = make_zeitgeist(backend, "reader", ManualClock(), window_ms=TEST_WINDOW_MS)
    slow = laggard.prepare(one_of_each_kind("laggard", wall.ms - 3_000), 0)
    too_slow = ancient.prepare(one_of_each_kind("ancient", wall.ms - 9_000), 0)

    on_time = publish_cycle(prompt, wall, 0, one_of_each_kind("prompt", wall.ms))
    applied = set(reader.poll(0, lambda key: False))
    assert applied == {on_time}
    cursor = parse_segment_key(on_time).hlc

    laggard.publish(slow)  # lands after the reader moved its cursor past it
    ancient.publish(too_slow)
    assert slow.key < on_time and too_slow.key < slow.key
    assert reader.poll(cursor, applied.__contains__) == [slow.key]


def test_two_processes_with_one_peer_id_are_fenced(backend: LogBackend) -> None:
    first = make_zeitgeist(backend, "twin", ManualClock(BASE_MS))
    second = make_zeitgeist(backend, "twin", ManualClock(BASE_MS + 7))
    winner = first.publish(first.prepare(one_of_each_kind("twin"), 0))
    loser = second.prepare(one_of_each_kind("twin", BASE_MS + 1), 0)
    with pytest.raises(FencedOut, match="claim for seq 0 names key seg/") as caught:
        second.publish(loser)
    assert "another process is publishing as peer twin" in str(caught.value)
    assert backend.list_after(SEGMENT_PREFIX, "") == [winner.key]

    # Same clock, same key, different entries: the segment itself collides.
    third = make_zeitgeist(backend, "triplet", ManualClock(BASE_MS))
    fourth = make_zeitgeist(backend, "triplet", ManualClock(BASE_MS))
    entries = one_of_each_kind("triplet")
    mine = third.prepare(entries, 0)
    # The key carries the segment's highest HLC: stamp the other entry with the same.
    other = make_assert("something else", hlc=max(e.hlc for e in entries), origin="triplet")
    theirs = fourth.prepare([other], 0)
    assert mine.key == theirs.key and mine.data != theirs.data
    third.publish(mine)
    with pytest.raises(FencedOut, match="exists with different content"):
        fourth.publish(theirs)
    assert backend.read(mine.key) == mine.data


def test_crash_retry_of_the_same_prepared_segment_succeeds(backend: LogBackend) -> None:
    wall = ManualClock()
    log = make_zeitgeist(backend, "phoenix", wall)
    prepared = log.prepare(one_of_each_kind("phoenix"), 0)
    assert log.publish(prepared).key == prepared.key
    assert log.publish(prepared).key == prepared.key  # crashed before recording success

    # Crashed between the claim and the segment: the retry finishes the job.
    halfway = log.prepare(one_of_each_kind("phoenix", wall.ms + 1), 1)
    backend.create(claim_key("phoenix", 1), halfway.key.encode())
    assert log.publish(halfway).key == halfway.key
    assert backend.list_after(SEGMENT_PREFIX, "") == [prepared.key, halfway.key]
    assert backend.read(halfway.key) == halfway.data


def test_compaction_then_bootstrap_sees_every_entry(backend: LogBackend) -> None:
    start_ms = BASE_MS
    wall = ManualClock(start_ms)
    peers = {
        name: make_zeitgeist(backend, name, wall, window_ms=TEST_WINDOW_MS) for name in ("a", "b")
    }
    short_lived = PulseEntry(
        hlc=hlc_from_ms(start_ms),
        origin="a",
        pulse=make_pulse(PulseKind.DECAY, ts_ms=start_ms, ttl_s=20.0, origin="a", seed=11),
    )
    keys: list[str] = []
    for step in range(6):  # segments at +0 s .. +50 s, alternating peers
        name = "ab"[step % 2]
        entries = one_of_each_kind(name, wall.ms)
        if step == 0:
            entries.append(short_lived)
        keys.append(publish_cycle(peers[name], wall, step, entries))
        wall.advance(10_000)
    everything = entry_ids(peers["a"], keys)
    assert short_lived.id in everything

    # Both live peers have applied up to +40 s; a peer silent for hours is not waited for.
    for name, log in peers.items():
        log.heartbeat(beat(name, hlc_from_ms(start_ms + 40_000), wall.ms))
    ghost = make_zeitgeist(backend, "ghost", wall, window_ms=TEST_WINDOW_MS)
    ghost.heartbeat(beat("ghost", 0, wall.ms - 4 * 3_600_000))

    report = peers["b"].compact(wall.ms)
    assert report is not None and report.outcome is CompactionOutcome.COMPACTED
    assert report.horizon_hlc == hlc_from_ms(start_ms + 35_000)
    # Each peer's highest folded claim stays (a2, b3): it fences a second process.
    assert (report.segments_folded, report.segments_deleted, report.claims_deleted) == (4, 4, 2)
    assert report.expired_pulses_dropped == 1 and report.duplicates_dropped == 0
    assert backend.list_after(SEGMENT_PREFIX, "") == keys[4:]
    assert backend.list_after(claim_prefix("a"), "") == [claim_key("a", 2), claim_key("a", 4)]

    expected = everything - {short_lived.id}
    assert bootstrap_ids(backend, wall) == expected

    # Two more rounds: the previous snapshot is kept as a fallback, older ones go.
    later = [*one_of_each_kind("a", wall.ms), make_assert("late thought", hlc=hlc_from_ms(wall.ms))]
    keys.append(publish_cycle(peers["a"], wall, 6, later))  # at +60 s
    expected |= {e.id for e in later}
    for cursor_ms, folded, snapshots_deleted in ((50_000, 1, 0), (70_000, 2, 1)):
        wall.ms = start_ms + cursor_ms
        for name, log in peers.items():
            log.heartbeat(beat(name, hlc_from_ms(wall.ms), wall.ms))
        again = peers["a"].compact(wall.ms)
        assert again is not None and again.outcome is CompactionOutcome.COMPACTED
        assert (again.segments_folded, again.snapshots_deleted) == (folded, snapshots_deleted)
        assert bootstrap_ids(backend, wall) == expected
    snapshots = backend.list_after(SNAPSHOT_PREFIX, "")
    assert len(snapshots) == 2 and report.snapshot_key not in snapshots
    assert backend.list_after(SEGMENT_PREFIX, "") == []
    assert backend.list_after(claim_prefix("a"), "") == [claim_key("a", 6)]
    assert backend.list_after(claim_prefix("b"), "") == [claim_key("b", 5)]


def bootstrap_ids(backend: LogBackend, wall: ManualClock) -> set[str]:
    """What a brand-new peer learns: the newest snapshot, then the segments after it."""
    newcomer = make_zeitgeist(backend, "newcomer", ManualClock(wall.ms), window_ms=TEST_WINDOW_MS)
    snapshot = newcomer.bootstrap()
    assert snapshot is not None
    ids = {e.id for e in snapshot.entries}
    ids |= entry_ids(newcomer, newcomer.poll(snapshot.hlc, lambda key: False))
    return ids


class DeleteCrashes(CountingBackend):
    """Dies on the first delete, as a compactor killed after writing its snapshot would."""

    def delete(self, keys: list[str]) -> None:
        raise BackendError("simulated crash before deleting")


def test_compaction_crash_after_the_snapshot_loses_nothing(backend: LogBackend) -> None:
    wall = ManualClock()
    writer = make_zeitgeist(backend, "w", wall, window_ms=TEST_WINDOW_MS)
    keys = []
    for seq in range(3):
        keys.append(publish_cycle(writer, wall, seq, one_of_each_kind("w", wall.ms)))
        wall.advance(10_000)
    everything = entry_ids(writer, keys)
    writer.heartbeat(beat("w", hlc_from_ms(wall.ms), wall.ms))

    crashing = make_zeitgeist(DeleteCrashes(backend), "w", wall, window_ms=TEST_WINDOW_MS)
    with pytest.raises(BackendError, match="simulated crash"):
        crashing.compact(wall.ms)
    assert len(backend.list_after(SNAPSHOT_PREFIX, "")) == 1
    assert backend.list_after(SEGMENT_PREFIX, "") == keys  # nothing deleted yet
    assert bootstrap_ids(backend, wall) == everything  # snapshot and segments overlap

    report = writer.compact(wall.ms)  # the lease was released; same horizon: nothing new
    assert report is not None and report.outcome is CompactionOutcome.NOTHING_TO_FOLD
    wall.advance(10_000)
    writer.heartbeat(beat("w", hlc_from_ms(wall.ms), wall.ms))
    report = writer.compact(wall.ms)
    assert report is not None and report.outcome is CompactionOutcome.COMPACTED
    assert report.duplicates_dropped == 3 * len(one_of_each_kind())
    assert backend.list_after(SEGMENT_PREFIX, "") == []
    assert bootstrap_ids(backend, wall) == everything


def test_bad_and_unknown_entries_are_skipped_with_counts(backend: LogBackend) -> None:
    good = one_of_each_kind("odd")
    tampered = {**encode_entry(good[5]), "reward": 1.0}
    future = {**encode_entry(good[0]), "v": 3}
    strange = {**encode_entry(good[1]), "kind": "premonition"}
    data = ndjson_segment(
        [encode_entry(good[0]), future, "{oops", strange, tampered, encode_entry(good[6])]
    )
    key = segment_key(hlc_from_ms(BASE_MS), "odd", 0)
    backend.create(key, data)
    backend.create(segment_key(hlc_from_ms(BASE_MS) + 1, "odd", 1), b"not a segment")
    reader = make_zeitgeist(backend, "reader", ManualClock())
    polled = reader.poll(0, lambda k: False)
    assert polled[0] == key and len(polled) == 2
    decoded = reader.fetch(key)
    assert decoded.entries == [good[0], good[6]]
    assert decoded.skipped == {"unknown_version:3": 1, "unknown_kind:premonition": 1}
    assert [(r.line_no, r.reason.split(":")[0]) for r in decoded.rejected] == [
        (3, "invalid JSON"),
        (5, "id mismatch"),
    ]


# ---- directory backend specifics -----------------------------------------------------------

CAS_INCREMENTS_PER_PROCESS = 25
CAS_PROCESSES = 4


def _increment_counter(root: str, times: int) -> None:
    backend = DirectoryBackend(Path(root))
    done = 0
    while done < times:
        current = backend.read_versioned("lease/counter")
        assert current is not None
        try:
            backend.write_versioned("lease/counter", b"%d" % (int(current.data) + 1), current.etag)
        except PreconditionFailed:
            continue
        done += 1


def test_directory_compare_and_swap_holds_across_processes(tmp_path: Path) -> None:
    DirectoryBackend(tmp_path).write_versioned("lease/counter", b"0", None)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(target=_increment_counter, args=(str(tmp_path), CAS_INCREMENTS_PER_PROCESS))
        for _ in range(CAS_PROCESSES)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    final = DirectoryBackend(tmp_path).read("lease/counter")
    assert int(final) == CAS_PROCESSES * CAS_INCREMENTS_PER_PROCESS


@pytest.mark.parametrize("key", ["../escape", "seg/../../x", "/abs", "seg//x", "seg/.hidden", ""])
def test_directory_refuses_keys_outside_its_root(tmp_path: Path, key: str) -> None:
    with pytest.raises(InvalidBackendKey, match="path component"):
        DirectoryBackend(tmp_path / "root").create(key, b"x")


def test_directory_listing_hides_temp_and_lock_files(tmp_path: Path) -> None:
    backend = DirectoryBackend(tmp_path)
    backend.create("seg/a", b"x")
    backend.write_versioned("seg/b", b"y", None)
    (tmp_path / "seg" / ".a.123.tmp").write_bytes(b"partial")
    assert backend.list_after(SEGMENT_PREFIX, "") == ["seg/a", "seg/b"]
    assert backend.list_after("", "") == []


def test_a_directory_log_whose_root_is_a_file_is_unreachable_not_empty(tmp_path: Path) -> None:
    root = tmp_path / "zeitgeist"
    backend = DirectoryBackend(root)
    assert backend.list_after(SEGMENT_PREFIX, "") == []  # not made yet: a new, empty log
    root.write_text("a mount gone wrong")
    with pytest.raises(BackendError, match="Not a directory"):
        backend.list_after(SEGMENT_PREFIX, "")
    with pytest.raises(BackendError, match="Not a directory"):
        backend.read_versioned("lease/compaction")


PROBES_PER_THREAD = 150
PROBE_THREADS = 4


def test_directory_probes_side_by_side_all_pass(tmp_path: Path) -> None:
    """A daemon starting while `doctor` runs: each probe removes the shared probe folder
    when it is done, and a probe that just created it must not fail for that."""
    backend = DirectoryBackend(tmp_path)

    def probe_many() -> None:
        for _ in range(PROBES_PER_THREAD):
            backend.probe()

    with ThreadPoolExecutor(PROBE_THREADS) as pool:
        for done in [pool.submit(probe_many) for _ in range(PROBE_THREADS)]:
            done.result()
    assert backend.list_after("", "") == []
