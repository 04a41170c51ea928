"""Roll-ups, against every backend (dir, s3, redis) on real stores.

A reader's requests per poll must not grow with the number of peers publishing; what it
takes from a roll-up must be exactly what the segments hold, each copy verified like a
segment read from the log; a copy that fails is read from the log instead; a reader waits
for a roll-up only while someone writes them, and takes the lease over when nobody does;
compaction deletes the roll-ups it folded.
"""

from __future__ import annotations

from collections.abc import Sequence

from dreamcycle.zeitgeist.backend import LogBackend
from dreamcycle.zeitgeist.defaults import DEFAULT_LEASE_TTL_MS
from dreamcycle.zeitgeist.entries import decode_segment, encode_segment
from dreamcycle.zeitgeist.log import CompactionOutcome, Zeitgeist
from dreamcycle.zeitgeist.object_keys import (
    SEGMENT_PREFIX,
    is_rollup_key,
    parse_segment_key,
    rollup_key,
)
from dreamcycle.zeitgeist.signing import Keyring, Signer, Verifier, generate_key
from tests.test_zeitgeist_codec import one_of_each_kind
from tests.test_zeitgeist_log import CountingBackend, ManualClock, beat, make_zeitgeist

WINDOW_MS = 10_000
#: A reader waits this long for a roll-up before it reads a segment itself.
WAIT_MS = 4_000


class Mesh:
    """Peers on one backend, each signing, all trusting each other's keys."""

    def __init__(self, backend: LogBackend, names: Sequence[str], wall: ManualClock) -> None:
        self.wall = wall
        self.backend = backend
        self.signers = {name: Signer(name, generate_key()) for name in names}
        self.keyring = Keyring.of([s.trusted_key() for s in self.signers.values()])
        self.counting: dict[str, CountingBackend] = {}
        self.logs: dict[str, Zeitgeist] = {}
        self.applied: dict[str, set[str]] = {}
        for name in names:
            self.counting[name] = CountingBackend(backend)
            log = make_zeitgeist(
                self.counting[name],
                name,
                wall,
                window_ms=WINDOW_MS,
                signer=self.signers[name],
                verifier=Verifier(self.keyring, strict=True),
            )
            log.configure_rollups(wait_ms=WAIT_MS)
            self.logs[name] = log
            self.applied[name] = set()
        self.seq = dict.fromkeys(names, 0)

    def publish(self, name: str) -> str:
        log = self.logs[name]
        prepared = log.prepare(one_of_each_kind(name, self.wall.ms), self.seq[name])
        self.seq[name] += 1
        return log.publish(prepared).key

    def scan(self, name: str) -> tuple[dict[str, set[str]], list[str]]:
        """What a cycle's scan does: poll, take what roll-ups hold, fetch the rest not
        waited for; entry ids per segment key read, and the keys waited for."""
        log, applied = self.logs[name], self.applied[name]
        keys = [k for k in log.poll(0, applied.__contains__) if f"-{name}-" not in k]
        rolled = log.read_rollups(keys)
        got = {key: {e.id for e in decoded.entries} for key, decoded in rolled.segments.items()}
        for key in keys:
            if key not in got and key not in rolled.deferred:
                got[key] = {e.id for e in log.fetch(key).entries}
        applied.update(got)
        return got, rolled.deferred


def entries_of(backend: LogBackend, key: str) -> set[str]:
    return {e.id for e in decode_segment(backend.read(key)).entries}


def test_a_readers_requests_do_not_grow_with_the_peers_publishing(backend: LogBackend) -> None:
    wall = ManualClock()
    writers = [f"w{i}" for i in range(8)]
    mesh = Mesh(backend, ["holder", "reader", *writers], wall)
    reader_calls = mesh.counting["reader"].calls
    per_round: list[tuple[int, int]] = []
    for publishing in (2, 8):
        keys = [mesh.publish(name) for name in writers[:publishing]]
        # Nobody rolls up at first: the holder reads the segments and takes the lease.
        mesh.scan("holder")
        report = mesh.logs["holder"].roll_up(wall.ms)
        assert report is not None and report.segments == publishing
        assert mesh.logs["holder"].rolls_up()
        before = (reader_calls["list_after"], reader_calls["read"])
        got, deferred = mesh.scan("reader")
        assert deferred == [] and set(got) == set(keys)
        per_round.append((reader_calls["list_after"] - before[0], reader_calls["read"] - before[1]))
        # Exactly what each segment holds, as read from the log itself.
        assert all(got[key] == entries_of(backend, key) for key in keys)
        wall.advance(1_000)
    # One listing and one roll-up read per poll, however many peers published.
    assert per_round == [(1, 1), (1, 1)]


def test_a_reader_waits_only_while_someone_rolls_up(backend: LogBackend) -> None:
    wall = ManualClock()
    mesh = Mesh(backend, ["a", "b", "h"], wall)
    first = mesh.publish("a")
    mesh.scan("h")
    assert mesh.logs["h"].roll_up(wall.ms) is not None
    assert mesh.scan("b") == ({first: entries_of(backend, first)}, [])
    wall.advance(500)
    second = mesh.publish("a")
    assert mesh.scan("b") == ({}, [second]), "a roll-up is being written: wait for it"
    mesh.scan("h")
    assert mesh.logs["h"].roll_up(wall.ms) is not None
    assert mesh.scan("b") == ({second: entries_of(backend, second)}, [])
    # h stops rolling up: b waits, then reads the segment itself.
    wall.advance(500)
    third = mesh.publish("a")
    assert mesh.scan("b") == ({}, [third])
    wall.advance(WAIT_MS + 1)
    assert mesh.scan("b") == ({third: entries_of(backend, third)}, [])
    assert mesh.logs["b"].roll_up(wall.ms) is None, "h's lease has not expired yet"
    wall.advance(DEFAULT_LEASE_TTL_MS)
    fourth = mesh.publish("a")
    assert mesh.scan("b") == ({fourth: entries_of(backend, fourth)}, [])
    report = mesh.logs["b"].roll_up(wall.ms)
    assert report is not None and report.segments == 1 and mesh.logs["b"].rolls_up()


def test_an_altered_copy_is_refused_and_read_from_the_log(backend: LogBackend) -> None:
    wall = ManualClock()
    mesh = Mesh(backend, ["a", "b", "mallory"], wall)
    key = mesh.publish("a")
    # A trusted peer writes a roll-up whose copy of a's segment holds other lines under
    # a's seal.
    genuine = decode_segment(backend.read(key))
    seal = genuine.seal
    assert seal is not None
    forged = encode_segment(one_of_each_kind("a", wall.ms + 5), seal=lambda digest: seal)
    hlc = parse_segment_key(key).hlc
    rk = rollup_key(hlc, hlc, "mallory")
    backend.create(rk, mesh.logs["mallory"]._encode_rollup(rk, [(key, forged)]))
    got, deferred = mesh.scan("b")
    assert got == {} and deferred == [key], "the forged copy is not taken"
    assert mesh.logs["b"].counters["rollup_copy_refused"] == 1
    wall.advance(WAIT_MS + 1)
    assert mesh.scan("b") == ({key: {e.id for e in genuine.entries}}, [])


def test_a_rollup_not_sealed_by_a_trusted_key_is_refused(backend: LogBackend) -> None:
    wall = ManualClock()
    mesh = Mesh(backend, ["a", "b"], wall)
    key = mesh.publish("a")
    hlc = parse_segment_key(key).hlc
    stranger = make_zeitgeist(backend, "stranger", wall, signer=Signer("stranger", generate_key()))
    rk = rollup_key(hlc, hlc, "stranger")
    backend.create(rk, stranger._encode_rollup(rk, [(key, backend.read(key))]))
    backend.create(rollup_key(hlc, hlc, "junk"), b"not a roll-up\n")
    # Refused, so nobody is taken to be rolling up: the segment is read at once.
    assert mesh.scan("b") == ({key: entries_of(backend, key)}, [])
    assert mesh.logs["b"].counters["rollup_refused"] == 2


def test_compaction_deletes_the_rollups_it_folded(backend: LogBackend) -> None:
    wall = ManualClock()
    mesh = Mesh(backend, ["a", "b"], wall)
    mesh.publish("a")
    mesh.scan("b")
    assert mesh.logs["b"].roll_up(wall.ms) is not None
    wall.advance(30_000)
    later = mesh.publish("a")
    mesh.scan("b")
    rolled = mesh.logs["b"].roll_up(wall.ms)
    assert rolled is not None and rolled.segments == 1
    for name in ("a", "b"):
        mesh.logs[name].heartbeat(beat(name, parse_segment_key(later).hlc, wall.ms))
    report = mesh.logs["a"].compact(wall.ms)
    assert report is not None and report.outcome is CompactionOutcome.COMPACTED
    assert report.rollups_deleted == 1 and report.segments_folded == 1
    listing = backend.list_after(SEGMENT_PREFIX, "")
    assert [k for k in listing if is_rollup_key(k)] == [rolled.key]
    assert [k for k in listing if not is_rollup_key(k)] == [later]
