"""Compaction: old segments folded into a snapshot under a lease, then deleted.

Compaction folds segments older than every live peer's cursor (minus the window, and
never after a window before the wall clock) into a snapshot, writes it, and only then
deletes what it folded, each peer's highest claim excepted; a new peer bootstraps
from the newest snapshot. One peer compacts at a time: it holds a lease, swapped with
a compare-and-swap, and re-asserts it before deleting anything.
"""

from __future__ import annotations

import contextlib
import enum
from dataclasses import dataclass, field, replace
from typing import Any, Final

from dreamcycle.zeitgeist._log_base import OBJECT_TOO_LARGE, FencedOut
from dreamcycle.zeitgeist._log_heartbeats import LogHeartbeats
from dreamcycle.zeitgeist._log_reader import LogReader
from dreamcycle.zeitgeist.backend import KeyExists, ObjectTooLarge, PreconditionFailed
from dreamcycle.zeitgeist.entries import CorruptSegment, Entry, canonical_json, parse_json
from dreamcycle.zeitgeist.object_keys import (
    LEASE_KEY,
    SEGMENT_PREFIX,
    SNAPSHOT_PREFIX,
    InvalidKey,
    SegmentKey,
    claim_prefix,
    parse_claim_key,
    parse_segment_key,
    rollups_below,
    snapshot_key,
)
from dreamcycle.zeitgeist.snapshot import fold_entries

#: Largest compaction lease read: a holder and a time are written.
MAX_LEASE_BYTES: Final = 64 * 1024


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
    rollups_deleted: int = 0


@dataclass(frozen=True)
class _Lease:
    etag: str
    expires_ms: int
    #: The lease object: compaction's, or the roll-up writer's (zeitgeist/_log_rollup.py).
    key: str = LEASE_KEY


@dataclass
class _Gathered:
    """The segments below the horizon, decoded."""

    keys: list[SegmentKey] = field(default_factory=list)
    entries: list[Entry] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    rejected_lines: int = 0
    corrupt: list[str] = field(default_factory=list)
    vanished: bool = False


def _claim_seq(key: str) -> int:
    """The sequence number a claim key names; a malformed one sorts below every claim (it
    is nothing this layer wrote, and compaction deletes it)."""
    try:
        return parse_claim_key(key).seq
    except InvalidKey:
        return -1


class LogCompaction(LogReader, LogHeartbeats):
    """Folding what every live peer has read into a snapshot, one compactor at a time."""

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
        # Roll-ups holding only folded segments: their copies are in the snapshot now.
        rollups = rollups_below(self.backend.list_after(SEGMENT_PREFIX, ""), horizon)
        self.backend.delete(segments)
        self.backend.delete(claims)
        self.backend.delete(older)
        self.backend.delete(rollups)
        return replace(
            report,
            segments_deleted=len(segments),
            claims_deleted=len(claims),
            snapshots_deleted=len(older),
            rollups_deleted=len(rollups),
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

    def _acquire_lease(self, now_ms: int, *, key: str = LEASE_KEY) -> _Lease | None:
        try:
            current = self.backend.read_versioned(key, max_bytes=MAX_LEASE_BYTES)
        except ObjectTooLarge as exc:
            # Without its bytes there is no version to swap against: held, in effect.
            self._refused(key, OBJECT_TOO_LARGE, f"{exc}; not taking it")
            return None
        if current is not None:
            holder, expires_ms = _parse_lease(current.data)
            if holder != self.peer_id and expires_ms >= now_ms:
                return None
        expires_ms = now_ms + self.lease_ttl_ms
        expect = None if current is None else current.etag
        try:
            etag = self.backend.write_versioned(key, self._lease_body(expires_ms), expect)
        except PreconditionFailed:
            return None
        return _Lease(etag=etag, expires_ms=expires_ms, key=key)

    def _still_holding(self, lease: _Lease) -> bool:
        """Re-assert the lease with a compare-and-swap before deleting anything."""
        try:
            self.backend.write_versioned(
                lease.key, self._lease_body(lease.expires_ms), expect=lease.etag
            )
        except PreconditionFailed:
            self.counters["compaction_lease_lost"] += 1
            return False
        return True

    def _release_lease(self, lease: _Lease) -> None:
        try:
            current = self.backend.read_versioned(lease.key, max_bytes=MAX_LEASE_BYTES)
        except ObjectTooLarge:
            return  # replaced by something that is not a lease of ours
        if current is None or _parse_lease(current.data)[0] != self.peer_id:
            return
        # Losing this race means someone else took the lease over; it is theirs now.
        with contextlib.suppress(PreconditionFailed):
            self.backend.write_versioned(lease.key, self._lease_body(0), expect=current.etag)


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
