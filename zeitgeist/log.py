"""The zeitgeist log on top of a LogBackend: publish, poll, heartbeats, snapshots, compaction.

Guarantees:

* Segments are immutable and created only if absent. Before a segment, its
  writer creates `claim/<peer>/<seq>` naming it (sealed by the writer's key when it
  signs): two processes running with one peer id collide on the claim and the
  second stops with FencedOut. A claim that no key of this peer sealed is someone
  else's forgery, not a fence: publish raises ClaimTaken, and the writer prepares
  its entries again under the next sequence number.
* Keys sort by hybrid logical clock. A reader lists from `cursor - window` and
  skips what it has applied, so a segment that landed late is still seen; a
  writer whose create returned later than window/2 after its key's time
  republishes the entries under a fresh key (entries are idempotent).
* An idle poll is one listing request, whatever the number of peers.
* Compaction folds segments older than every live peer's cursor (minus the
  window) into a snapshot, writes it, and only then deletes what it folded;
  a new peer bootstraps from the newest snapshot.
* Nothing read can move a reader past real segments: keys dated beyond the allowed
  clock skew are deferred, a cursor is never trusted beyond the wall clock (listing
  and compaction start from min(cursor, now) - window), and a snapshot is taken only
  if sealed, not dated after now, holding no entry dated after itself, and holding
  everything the snapshot before it held.
* Every refusal (a malformed key, a key from the future, a segment or line beyond
  its limits) is counted each time and logged once per object.
* No object is read whole before its size is checked: every read is bounded by the
  object's limit (a segment's or snapshot's compressed bytes, MAX_CLAIM_BYTES, ...),
  and the backend stops one byte past it.

Crash safety of publishing rests on the caller: persist a PreparedSegment before
publish() and, after a crash, publish that same object again. Preparing new
entries under a sequence number that was already claimed is what another
process would do, so it is refused with FencedOut.
"""

from __future__ import annotations

import contextlib
import enum
import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from dreamcycle.zeitgeist.backend import KeyExists, LogBackend, ObjectTooLarge, PreconditionFailed
from dreamcycle.zeitgeist.entries import (
    SEGMENT_LIMITS,
    SNAPSHOT_LIMITS,
    CorruptSegment,
    DecodedSegment,
    Entry,
    PulseEntry,
    Refusal,
    SegmentLimits,
    SegmentSeal,
    TombstoneEntry,
    canonical_json,
    decode_segment,
    encode_segment,
    parse_json,
    payload_digest,
)
from dreamcycle.zeitgeist.hlc import (
    HybridLogicalClock,
    check_hlc,
    hlc_from_ms,
    ms_to_hlc_span,
)
from dreamcycle.zeitgeist.keys import (
    HEARTBEAT_PREFIX,
    LEASE_KEY,
    SEGMENT_PREFIX,
    SNAPSHOT_PREFIX,
    InvalidKey,
    InvalidPeerId,
    SegmentKey,
    claim_key,
    claim_prefix,
    heartbeat_key,
    parse_claim_key,
    parse_heartbeat_key,
    parse_segment_key,
    parse_snapshot_key,
    segment_key,
    segment_listing_start,
    snapshot_key,
    validate_peer_id,
)
from dreamcycle.zeitgeist.signing import Rejection, Signer, Verdict, Verifier
from dreamcycle.zeitgeist.snapshot import Snapshot, fold_entries

#: How far behind its cursor a reader lists; must exceed clock skew plus the slowest write.
DEFAULT_WINDOW_MS: Final = 60_000
#: A peer whose heartbeat is older than this is not waited for by compaction.
DEFAULT_LIVENESS_TIMEOUT_MS: Final = 600_000
#: How long the compaction lease lasts without renewal.
DEFAULT_LEASE_TTL_MS: Final = 120_000
#: A segment key stamped further than this ahead of the wall clock is deferred: a
#: broken clock or a corrupt key must not drag every peer's HLC into the future.
DEFAULT_MAX_FUTURE_MS: Final = 3_600_000
HEARTBEAT_FORMAT_VERSION: Final = 1
#: Largest heartbeat read: a few hundred bytes are written.
MAX_HEARTBEAT_BYTES: Final = 64 * 1024
#: Largest claim read: a seal and a segment key, a few hundred bytes, are written.
MAX_CLAIM_BYTES: Final = 64 * 1024
#: Claims under this peer's name read at most, highest first, to find the highest one a key
#: of this peer sealed (the others are forgeries and fence nothing).
FORGED_CLAIMS_CHECKED: Final = 64
#: Largest compaction lease read: a holder and a time are written.
MAX_LEASE_BYTES: Final = 64 * 1024
#: How a claim, heartbeat or lease beyond its limit is counted (segments and snapshots
#: count as Refusal.SEGMENT_TOO_LARGE).
OBJECT_TOO_LARGE: Final = "object_too_large"
#: Objects remembered so each refusal is logged once (the counters count them all).
LOGGED_OBJECTS_MEMORY: Final = 4_096

logger = logging.getLogger(__name__)


class ZeitgeistError(Exception):
    """Base of the log layer's own errors (backend errors pass through unchanged)."""


class FencedOut(ZeitgeistError):
    """Another process is publishing under this peer id; this one must stop."""


class ClaimTaken(ZeitgeistError):
    """The claim of a sequence number exists and no key of this peer sealed it: a writer
    of the bucket without this peer's key forged it. Not a fence: prepare the entries
    again under a later sequence number (the forged claim stays; it fences nothing)."""

    def __init__(self, seq: int, verdict: Verdict) -> None:
        super().__init__(f"claim for seq {seq} is not this peer's: {verdict}")
        self.seq = seq
        self.verdict = verdict


class EmptySegment(ZeitgeistError, ValueError):
    """A segment must carry at least one entry."""


class InvalidHeartbeat(ZeitgeistError, ValueError):
    """A heartbeat object that is not JSON or lacks a field; the message names it."""


class InvalidSetting(ZeitgeistError, ValueError):
    """A window, timeout or TTL that cannot work (zero or negative)."""


@dataclass(frozen=True)
class PreparedSegment:
    """A segment ready to publish; keep it until publish() succeeds, then retry it as is."""

    key: str
    data: bytes
    hlc: int
    seq: int


@dataclass(frozen=True)
class PublishResult:
    key: str
    #: The create returned later than window/2 after the key's time: republish.
    late: bool


@dataclass(frozen=True)
class Heartbeat:
    """What a peer tells the mesh about itself each cycle (peers/<peer_id>.json)."""

    peer_id: str
    #: The HLC up to which this peer has applied the log.
    cursor_hlc: int
    last_seen_ms: int
    index_version: str
    public_key: str | None
    #: The last segment sequence number this peer published.
    seq: int

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "v": HEARTBEAT_FORMAT_VERSION,
                "peer_id": self.peer_id,
                "cursor_hlc": self.cursor_hlc,
                "last_seen_ms": self.last_seen_ms,
                "index_version": self.index_version,
                "public_key": self.public_key,
                "seq": self.seq,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Heartbeat:
        if len(data) > MAX_HEARTBEAT_BYTES:
            raise InvalidHeartbeat(
                f"heartbeat has {len(data)} bytes, more than the limit of {MAX_HEARTBEAT_BYTES}"
            )
        try:
            obj = parse_json(data)
        except ValueError as exc:
            raise InvalidHeartbeat(f"heartbeat is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InvalidHeartbeat("heartbeat is not a JSON object")
        if obj.get("v") != HEARTBEAT_FORMAT_VERSION:
            raise InvalidHeartbeat(f"heartbeat format version {obj.get('v')!r} is not supported")
        try:
            heartbeat = cls(
                peer_id=validate_peer_id(obj["peer_id"]),
                cursor_hlc=check_hlc(obj["cursor_hlc"], "cursor_hlc"),
                last_seen_ms=_require(obj, "last_seen_ms", int),
                index_version=_require(obj, "index_version", str),
                public_key=_require(obj, "public_key", str | None),
                seq=_require(obj, "seq", int),
            )
        except KeyError as exc:
            raise InvalidHeartbeat(f"heartbeat lacks field {exc}") from None
        except InvalidHeartbeat:
            raise
        except (InvalidPeerId, ValueError) as exc:
            raise InvalidHeartbeat(f"heartbeat: {exc}") from None
        return heartbeat


def _require(obj: dict[str, Any], name: str, expected: Any) -> Any:
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, expected):
        raise InvalidHeartbeat(f"heartbeat field {name!r} has the wrong type: {value!r}")
    return value


class CompactionOutcome(enum.StrEnum):
    COMPACTED = "compacted"
    NO_LIVE_PEERS = "no_live_peers"
    NOTHING_TO_FOLD = "nothing_to_fold"
    #: Snapshot written, but the lease was lost before deleting: nothing deleted.
    LEASE_LOST = "lease_lost"
    #: A segment vanished while folding: another compactor is at work; nothing written.
    CONCURRENT = "concurrent_compaction"


@dataclass(frozen=True)
class CompactionReport:
    outcome: CompactionOutcome
    horizon_hlc: int | None = None
    snapshot_key: str | None = None
    segments_folded: int = 0
    entries_written: int = 0
    unknown_written: int = 0
    duplicates_dropped: int = 0
    expired_pulses_dropped: int = 0
    forget_pulses_stripped: int = 0
    rejected_lines: int = 0
    corrupt_segments: tuple[str, ...] = ()
    segments_deleted: int = 0
    claims_deleted: int = 0
    snapshots_deleted: int = 0


@dataclass(frozen=True)
class _Lease:
    etag: str
    expires_ms: int


@dataclass
class _Gathered:
    """The segments below the horizon, decoded."""

    keys: list[SegmentKey] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    rejected_lines: int = 0
    corrupt: list[str] = field(default_factory=list)
    vanished: bool = False


class LogOnce:
    """Remembers the most recent objects logged about, so each is logged once."""

    def __init__(self, memory: int = LOGGED_OBJECTS_MEMORY) -> None:
        self.memory = memory
        self._logged: OrderedDict[str, None] = OrderedDict()

    def first_time(self, object_key: str) -> bool:
        if object_key in self._logged:
            self._logged.move_to_end(object_key)
            return False
        self._logged[object_key] = None
        if len(self._logged) > self.memory:
            self._logged.popitem(last=False)
        return True


#: Told of every refusal, by label and count (the daemon counts them in its metrics).
RefusalCounter = Callable[[str, int], None]


def _claim_seq(key: str) -> int:
    """The sequence number a claim key names; a malformed one sorts below every claim (it
    is nothing this layer wrote, and compaction deletes it)."""
    try:
        return parse_claim_key(key).seq
    except InvalidKey:
        return -1


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSetting(f"{name} must be a positive number of milliseconds, got {value!r}")
    return value


class Zeitgeist:
    """One peer's view of the shared log. All methods block; run them in worker threads."""

    def __init__(
        self,
        backend: LogBackend,
        peer_id: str,
        clock: HybridLogicalClock,
        *,
        wall_ms: Callable[[], int],
        window_ms: int = DEFAULT_WINDOW_MS,
        liveness_timeout_ms: int = DEFAULT_LIVENESS_TIMEOUT_MS,
        lease_ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        max_future_ms: int = DEFAULT_MAX_FUTURE_MS,
        signer: Signer | None = None,
        verifier: Verifier | None = None,
        segment_limits: SegmentLimits = SEGMENT_LIMITS,
        snapshot_limits: SegmentLimits = SNAPSHOT_LIMITS,
        on_refused: RefusalCounter | None = None,
    ) -> None:
        """`wall_ms` is the caller's clock (ms since the epoch): lateness of a write and the
        horizon of deferred keys are measured against it, so tests can simulate time.

        With a `signer`, this peer's own entries are signed and every segment and snapshot
        it writes is sealed; with a `verifier`, snapshots whose seal fails are passed over.
        `on_refused` is told of every refusal (label, count) beside `counters`.
        """
        self.backend = backend
        self.peer_id = validate_peer_id(peer_id)
        self.clock = clock
        self.window_ms = _positive(window_ms, "window_ms")
        self.liveness_timeout_ms = _positive(liveness_timeout_ms, "liveness_timeout_ms")
        self.lease_ttl_ms = _positive(lease_ttl_ms, "lease_ttl_ms")
        self.max_future_ms = _positive(max_future_ms, "max_future_ms")
        self._wall_ms = wall_ms
        self.signer = signer
        self.verifier = verifier
        self.segment_limits = segment_limits
        self.snapshot_limits = snapshot_limits
        self._on_refused = on_refused
        self._logged = LogOnce()
        #: This peer's wall clock (as an HLC) when it last listed segments.
        self._listed_at_hlc: int | None = None
        #: Things skipped rather than failed on, by reason (for metrics).
        self.counters: Counter[str] = Counter()
        #: The highest sequence number this peer id claimed that a key of this peer sealed:
        #: listed at the first publish, then raised by each claim written here.
        self._own_claims_high: int | None = None
        self._own_claims_listed = False

    def _refused(
        self, object_key: str, label: str, detail: str, count: int = 1, *, counter: str = ""
    ) -> None:
        """Count a refusal every time, under `counter` (default: `label`), and log it once
        per object: the same bad object met every cycle must not write a line every cycle."""
        self.counters[counter or label] += count
        if self._on_refused is not None:
            self._on_refused(label, count)
        if self._logged.first_time(f"{object_key}\0{label}"):
            logger.warning("refused %s (%s): %s", object_key, label, detail)

    def _now_hlc(self) -> int:
        return hlc_from_ms(self._wall_ms())

    @property
    def window_hlc(self) -> int:
        return ms_to_hlc_span(self.window_ms)

    # ---- writing ----------------------------------------------------------------

    def prepare(self, entries: Sequence[Entry], seq: int) -> PreparedSegment:
        """Encode `entries` under a fresh key whose HLC is above every entry's."""
        if not entries:
            raise EmptySegment(f"refusing to prepare an empty segment (peer {self.peer_id})")
        for entry in entries:
            self.clock.observe(entry.hlc)
        hlc = self.clock.now()
        key = segment_key(hlc, self.peer_id, seq)
        return PreparedSegment(key=key, data=self._encode(key, entries), hlc=hlc, seq=seq)

    def _encode(
        self, key: str, entries: Sequence[Entry], unknown: Sequence[dict[str, Any]] = ()
    ) -> bytes:
        signer = self.signer
        if signer is None:
            return encode_segment(entries, unknown)
        signed = [signer.sign_entry(entry) for entry in entries]
        return encode_segment(signed, unknown, seal=lambda digest: signer.seal(key, digest))

    def seal_problem(self, key: str, decoded: DecodedSegment) -> Verdict | None:
        """Why segment or snapshot `key` is not to be read (its seal fails), if so."""
        if self.verifier is None:
            return None
        self.verifier.refresh()
        if key.startswith(SNAPSHOT_PREFIX):
            parsed_snapshot = parse_snapshot_key(key)
            writer, hlc = parsed_snapshot.peer_id, parsed_snapshot.hlc
        else:
            parsed = parse_segment_key(key)
            writer, hlc = parsed.peer_id, parsed.hlc
        return self.verifier.check_seal(
            decoded.seal, key, writer, decoded.body_digest, HybridLogicalClock.physical_ms(hlc)
        )

    def publish(self, prepared: PreparedSegment) -> PublishResult:
        """Claim the sequence number, then create the segment; idempotent for a retry.

        A sequence number below one this peer id already claimed elsewhere is refused with
        FencedOut, even once compaction deleted the claim of that very number: compaction
        keeps each peer's highest claim, so a second process (or a database restored from
        before the peer's last publish) cannot publish under numbers already used.
        """
        self._refuse_below_own_claims(prepared.seq)
        self._claim(prepared)
        self._own_claims_high = max(self._own_claims_high or 0, prepared.seq)
        try:
            self.backend.create(prepared.key, prepared.data)
        except KeyExists:
            if not self._holds(prepared.key, prepared.data):
                raise FencedOut(
                    f"another process is publishing as peer {self.peer_id}: "
                    f"segment {prepared.key} exists with different content"
                ) from None
        elapsed_ms = self._wall_ms() - HybridLogicalClock.physical_ms(prepared.hlc)
        return PublishResult(key=prepared.key, late=elapsed_ms > self.window_ms // 2)

    def _claim(self, prepared: PreparedSegment) -> None:
        claim = claim_key(self.peer_id, prepared.seq)
        wanted = self._claim_body(claim, prepared.key)
        try:
            self.backend.create(claim, wanted)
            return
        except KeyExists:
            existing = self._read_or_none(claim, MAX_CLAIM_BYTES)
        if existing == wanted:
            return
        named = "nothing readable" if existing is None else existing.decode("utf-8", "replace")
        if self.signer is not None and self.verifier is not None:
            verdict, named_key = self._claim_verdict(claim, existing)
            if verdict is not None:
                raise ClaimTaken(prepared.seq, verdict)
            if named_key == prepared.key:
                return  # ours, sealed by another key of this peer (rotated since)
            named = str(named_key)
        raise FencedOut(
            f"another process is publishing as peer {self.peer_id}: claim for seq "
            f"{prepared.seq} names key {named}, not {prepared.key}"
        )

    def _refuse_below_own_claims(self, seq: int) -> None:
        if not self._own_claims_listed:
            self._own_claims_high = self._highest_own_claim()
            self._own_claims_listed = True
        high = self._own_claims_high
        if high is not None and seq < high:
            raise FencedOut(
                f"another process is publishing as peer {self.peer_id}, or this database is "
                f"older than the peer's log: seq {high} is claimed under this peer's key, and "
                f"this database would publish seq {seq}"
            )

    def _highest_own_claim(self) -> int | None:
        """The highest claimed sequence number whose claim a key of this peer sealed (any
        claim when this log does not verify): forged claims fence nothing, so they cannot
        stop this peer either. At most FORGED_CLAIMS_CHECKED forged ones are read."""
        seqs = sorted(self._claimed_seqs(), reverse=True)
        if self.verifier is None:
            return seqs[0] if seqs else None
        for seq in seqs[:FORGED_CLAIMS_CHECKED]:
            claim = claim_key(self.peer_id, seq)
            verdict, _ = self._claim_verdict(claim, self._read_or_none(claim, MAX_CLAIM_BYTES))
            if verdict is None:
                return seq
        return None

    def _claim_body(self, claim: str, segment: str) -> bytes:
        """The segment's key, after a seal over the claim's key and that segment key when
        this peer signs: only a holder of this peer's key can write a claim that fences it.
        Ed25519 is deterministic, so a retry writes the identical bytes."""
        named = segment.encode("utf-8")
        if self.signer is None:
            return named
        seal = self.signer.seal(claim, payload_digest(named))
        return seal.wire_bytes() + b"\n" + named

    def _claim_verdict(self, claim: str, existing: bytes | None) -> tuple[Verdict | None, str]:
        """(None, the segment key it names) when `existing` is sealed by a trusted key of
        this peer (in permissive mode, also an unsealed claim of a peer that did not sign);
        else why it is not this peer's."""
        assert self.verifier is not None
        self.verifier.refresh()
        seal: SegmentSeal | None = None
        named = existing or b""
        head, newline, rest = named.partition(b"\n")
        if newline:
            try:
                seal = SegmentSeal.from_wire(parse_json(head))
                named = rest
            except (ValueError, TypeError, AttributeError):
                seal = None  # not a seal: judged as an unsealed claim
        try:
            named_key = named.decode("utf-8")
            at_ms = HybridLogicalClock.physical_ms(parse_segment_key(named_key).hlc)
        except (UnicodeDecodeError, InvalidKey):
            return Verdict(Rejection.UNSIGNED, f"{claim} names no segment key"), ""
        verdict = self.verifier.check_seal(seal, claim, self.peer_id, payload_digest(named), at_ms)
        return verdict, named_key

    def _read_or_none(self, key: str, max_bytes: int) -> bytes | None:
        """The bytes of `key`; None if absent, or if longer than `max_bytes` (refused,
        counted and logged once: such an object is not anything this layer wrote)."""
        try:
            return self.backend.read(key, max_bytes=max_bytes)
        except KeyError:
            return None
        except ObjectTooLarge as exc:
            self._refused(key, OBJECT_TOO_LARGE, str(exc))
            return None

    def _holds(self, key: str, data: bytes) -> bool:
        """Whether `key` holds exactly `data` (read no further than its length)."""
        try:
            return self.backend.read(key, max_bytes=len(data)) == data
        except (KeyError, ObjectTooLarge):
            return False

    def _claimed_seqs(self) -> list[int]:
        seqs = []
        for key in self.backend.list_after(claim_prefix(self.peer_id), ""):
            try:
                seqs.append(parse_claim_key(key).seq)
            except InvalidKey:
                self.counters["claim_key_malformed"] += 1
        return seqs

    # ---- reading ----------------------------------------------------------------

    def listing_start(self, cursor_hlc: int) -> int:
        """Where a poll from `cursor_hlc` lists: a window before the cursor, and never
        after a window before the wall clock. A cursor moved ahead by a key dated in the
        future (within the allowed skew) must not hide the real segments written after."""
        trusted = min(check_hlc(cursor_hlc, "cursor_hlc"), self._now_hlc())
        return max(0, trusted - self.window_hlc)

    def cursor_for(self, key_hlc: int) -> int:
        """How far applying a segment (or snapshot) keyed `key_hlc` may move a cursor: to its
        key, but not beyond the wall clock of the poll that listed it. A key dated ahead
        (within the allowed skew) then cannot make the next polls start after real segments
        written meanwhile; a cursor kept lower only lists a little more again."""
        listed_at = self._now_hlc() if self._listed_at_hlc is None else self._listed_at_hlc
        return min(key_hlc, listed_at)

    def poll(self, cursor_hlc: int, is_applied: Callable[[str], bool]) -> list[str]:
        """Unapplied segment keys from `listing_start(cursor_hlc)` on, ascending; one listing.

        Keys stamped more than `max_future_ms` ahead of this peer's wall clock are
        deferred (not returned, not observed) until the wall clock comes close.
        """
        start_hlc = self.listing_start(cursor_hlc)
        self._listed_at_hlc = self._now_hlc()
        fresh: list[str] = []
        horizon_ahead = hlc_from_ms(self._wall_ms() + self.max_future_ms)
        for key in self.backend.list_after(SEGMENT_PREFIX, segment_listing_start(start_hlc)):
            try:
                parsed = parse_segment_key(key)
            except InvalidKey as exc:
                self._refused(key, Refusal.MALFORMED_KEY, str(exc), counter="segment_key_malformed")
                continue
            if parsed.hlc > horizon_ahead:
                # Observing it would drag every clock (and cursor) of the mesh that far
                # ahead; the key is left for a later poll, once the wall clock is near it.
                self._refused(
                    key,
                    Refusal.FROM_THE_FUTURE,
                    "deferred: its time is beyond the allowed clock skew",
                    counter="segment_from_the_future",
                )
                continue
            self.clock.observe(parsed.hlc)
            if not is_applied(key):
                fresh.append(key)
        return fresh

    def fetch(self, key: str) -> DecodedSegment:
        """Read and decode one segment within `segment_limits`.

        Raises CorruptSegment for bytes that are not a segment or are beyond the limits,
        and KeyError if the segment was compacted away meanwhile (its entries are in the
        newest snapshot). Every refusal, of the segment or of its lines, is counted and
        logged once.
        """
        return self._read_decoded(key, self.segment_limits)

    def _read_decoded(self, key: str, limits: SegmentLimits) -> DecodedSegment:
        try:
            try:
                data = self.backend.read(key, max_bytes=limits.compressed_bytes)
            except ObjectTooLarge as exc:
                raise CorruptSegment(str(exc), Refusal.SEGMENT_TOO_LARGE) from None
            decoded = decode_segment(data, limits)
        except CorruptSegment as exc:
            self._refused(key, exc.refusal, str(exc))
            raise
        by_refusal = Counter(line.refusal for line in decoded.rejected)
        for refusal, count in sorted(by_refusal.items()):
            first = next(line for line in decoded.rejected if line.refusal is refusal)
            self._refused(
                key, refusal, f"{count} line(s), line {first.line_no}: {first.reason}", count
            )
        return decoded

    # ---- heartbeats -------------------------------------------------------------

    def heartbeat(self, beat: Heartbeat) -> None:
        if beat.peer_id != self.peer_id:
            raise InvalidHeartbeat(
                f"peer {self.peer_id} cannot write the heartbeat of peer {beat.peer_id}"
            )
        self.backend.write_overwrite(heartbeat_key(self.peer_id), beat.to_bytes())

    def heartbeats(self) -> list[Heartbeat]:
        """Every readable heartbeat; unreadable ones are counted and skipped."""
        beats: list[Heartbeat] = []
        for key in self.backend.list_after(HEARTBEAT_PREFIX, ""):
            try:
                peer_id = parse_heartbeat_key(key)
                data = self.backend.read(key, max_bytes=MAX_HEARTBEAT_BYTES)
                beat = Heartbeat.from_bytes(data)
                if beat.peer_id != peer_id:
                    raise InvalidHeartbeat(f"{key} holds the heartbeat of peer {beat.peer_id}")
            except KeyError:
                continue  # removed between listing and reading
            except (InvalidKey, InvalidHeartbeat, ObjectTooLarge) as exc:
                self._refused(key, "heartbeat_unreadable", str(exc))
                continue
            beats.append(beat)
        return beats

    def live_peers(self, now_ms: int) -> list[Heartbeat]:
        """Peers seen within the liveness timeout."""
        return [b for b in self.heartbeats() if now_ms - b.last_seen_ms <= self.liveness_timeout_ms]

    # ---- snapshots and compaction -------------------------------------------------

    def latest_snapshot(self) -> Snapshot | None:
        """The newest snapshot to trust; one that is not falls back to the one before.

        A snapshot is trusted when it is readable within `snapshot_limits`, its seal holds,
        it is not dated after this peer's wall clock (a new peer polls from its time: one
        dated in the future would make it deaf until then), no entry in it is dated after
        it, and it holds every entry the next older trusted snapshot held (folding drops
        only pulses, which expire, and the Forget pulses of tombstones).
        """
        keys = []
        for key in self.backend.list_after(SNAPSHOT_PREFIX, ""):
            try:
                keys.append((parse_snapshot_key(key).hlc, key))
            except InvalidKey as exc:
                self._refused(
                    key, Refusal.MALFORMED_KEY, str(exc), counter="snapshot_key_malformed"
                )
        candidates = sorted(keys, reverse=True)
        read: dict[str, Snapshot | None] = {}

        def trusted(index: int) -> Snapshot | None:
            hlc, key = candidates[index]
            if key not in read:
                read[key] = self._trusted_snapshot(key, hlc)
            return read[key]

        for index in range(len(candidates)):
            snapshot = trusted(index)
            if snapshot is None:
                continue
            older = next(
                (s for s in map(trusted, range(index + 1, len(candidates))) if s is not None),
                None,
            )
            lost = [] if older is None else _dropped_by(snapshot, older)
            if lost:
                self._refused(
                    snapshot.key,
                    Refusal.SNAPSHOT_INCONSISTENT,
                    f"lacks {len(lost)} entries of {older.key if older else ''} "
                    f"(first {lost[0]}); trying an older one",
                )
                continue
            return snapshot
        return None

    def _trusted_snapshot(self, key: str, hlc: int) -> Snapshot | None:
        """Snapshot `key` if it is readable, sealed, not from the future and holds no entry
        dated after itself; None (refusal counted and logged once) otherwise."""
        if hlc > self._now_hlc():
            self._refused(key, Refusal.FROM_THE_FUTURE, "snapshot dated after the wall clock")
            return None
        try:
            decoded = self._read_decoded(key, self.snapshot_limits)
        except KeyError:
            return None
        except CorruptSegment:
            self.counters["snapshot_corrupt"] += 1
            return None
        late = next((entry for entry in decoded.entries if entry.hlc > hlc), None)
        if late is not None:
            # It folds segments dated before it, so it cannot hold this entry.
            self._refused(
                key,
                Refusal.SNAPSHOT_INCONSISTENT,
                f"holds {late.KIND} entry {late.id} dated {late.hlc:016x}, after the snapshot",
            )
            return None
        problem = self.seal_problem(key, decoded)
        if problem is not None:
            self._refused(
                key,
                problem.reason.value,
                f"not trusted, trying an older one: {problem}",
                counter=f"snapshot_rejected:{problem.reason.value}",
            )
            return None
        self.counters["snapshot_rejected_lines"] += len(decoded.rejected)
        return Snapshot(key=key, hlc=hlc, entries=decoded.entries, unknown=decoded.unknown)

    def bootstrap(self) -> Snapshot | None:
        """What a new (or long-silent) peer reads first; it then polls from snapshot.hlc."""
        return self.latest_snapshot()

    def compact(self, now_ms: int) -> CompactionReport | None:
        """Fold old segments into a snapshot; None if another live peer holds the lease."""
        lease = self._acquire_lease(now_ms)
        if lease is None:
            return None
        try:
            return self._compact_under_lease(lease, now_ms)
        finally:
            self._release_lease(lease)

    def _compact_under_lease(self, lease: _Lease, now_ms: int) -> CompactionReport:
        live = self.live_peers(now_ms)
        if not live:
            return CompactionReport(CompactionOutcome.NO_LIVE_PEERS)
        # A cursor dated ahead of the wall clock (moved by a key from the future) must not
        # let compaction delete real segments before their readers list them.
        horizon = self.listing_start(min(beat.cursor_hlc for beat in live))
        previous = self.latest_snapshot()
        if previous is not None and horizon <= previous.hlc:
            return CompactionReport(CompactionOutcome.NOTHING_TO_FOLD, horizon_hlc=horizon)
        gathered = self._gather_below(horizon)
        if gathered.vanished:
            return CompactionReport(CompactionOutcome.CONCURRENT, horizon_hlc=horizon)
        if not gathered.keys:
            return CompactionReport(
                CompactionOutcome.NOTHING_TO_FOLD,
                horizon_hlc=horizon,
                corrupt_segments=tuple(gathered.corrupt),
            )
        if self.verifier is not None:
            self.verifier.refresh()
            # Not carried forward: a snapshot holds only what its readers would accept.
            gathered.entries = [e for e in gathered.entries if self.verifier.check_entry(e) is None]
        base_entries = previous.entries if previous is not None else []
        base_unknown = previous.unknown if previous is not None else []
        fold = fold_entries(
            [*base_entries, *gathered.entries], [*base_unknown, *gathered.unknown], now_ms
        )
        new_key = snapshot_key(horizon, self.peer_id)
        self._create_once(new_key, self._encode(new_key, fold.entries, fold.unknown))
        report = CompactionReport(
            CompactionOutcome.COMPACTED,
            horizon_hlc=horizon,
            snapshot_key=new_key,
            segments_folded=len(gathered.keys),
            entries_written=len(fold.entries),
            unknown_written=len(fold.unknown),
            duplicates_dropped=fold.duplicates_dropped,
            expired_pulses_dropped=fold.expired_pulses_dropped,
            forget_pulses_stripped=fold.forget_pulses_stripped,
            rejected_lines=gathered.rejected_lines,
            corrupt_segments=tuple(gathered.corrupt),
        )
        if not self._still_holding(lease):
            return replace(report, outcome=CompactionOutcome.LEASE_LOST)
        segments = [parsed.key for parsed in gathered.keys]
        # Each peer's highest folded claim stays, and those below it go (kept by earlier
        # compactions, or forged): the one kept is what refuses a second process (or a
        # restored database) that would publish under numbers the peer already used.
        highest: dict[str, int] = {}
        for parsed in gathered.keys:
            highest[parsed.peer_id] = max(highest.get(parsed.peer_id, 0), parsed.seq)
        claims = [
            key
            for peer, top in sorted(highest.items())
            for key in self.backend.list_after(claim_prefix(peer), "")
            if _claim_seq(key) < top
        ]
        # Keep the snapshot this one was folded from as a fallback; delete anything older.
        older = (
            [k for k in self.backend.list_after(SNAPSHOT_PREFIX, "") if k < previous.key]
            if previous is not None
            else []
        )
        self.backend.delete(segments)
        self.backend.delete(claims)
        self.backend.delete(older)
        return replace(
            report,
            segments_deleted=len(segments),
            claims_deleted=len(claims),
            snapshots_deleted=len(older),
        )

    def _gather_below(self, horizon: int) -> _Gathered:
        gathered = _Gathered()
        for key in self.backend.list_after(SEGMENT_PREFIX, ""):
            try:
                parsed = parse_segment_key(key)
            except InvalidKey:
                continue
            if parsed.hlc >= horizon:
                break  # keys are listed in HLC order
            try:
                decoded = self.fetch(key)
            except KeyError:
                gathered.vanished = True
                return gathered
            except CorruptSegment:
                # Kept, not deleted: the bytes may still help someone diagnose it (fetch
                # has counted it and logged it once).
                gathered.corrupt.append(key)
                continue
            gathered.keys.append(parsed)
            gathered.entries.extend(decoded.entries)
            gathered.unknown.extend(decoded.unknown)
            gathered.rejected_lines += len(decoded.rejected)
        return gathered

    def _create_once(self, key: str, data: bytes) -> None:
        """Create `key`, accepting an identical object left by our own earlier attempt."""
        try:
            self.backend.create(key, data)
        except KeyExists:
            if not self._holds(key, data):
                raise FencedOut(
                    f"another process is compacting as peer {self.peer_id}: "
                    f"{key} exists with different content"
                ) from None

    # ---- compaction lease ----------------------------------------------------------

    def _lease_body(self, expires_ms: int) -> bytes:
        return canonical_json({"holder": self.peer_id, "expires_ms": expires_ms})

    def _acquire_lease(self, now_ms: int) -> _Lease | None:
        try:
            current = self.backend.read_versioned(LEASE_KEY, max_bytes=MAX_LEASE_BYTES)
        except ObjectTooLarge as exc:
            # Without its bytes there is no version to swap against: held, in effect.
            self._refused(LEASE_KEY, OBJECT_TOO_LARGE, f"{exc}; not compacting")
            return None
        if current is not None:
            holder, expires_ms = _parse_lease(current.data)
            if holder != self.peer_id and expires_ms >= now_ms:
                return None
        expires_ms = now_ms + self.lease_ttl_ms
        expect = None if current is None else current.etag
        try:
            etag = self.backend.write_versioned(LEASE_KEY, self._lease_body(expires_ms), expect)
        except PreconditionFailed:
            return None
        return _Lease(etag=etag, expires_ms=expires_ms)

    def _still_holding(self, lease: _Lease) -> bool:
        """Re-assert the lease with a compare-and-swap before deleting anything."""
        try:
            self.backend.write_versioned(
                LEASE_KEY, self._lease_body(lease.expires_ms), expect=lease.etag
            )
        except PreconditionFailed:
            self.counters["compaction_lease_lost"] += 1
            return False
        return True

    def _release_lease(self, lease: _Lease) -> None:
        try:
            current = self.backend.read_versioned(LEASE_KEY, max_bytes=MAX_LEASE_BYTES)
        except ObjectTooLarge:
            return  # replaced by something that is not a lease of ours
        if current is None or _parse_lease(current.data)[0] != self.peer_id:
            return
        # Losing this race means someone else took the lease over; it is theirs now.
        with contextlib.suppress(PreconditionFailed):
            self.backend.write_versioned(LEASE_KEY, self._lease_body(0), expect=current.etag)


def _dropped_by(newer: Snapshot, older: Snapshot) -> list[str]:
    """Ids of entries of `older` that `newer` lacks though folding would have kept them."""
    kept = {entry.id for entry in newer.entries}
    return [
        entry.id
        for entry in older.entries
        if entry.id not in kept
        and not isinstance(entry, PulseEntry)
        and not (isinstance(entry, TombstoneEntry) and entry.forget_pulse is not None)
    ]


def _parse_lease(data: bytes) -> tuple[str | None, int]:
    """(holder, expires_ms); an unreadable lease counts as expired so it can be taken over."""
    try:
        obj = parse_json(data)
        holder, expires_ms = obj["holder"], obj["expires_ms"]
    except (ValueError, KeyError, TypeError):
        return None, 0
    if (
        not isinstance(holder, str)
        or isinstance(expires_ms, bool)
        or not isinstance(expires_ms, int)
    ):
        return None, 0
    return holder, expires_ms
