"""What every part of the log layer shares: one peer's settings, refusals, and reads.

`LogCore` holds the peer's backend, clock, settings, signer and verifier, counts and
logs refusals (each object once), reads an object within a bound, encodes (and seals)
a segment or snapshot, and says why a sealed object is not to be read. The writer,
the reader, heartbeats and compaction build on it (zeitgeist/log.py puts them together).
"""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final

from dreamcycle.zeitgeist.backend import LogBackend, ObjectTooLarge
from dreamcycle.zeitgeist.defaults import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_LIVENESS_TIMEOUT_MS,
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_WINDOW_MS,
    LOGGED_OBJECTS_MEMORY,
)
from dreamcycle.zeitgeist.entries import (
    SEGMENT_LIMITS,
    SNAPSHOT_LIMITS,
    DecodedSegment,
    Entry,
    SegmentLimits,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms, ms_to_hlc_span
from dreamcycle.zeitgeist.object_keys import (
    SNAPSHOT_PREFIX,
    parse_segment_key,
    parse_snapshot_key,
    validate_peer_id,
)
from dreamcycle.zeitgeist.signing import Signer, Verdict, Verifier

#: How a claim, heartbeat or lease beyond its limit is counted (segments and snapshots
#: count as Refusal.SEGMENT_TOO_LARGE).
OBJECT_TOO_LARGE: Final = "object_too_large"


# Named after the public module, by which logging configurations and tests select it.
logger = logging.getLogger("dreamcycle.zeitgeist.log")


class ZeitgeistError(Exception):
    """Base of the log layer's own errors (backend errors pass through unchanged)."""


class FencedOut(ZeitgeistError):
    """Another process is publishing under this peer id; this one must stop."""


class InvalidSetting(ZeitgeistError, ValueError):
    """A window, timeout or TTL that cannot work (zero or negative)."""


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


def _positive(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise InvalidSetting(f"{name} must be a positive number of milliseconds, got {value!r}")
    return value


class LogCore:
    """One peer's view of the shared log: settings and state; every method blocks."""

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
        #: The times of the segment keys refused since that listing (their seal failed):
        #: they move neither the clock nor a cursor (zeitgeist/_log_reader.py).
        self._refused_hlcs: set[int] = set()
        #: Segment keys of the last listing that the caller said were applied: a record of
        #: a segment applied is never removed, so a later poll that lists them again
        #: neither parses nor asks about them.
        self._known_applied: set[str] = set()
        #: Things skipped rather than failed on, by reason (for metrics).
        self.counters: Counter[str] = Counter()
        #: The highest sequence number this peer id claimed that a key of this peer sealed:
        #: listed at the first publish, then raised by each claim written here.
        self._own_claims_high: int | None = None
        self._own_claims_listed = False

    def _segment_bytes_read(self, key: str, data: bytes) -> None:
        """Told of a segment's bytes as fetched (the roll-up writer keeps them)."""

    def _segment_published(self, key: str, data: bytes) -> None:
        """Told of a segment this peer published (the roll-up writer keeps it)."""

    def _listed(self, keys: list[str]) -> None:
        """Told of every key a poll listed under `seg/` (roll-ups among them)."""

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
