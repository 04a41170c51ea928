"""Writing the log: segments prepared under fresh keys, claimed, then created.

Before a segment its writer creates `claim/<peer>/<seq>` naming it (sealed by the
writer's key when it signs): two processes running with one peer id collide on the
claim and the second stops with FencedOut. A claim that no key of this peer sealed
is someone else's forgery, not a fence: publish raises ClaimTaken naming the first
sequence number after it that no claim takes, and the writer prepares its entries
again under that number (however many forged claims there are: one listing skips
them all). An object at the segment key a claim named that no key of this peer
sealed (junk written there by someone who read the claim) is not a fence either:
publish raises SegmentTaken, and the writer prepares its entries again in the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dreamcycle.zeitgeist._log_base import FencedOut, LogCore, ZeitgeistError
from dreamcycle.zeitgeist.backend import KeyExists, ObjectTooLarge
from dreamcycle.zeitgeist.entries import (
    CorruptSegment,
    Entry,
    SegmentSeal,
    decode_segment,
    parse_json,
    payload_digest,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.object_keys import (
    InvalidKey,
    claim_key,
    claim_prefix,
    parse_claim_key,
    parse_segment_key,
    segment_key,
)
from dreamcycle.zeitgeist.signing import Rejection, Verdict

#: Largest claim read: a seal and a segment key, a few hundred bytes, are written.
MAX_CLAIM_BYTES: Final = 64 * 1024
#: Claims under this peer's name read at most, highest first: to find the highest one a
#: key of this peer sealed (the others are forgeries and fence nothing), and, of a run
#: of claims skipped at once, to find one sealed by a second process ahead of this one.
FORGED_CLAIMS_CHECKED: Final = 64


class ClaimTaken(ZeitgeistError):
    """The claim of a sequence number exists and no key of this peer sealed it: a writer
    of the bucket without this peer's key forged it. Not a fence: prepare the entries
    again under `next_seq`, the first sequence number after it that no claim takes. The
    `skipped` claims from `seq` up to it were found by one listing (counted in
    `counters["claim_forged"]`); they stay, and fence nothing."""

    #: The segment key found holding an object no key of this peer sealed (SegmentTaken).
    junk_segment: str | None = None

    def __init__(
        self,
        seq: int,
        verdict: Verdict,
        *,
        next_seq: int | None = None,
        skipped: int = 1,
        message: str = "",
    ) -> None:
        self.seq = seq
        self.verdict = verdict
        self.next_seq = seq + max(skipped, 1) if next_seq is None else next_seq
        self.skipped = skipped
        super().__init__(
            message
            or f"claim for seq {seq} is not this peer's: {verdict}; {skipped} claim(s) "
            f"skipped, next free seq {self.next_seq}"
        )


class SegmentTaken(ClaimTaken):
    """This peer's claim of `seq` holds, but the segment key it names already holds an
    object that no key of this peer sealed: junk, written there by a writer of the bucket
    who read the claim. Not a fence (the object stays; readers refuse it, unsealed):
    prepare the entries again under `next_seq`, a new sequence number and key. Counted in
    `counters["segment_not_written_here"]`."""

    def __init__(self, seq: int, verdict: Verdict, key: str) -> None:
        super().__init__(
            seq,
            verdict,
            next_seq=seq + 1,
            skipped=0,
            message=f"segment {key} holds an object this peer did not write: {verdict}",
        )
        self.junk_segment = key


class EmptySegment(ZeitgeistError, ValueError):
    """A segment must carry at least one entry."""


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


class LogWriter(LogCore):
    """Publishing this peer's segments, fenced against a second process under its id."""

    def prepare(self, entries: Sequence[Entry], seq: int) -> PreparedSegment:
        """Encode `entries` under a fresh key whose HLC is above every entry's."""
        if not entries:
            raise EmptySegment(f"refusing to prepare an empty segment (peer {self.peer_id})")
        for entry in entries:
            self.clock.observe(entry.hlc)
        hlc = self.clock.now()
        key = segment_key(hlc, self.peer_id, seq)
        return PreparedSegment(key=key, data=self._encode(key, entries), hlc=hlc, seq=seq)

    def publish(self, prepared: PreparedSegment) -> PublishResult:
        """Claim the sequence number, then create the segment; idempotent for a retry.

        A sequence number below one this peer id already claimed elsewhere is refused with
        FencedOut, even once compaction deleted the claim of that very number: compaction
        keeps each peer's highest claim, so a second process (or a database restored from
        before the peer's last publish) cannot publish under numbers already used.
        ClaimTaken (a forged claim) and SegmentTaken (junk at the segment key) are not
        fences: prepare the entries again under the `next_seq` they name.
        """
        self._refuse_below_own_claims(prepared.seq)
        self._claim(prepared)
        self._own_claims_high = max(self._own_claims_high or 0, prepared.seq)
        try:
            self.backend.create(prepared.key, prepared.data)
        except KeyExists:
            self._judge_existing_segment(prepared)
        self._segment_published(prepared.key, prepared.data)
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
                raise self._skip_forged_claims(prepared.seq, verdict)
            if named_key == prepared.key:
                return  # ours, sealed by another key of this peer (rotated since)
            named = str(named_key)
        raise FencedOut(
            f"another process is publishing as peer {self.peer_id}: claim for seq "
            f"{prepared.seq} names key {named}, not {prepared.key}"
        )

    def _skip_forged_claims(self, seq: int, verdict: Verdict) -> ClaimTaken:
        """ClaimTaken for the forged claim of `seq`, naming the first sequence number after
        it that no claim takes: the whole run of claims from `seq` on is skipped at once,
        found by one listing of the claims above `seq` (those below are not listed). A
        claim far ahead (even at the highest number) is not in the run, and costs one
        more skip when this peer reaches it. The run's highest FORGED_CLAIMS_CHECKED claims
        are read: one sealed by a key of this peer was written by a second process under
        this peer's id that is ahead of this one, a fence (its next claim would collide)."""
        run_end = seq
        for above in sorted(self._claimed_seqs(after=seq)):
            if above != run_end + 1:
                break
            run_end = above
        for other in range(run_end, max(seq, run_end - FORGED_CLAIMS_CHECKED), -1):
            claim = claim_key(self.peer_id, other)
            other_verdict, named = self._claim_verdict(
                claim, self._read_or_none(claim, MAX_CLAIM_BYTES)
            )
            if other_verdict is None:
                raise FencedOut(
                    f"another process is publishing as peer {self.peer_id}: claim for seq "
                    f"{other} (above this peer's seq {seq}) names key {named}, sealed by "
                    "this peer's key"
                )
        skipped = run_end - seq + 1
        self.counters["claim_forged"] += skipped
        return ClaimTaken(seq, verdict, next_seq=run_end + 1, skipped=skipped)

    def _judge_existing_segment(self, prepared: PreparedSegment) -> None:
        """The segment key already holds an object. Fine if it is this very segment (a
        retry whose reply was lost); FencedOut if it is another one sealed by a key of this
        peer (a second process under this peer's id); otherwise SegmentTaken: junk written
        by someone who read the claim. At most the segment size limit is read."""
        key = prepared.key
        try:
            existing: bytes | None = self.backend.read(
                key, max_bytes=max(len(prepared.data), self.segment_limits.compressed_bytes)
            )
        except (KeyError, ObjectTooLarge):
            existing = None  # vanished since, or larger than any segment this peer writes
        if existing == prepared.data:
            return
        fenced = FencedOut(
            f"another process is publishing as peer {self.peer_id}: "
            f"segment {key} exists with different content"
        )
        if self.signer is None or self.verifier is None:
            raise fenced
        if existing is None:
            verdict = Verdict(Rejection.UNSIGNED, f"{key} is gone or beyond the segment limit")
        else:
            try:
                decoded = decode_segment(existing, self.segment_limits)
            except CorruptSegment as exc:
                verdict = Verdict(Rejection.UNSIGNED, f"{key} is not a segment: {exc}")
            else:
                at_ms = HybridLogicalClock.physical_ms(prepared.hlc)
                found = self._own_seal_verdict(decoded.seal, key, decoded.body_digest, at_ms)
                if found is None:
                    raise fenced
                verdict = found
        self.counters["segment_not_written_here"] += 1
        raise SegmentTaken(prepared.seq, verdict, key)

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
        this peer (in permissive mode, when this peer does not sign, also an unsealed
        claim); else why it is not this peer's."""
        assert self.verifier is not None
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
        verdict = self._own_seal_verdict(seal, claim, payload_digest(named), at_ms)
        return verdict, named_key

    def _own_seal_verdict(
        self, seal: SegmentSeal | None, object_key: str, digest: str, at_ms: int
    ) -> Verdict | None:
        """None when `seal` seals `object_key` (of `digest`) by a trusted key of this peer;
        else why not. A peer that signs seals everything it writes, so for it an unsealed
        object, or one sealed by an unknown key, is not its own in permissive mode either:
        a writer of the bucket without this peer's key cannot pass for it."""
        assert self.verifier is not None
        self.verifier.refresh()
        if self.signer is not None:
            if seal is None:
                return Verdict(Rejection.UNSIGNED, f"{object_key} has no seal")
            if seal.key_id not in self.verifier.keyring.keys:
                return Verdict(Rejection.UNKNOWN_KEY, f"key {seal.key_id} is not trusted")
        return self.verifier.check_seal(seal, object_key, self.peer_id, digest, at_ms)

    def _claimed_seqs(self, after: int | None = None) -> list[int]:
        """The sequence numbers claimed under this peer's name (above `after` only, if
        given: claim keys sort by number)."""
        start = "" if after is None else claim_key(self.peer_id, after)
        seqs = []
        for key in self.backend.list_after(claim_prefix(self.peer_id), start):
            try:
                seqs.append(parse_claim_key(key).seq)
            except InvalidKey:
                self.counters["claim_key_malformed"] += 1
        return seqs
