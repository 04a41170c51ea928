"""Reading the log: polls inside the window, cursors, bounded reads, the snapshot to trust.

A reader lists from `cursor - window` and skips what it has applied, so a segment that
landed late is still seen; an idle poll is one listing request, and a key listed again
that was applied costs a dictionary lookup. Nothing read can move
a reader past real segments: keys dated beyond the allowed clock skew are deferred, a
cursor never moves beyond the wall clock of the poll that listed its segment, and a
snapshot is taken only if it is sealed, not dated after now, holds no entry dated
after itself, and holds everything the snapshot before it held.

Nor can a key drag the reader's clock: with a verifier, a segment's time is observed
only once the segment (or its copy in a roll-up) was read and its seal held
(`check_read`), so that a key listed, still to be read or refused moves neither the
clock nor (`cursor_for`) a cursor. A writer without a trusted key cannot make the mesh
stamp its entries up to the allowed skew ahead of the present.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from dreamcycle.zeitgeist._log_base import LogCore
from dreamcycle.zeitgeist.backend import ObjectTooLarge
from dreamcycle.zeitgeist.entries import (
    CorruptSegment,
    DecodedSegment,
    PulseEntry,
    Refusal,
    SegmentLimits,
    TombstoneEntry,
    decode_segment,
    read_seal,
)
from dreamcycle.zeitgeist.hlc import check_hlc, hlc_from_ms
from dreamcycle.zeitgeist.object_keys import (
    SEGMENT_PREFIX,
    SNAPSHOT_PREFIX,
    InvalidKey,
    is_rollup_key,
    parse_segment_key,
    parse_snapshot_key,
    segment_listing_start,
)
from dreamcycle.zeitgeist.signing import Verdict
from dreamcycle.zeitgeist.snapshot import Snapshot


class LogReader(LogCore):
    """Polling for segments, reading them and snapshots within their limits."""

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
        written meanwhile; a cursor kept lower only lists a little more again.

        A segment refused since the last poll (its seal failed, `check_read`) moves no
        cursor: 0 here, below any cursor (a segment of the same time is then held back
        with it, and listed again)."""
        if key_hlc in self._refused_hlcs:
            return 0
        listed_at = self._now_hlc() if self._listed_at_hlc is None else self._listed_at_hlc
        return min(key_hlc, listed_at)

    def poll(self, cursor_hlc: int, is_applied: Callable[[str], bool]) -> list[str]:
        """Unapplied segment keys from `listing_start(cursor_hlc)` on, ascending; one listing.

        Keys stamped more than `max_future_ms` ahead of this peer's wall clock are
        deferred (not returned) until the wall clock comes close. A key listed is not
        observed by the clock: `check_read` does that once its segment was read and its
        seal held. Only a log without a verifier, which trusts every object it reads,
        observes the keys it lists. `is_applied` must keep saying True once it has (an
        applied segment is recorded for good): such a key is remembered, and later polls
        neither parse it again nor ask about it.
        """
        start_hlc = self.listing_start(cursor_hlc)
        self._listed_at_hlc = self._now_hlc()
        self._refused_hlcs = set()
        trusts_all = self.verifier is None
        fresh: list[str] = []
        horizon_ahead = hlc_from_ms(self._wall_ms() + self.max_future_ms)
        known = self._known_applied
        # What this listing holds and was applied: keys that left the window (or were
        # compacted away) drop out of the memory by not being listed.
        still_known: set[str] = set()
        listing = self.backend.list_after(SEGMENT_PREFIX, segment_listing_start(start_hlc))
        self._listed(listing)
        for key in listing:
            if is_rollup_key(key):
                continue  # read through read_rollups (zeitgeist/_log_rollup.py)
            if key in known:
                still_known.add(key)  # applied when first listed
                continue
            try:
                parsed = parse_segment_key(key)
            except InvalidKey as exc:
                self._refused(key, Refusal.MALFORMED_KEY, str(exc), counter="segment_key_malformed")
                continue
            if parsed.hlc > horizon_ahead:
                # Reading it would drag every clock (and cursor) of the mesh that far
                # ahead; the key is left for a later poll, once the wall clock is near it.
                self._refused(
                    key,
                    Refusal.FROM_THE_FUTURE,
                    "deferred: its time is beyond the allowed clock skew",
                    counter="segment_from_the_future",
                )
                continue
            if trusts_all:
                self.clock.observe(parsed.hlc)
            if is_applied(key):
                still_known.add(key)
            else:
                fresh.append(key)
        self._known_applied = still_known
        return fresh

    def check_read(self, key: str, decoded: DecodedSegment) -> Verdict | None:
        """Why segment `key`, as read (from the log, or its copy in a roll-up), is refused
        (its seal fails), if so. Otherwise its time is observed by this peer's clock: the
        one place a segment of another peer moves it.

        A refused segment's time is remembered until the next poll, so that it moves no
        cursor either (`cursor_for`). In permissive mode an unsigned segment (or one sealed
        by an unknown key) is not refused, and observed as before.
        """
        problem = self.seal_problem(key, decoded)
        hlc = parse_segment_key(key).hlc
        if problem is None:
            self.clock.observe(hlc)
        else:
            self._refused_hlcs.add(hlc)
        return problem

    def fetch(self, key: str) -> DecodedSegment:
        """Read and decode one segment within `segment_limits`.

        Raises CorruptSegment for bytes that are not a segment or are beyond the limits,
        and KeyError if the segment was compacted away meanwhile (its entries are in the
        newest snapshot). Every refusal, of the segment or of its lines, is counted and
        logged once.
        """
        return self._read_decoded(key, self.segment_limits, on_bytes=self._segment_bytes_read)

    def _read_decoded(
        self,
        key: str,
        limits: SegmentLimits,
        *,
        on_bytes: Callable[[str, bytes], None] | None = None,
    ) -> DecodedSegment:
        try:
            try:
                data = self.backend.read(key, max_bytes=limits.compressed_bytes)
            except ObjectTooLarge as exc:
                raise CorruptSegment(str(exc), Refusal.SEGMENT_TOO_LARGE) from None
        except CorruptSegment as exc:
            self._refused(key, exc.refusal, str(exc))
            raise
        if on_bytes is not None:
            on_bytes(key, data)
        return self._decode_counted(key, data, limits)

    def _decode_counted(self, key: str, data: bytes, limits: SegmentLimits) -> DecodedSegment:
        """`data` decoded as object `key` within `limits`, every refusal counted and logged
        once (a segment read from the log, or its copy in a roll-up).

        With a verifier, the seal is checked first (`read_seal`): an object it refuses is
        returned with its seal and no entry, never decoded, and its verdict is the one
        `seal_problem` gives the caller.
        """
        try:
            if self.verifier is not None:
                sealed = read_seal(data, limits)
                if self.seal_problem(key, sealed) is not None:
                    return sealed
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
