"""Writing the log: segments prepared under fresh keys, claimed, then created.

Before a segment its writer creates `claim/<peer>/<seq>` naming it (sealed by the
writer's key when it signs): two processes running with one peer id collide on the
claim and the second stops with FencedOut. A claim that no key of this peer sealed
is someone else's forgery, not a fence: publish raises ClaimTaken, and the writer
prepares its entries again under the next sequence number.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from dreamcycle.zeitgeist._log_base import FencedOut, LogCore, ZeitgeistError
from dreamcycle.zeitgeist.backend import KeyExists
from dreamcycle.zeitgeist.entries import Entry, SegmentSeal, parse_json, payload_digest
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.keys import (
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
#: Claims under this peer's name read at most, highest first, to find the highest one a key
#: of this peer sealed (the others are forgeries and fence nothing).
FORGED_CLAIMS_CHECKED: Final = 64


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

    def _claimed_seqs(self) -> list[int]:
        seqs = []
        for key in self.backend.list_after(claim_prefix(self.peer_id), ""):
            try:
                seqs.append(parse_claim_key(key).seq)
            except InvalidKey:
                self.counters["claim_key_malformed"] += 1
        return seqs
