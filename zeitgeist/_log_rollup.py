"""Roll-ups: one peer copies recent segments into one sealed object that the others read.

Without them a peer GETs every segment every other peer publishes: N peers publishing
each cycle make N² GETs a cycle. With them, the holder of the roll-up lease
(`lease/rollup.json`) reads the segments itself, as every peer did before, and after
publishing its own writes the segments no roll-up holds yet into one object,
`seg/<last hlc>-<writer>-<first hlc>.roll`. Roll-ups sort among the segments, so the one
listing a poll makes finds them; every other peer GETs the roll-ups that hold its new
segments: a constant number of requests a cycle, whatever the number of peers publishing.

A roll-up is uncompressed (the segments in it are gzip'd already):

```
line 1   the writer's seal over the roll-up's key and the digest of every byte after line 1
line 2   {"v": 1, "kind": "rollup", "segments": [[segment key, length in bytes], ...]}
then     each segment's bytes, in that order, exactly as its own writer created them
```

A reader takes a segment from a roll-up only if the roll-up's seal holds (the check a
segment's seal gets), and the copy carries its own writer's seal, which holds for the
segment's own key (the check a segment read from the log gets, through the same code);
then every entry's signature is checked as for any segment. A roll-up therefore only saves
requests: no peer gains authority over another's entries, and a copy that is missing,
altered or unsealed is read from the log itself.

While a roll-up ended within `wait_ms` (someone is rolling up), a reader waits up to
`wait_ms` for one to hold a new segment, the cursor held before it like any segment not
yet read; past that, or when nobody rolls up, it GETs the segment and asks for the lease
itself, so a mesh whose roll-up writer stopped recovers within the lease's time to live.
Compaction deletes the roll-ups whose segments it folded (zeitgeist/_log_compaction.py).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from dreamcycle.zeitgeist._log_compaction import LogCompaction, _Lease
from dreamcycle.zeitgeist.backend import KeyExists, ObjectTooLarge
from dreamcycle.zeitgeist.entries import (
    CorruptSegment,
    DecodedSegment,
    SegmentSeal,
    canonical_json,
    parse_json,
    payload_digest,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, ms_to_hlc_span
from dreamcycle.zeitgeist.object_keys import (
    ROLLUP_LEASE_KEY,
    InvalidKey,
    RollupKey,
    is_rollup_key,
    parse_rollup_key,
    parse_segment_key,
    rollup_key,
)

ROLLUP_FORMAT_VERSION: Final = 1
ROLLUP_KIND: Final = "rollup"
#: Largest roll-up written or read: room for a cycle's segments of a large mesh.
MAX_ROLLUP_BYTES: Final = 64 * 1024 * 1024
#: Most segments one roll-up holds (the rest go into the next, or are read directly).
MAX_ROLLUP_SEGMENTS: Final = 4_096
#: Longest header line (seal or index) read before the roll-up is refused.
MAX_ROLLUP_HEADER_BYTES: Final = MAX_ROLLUP_SEGMENTS * 256
#: Roll-ups one poll reads at most; a reader far behind reads the rest next cycle.
MAX_ROLLUPS_PER_POLL: Final = 32
#: Segment bytes the roll-up writer keeps from its own reads and publishes, to roll them
#: up without reading them again.
ROLLUP_CACHE_BYTES: Final = 64 * 1024 * 1024
#: Segment and roll-up keys remembered as held by a roll-up (or read).
ROLLUP_MEMORY_KEYS: Final = 65_536
#: How refusals of roll-ups and of copies in them are counted.
ROLLUP_REFUSED: Final = "rollup_refused"
COPY_REFUSED: Final = "rollup_copy_refused"


@dataclass(frozen=True)
class RolledUp:
    """What roll-ups held of the segment keys a poll found: their decoded copies, and the
    keys to wait for (not yet in a roll-up, younger than the wait). The rest are to be read
    from the log."""

    segments: dict[str, DecodedSegment] = field(default_factory=dict)
    deferred: list[str] = field(default_factory=list)
    rollups_read: int = 0


@dataclass(frozen=True)
class RollupReport:
    key: str
    segments: int


class _Memory:
    """A bounded set of keys, the oldest forgotten first."""

    def __init__(self, size: int = ROLLUP_MEMORY_KEYS) -> None:
        self.size = size
        self._keys: OrderedDict[str, None] = OrderedDict()

    def add(self, key: str) -> None:
        self._keys[key] = None
        self._keys.move_to_end(key)
        if len(self._keys) > self.size:
            self._keys.popitem(last=False)

    def __contains__(self, key: object) -> bool:
        return key in self._keys


@dataclass
class _RollupState:
    wait_ms: int
    lease: _Lease | None = None
    #: A segment waited for longer than `wait_ms`: nobody rolls up; ask for the lease.
    writer_missing: bool = False
    #: Segments some roll-up holds (read or written here).
    covered: _Memory = field(default_factory=_Memory)
    #: Roll-ups this peer has read.
    read: _Memory = field(default_factory=_Memory)
    #: Bytes of segments read or published here while holding the lease.
    cache: OrderedDict[str, bytes] = field(default_factory=OrderedDict)
    cache_bytes: int = 0
    #: Roll-ups the last poll listed.
    listed: list[str] = field(default_factory=list)
    #: The last HLC of the newest roll-up read here whose seal held.
    newest_trusted_hlc: int = -1

    def keep(self, key: str, data: bytes) -> None:
        if key in self.cache:
            return
        self.cache[key] = data
        self.cache_bytes += len(data)
        while self.cache_bytes > ROLLUP_CACHE_BYTES and self.cache:
            _, dropped = self.cache.popitem(last=False)
            self.cache_bytes -= len(dropped)


class LogRollups(LogCompaction):
    """Writing roll-ups under a lease, and reading segments from them."""

    _rollup: _RollupState | None = None

    def configure_rollups(self, *, wait_ms: int) -> None:
        """Use roll-ups: wait up to `wait_ms` for one to hold a new segment (more than the
        roll-up writer's cycle interval), and write them when holding the lease."""
        if isinstance(wait_ms, bool) or not isinstance(wait_ms, int) or wait_ms <= 0:
            raise ValueError(f"wait_ms must be a positive number of milliseconds, got {wait_ms}")
        self._rollup = _RollupState(wait_ms=wait_ms)

    def rolls_up(self) -> bool:
        """Whether this peer holds the roll-up lease (it then reads every segment itself)."""
        state = self._rollup
        return state is not None and state.lease is not None

    # ---- hooks of the reader and the writer -------------------------------------------

    def _segment_bytes_read(self, key: str, data: bytes) -> None:
        state = self._rollup
        # Also when about to ask for the lease: the first roll-up then holds these.
        if state is not None and (state.lease is not None or state.writer_missing):
            state.keep(key, data)

    def _segment_published(self, key: str, data: bytes) -> None:
        self._segment_bytes_read(key, data)

    def _listed(self, keys: list[str]) -> None:
        if self._rollup is not None:
            self._rollup.listed = [key for key in keys if is_rollup_key(key)]

    # ---- reading ----------------------------------------------------------------------

    def read_rollups(self, keys: list[str]) -> RolledUp:
        """Copies of `keys` (segments this peer has yet to read, from its last poll) from
        the roll-ups that poll listed, and which of the others to wait for. Nothing when
        roll-ups are off, when this peer writes them, or when it cannot verify them."""
        state = self._rollup
        if state is None or not keys or self.rolls_up() or self.verifier is None:
            return RolledUp()
        wanted = {}
        for key in keys:
            try:
                wanted[key] = parse_segment_key(key).hlc
            except InvalidKey:
                continue
        now_hlc = self._now_hlc()
        wait = ms_to_hlc_span(state.wait_ms)
        listed = []
        for rk in state.listed:
            try:
                listed.append((rk, parse_rollup_key(rk)))
            except InvalidKey as exc:
                self._refused(rk, ROLLUP_REFUSED, str(exc))
        found: dict[str, DecodedSegment] = {}
        reads = 0
        for rk, parsed in listed:
            if rk in state.read:
                continue
            if not any(parsed.covers(hlc) for key, hlc in wanted.items() if key not in found):
                continue
            if reads >= MAX_ROLLUPS_PER_POLL:
                break
            reads += 1
            state.read.add(rk)
            for key, decoded in self._copies(rk, parsed):
                state.covered.add(key)
                if key in wanted and key not in found:
                    found[key] = decoded
        # Someone rolls up: a roll-up whose seal held ended within the wait.
        active = state.newest_trusted_hlc >= now_hlc - wait
        deferred = []
        for key, hlc in wanted.items():
            if key in found:
                continue
            if active and now_hlc - hlc < wait:
                deferred.append(key)
            else:
                state.writer_missing = True
        return RolledUp(found, deferred, reads)

    def _copies(self, rk: str, parsed: RollupKey) -> list[tuple[str, DecodedSegment]]:
        """The segments of roll-up `rk` that pass their own seal check; [] if the roll-up
        itself is refused (counted and logged once)."""
        try:
            data = self.backend.read(rk, max_bytes=MAX_ROLLUP_BYTES)
        except KeyError:
            return []
        except ObjectTooLarge as exc:
            self._refused(rk, ROLLUP_REFUSED, str(exc))
            return []
        try:
            index, body = self._verified_index(rk, parsed, data)
        except ValueError as exc:
            self._refused(rk, ROLLUP_REFUSED, str(exc))
            return []
        state = self._rollup
        assert state is not None
        state.newest_trusted_hlc = max(state.newest_trusted_hlc, parsed.last_hlc)
        copies = []
        offset = 0
        for key, length in index:
            piece = body[offset : offset + length]
            offset += length
            try:
                parse_segment_key(key)
                decoded = self._decode_counted(key, piece, self.segment_limits)
            except (InvalidKey, CorruptSegment):
                continue
            problem = self.seal_problem(key, decoded) if decoded.seal is not None else None
            if decoded.seal is None or problem is not None:
                why = "no seal" if problem is None else str(problem)
                self._refused(key, COPY_REFUSED, f"its copy in {rk}: {why}")
                continue
            copies.append((key, decoded))
        return copies

    def _verified_index(
        self, rk: str, parsed: RollupKey, data: bytes
    ) -> tuple[list[tuple[str, int]], bytes]:
        """The roll-up's list of (segment key, length) and the bytes they take, once its
        seal holds; ValueError naming what is wrong otherwise."""
        seal_line, newline, rest = data.partition(b"\n")
        if not newline or len(seal_line) > MAX_ROLLUP_HEADER_BYTES:
            raise ValueError("no seal line within its limit")
        try:
            seal = SegmentSeal.from_wire(parse_json(seal_line))
        except (ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"seal line is not a seal: {exc}") from None
        assert self.verifier is not None
        self.verifier.refresh()
        problem = self.verifier.check_seal(
            seal,
            rk,
            parsed.peer_id,
            payload_digest(rest),
            HybridLogicalClock.physical_ms(parsed.last_hlc),
        )
        if problem is not None:
            raise ValueError(f"not trusted: {problem}")
        index_line, newline, body = rest.partition(b"\n")
        if not newline or len(index_line) > MAX_ROLLUP_HEADER_BYTES:
            raise ValueError("no index line within its limit")
        index = _parse_index(index_line)
        if sum(length for _, length in index) != len(body):
            raise ValueError("its segments' lengths do not add up to its size")
        return index, body

    # ---- writing ----------------------------------------------------------------------

    def roll_up(self, now_ms: int) -> RollupReport | None:
        """Write the segments this peer read or published since its last roll-up into one,
        if it holds (or, since nobody rolled up in time, takes) the roll-up lease; None when
        it does not, or has nothing new. Renews the lease once half its time to live passed,
        so an idle holder costs no requests in between."""
        state = self._rollup
        if state is None or self.signer is None:
            return None
        if state.lease is None and not state.writer_missing:
            return None
        pieces: list[tuple[str, bytes]] = []
        size = 0
        for key, data in state.cache.items():
            if key in state.covered:
                continue
            if len(pieces) >= MAX_ROLLUP_SEGMENTS or size + len(data) > MAX_ROLLUP_BYTES:
                break
            pieces.append((key, data))
            size += len(data)
        due = state.lease is None or state.lease.expires_ms - now_ms < self.lease_ttl_ms // 2
        if due:
            lease = self._acquire_lease(now_ms, key=ROLLUP_LEASE_KEY)
            state.writer_missing = False
            if lease is None:  # another peer rolls up
                state.lease = None
                state.cache.clear()
                state.cache_bytes = 0
                return None
            state.lease = lease
        if not pieces:
            return None
        hlcs = [parse_segment_key(key).hlc for key, _ in pieces]
        rk = rollup_key(max(hlcs), min(hlcs), self.peer_id)
        blob = self._encode_rollup(rk, pieces)
        try:
            self.backend.create(rk, blob)
        except KeyExists:
            if not self._holds(rk, blob):
                return None  # another writer's roll-up of the same range: theirs stands
        for key, _ in pieces:
            state.covered.add(key)
            state.cache_bytes -= len(state.cache.pop(key))
        state.read.add(rk)
        return RollupReport(key=rk, segments=len(pieces))

    def _encode_rollup(self, rk: str, pieces: list[tuple[str, bytes]]) -> bytes:
        assert self.signer is not None
        index: dict[str, Any] = {
            "v": ROLLUP_FORMAT_VERSION,
            "kind": ROLLUP_KIND,
            "segments": [[key, len(data)] for key, data in pieces],
        }
        rest = canonical_json(index) + b"\n" + b"".join(data for _, data in pieces)
        seal = self.signer.seal(rk, payload_digest(rest))
        return seal.wire_bytes() + b"\n" + rest


def _parse_index(line: bytes) -> list[tuple[str, int]]:
    try:
        obj = parse_json(line)
    except ValueError as exc:
        raise ValueError(f"index line is not JSON: {exc}") from None
    if (
        not isinstance(obj, dict)
        or obj.get("v") != ROLLUP_FORMAT_VERSION
        or obj.get("kind") != ROLLUP_KIND
        or not isinstance(obj.get("segments"), list)
        or len(obj["segments"]) > MAX_ROLLUP_SEGMENTS
    ):
        raise ValueError("index line is not a roll-up index of a version read here")
    index = []
    for item in obj["segments"]:
        if (
            not isinstance(item, list)
            or len(item) != 2
            or not isinstance(item[0], str)
            or isinstance(item[1], bool)
            or not isinstance(item[1], int)
            or item[1] < 0
        ):
            raise ValueError(f"index entry {item!r} is not [segment key, length]")
        index.append((item[0], item[1]))
    return index
