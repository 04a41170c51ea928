"""Authority: what a correctly signed entry from another peer may change here.

A signature proves who wrote an entry, not that its writer may make the change.
A trusted peer can still be wrong or compromised, so a remote entry is refused
(recorded with its reason and counted like a bad signature) when:

- it is an outcome, attribution or learned key for a decision that another peer
  made, unless its key is marked "observer" (only the decision's peer knows what
  was recalled; this peer never turns a foreign claim about its own decision into
  pulses under its own name);
- it is a learned key whose decision's attribution was published by another peer than
  its signer, or naming a chunk that attribution did not return: a key says "this chunk
  answers this question", and only a recall the signer published says which chunks its
  question returned. A key for a decision not known here yet is not refused: it waits
  for the attribution (`awaits_attribution`), bounded in time and number, and is judged
  when that arrives. An outcome for a decision not known here waits the same way, for
  the decision's peer to convert it (daemon/memory/learning.py);
- it tombstones or supersedes (a Forget pulse included) a chunk that is pinned or
  kept with deletion policy `never`, or changes a pin, unless its key is marked
  "operator";
- a pulse or an outcome in it names a peer other than its signer.

An assert is not refused for its pin: an honest peer's asserts carry the pins its own
users set. Unless its key is marked "operator", the chunk is adopted without the pin
(`unauthorised_protection`), since a pin planted that way would refuse every other
peer's tombstone of the chunk. No entry carries a deletion policy: an adopted chunk
always takes the default one.

Entries this peer queued itself (the outbox) or signed with its own key are its
own decisions and pass. The rules read this peer's store at the time the entry
applies, so they are checked in the phase that applies it.
"""

from __future__ import annotations

import logging
from typing import Final

from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import count_rejection
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.zeitgeist.entries import (
    AssertEntry,
    AttributionEntry,
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    RetrievalKeyEntry,
    SupersedeEntry,
    TombstoneEntry,
)
from dreamcycle.zeitgeist.signing import Rejection, Verdict

log = logging.getLogger("dreamcycle.authority")

#: Key roles (zeitgeist/signing.py ROLES) that grant more than signing one's own entries.
OBSERVER: Final = "observer"
OPERATOR: Final = "operator"
#: The deletion policy (store/database.py DELETION_POLICIES) an operator alone overrides.
NEVER_DELETE: Final = "never"
#: Reconsolidate fields only an operator may change remotely.
PROTECTED_CHANGES: Final = frozenset({"pin_floor"})


def refusal(peer: Peer, entry: Entry, *, local: bool) -> str | None:
    """The recorded reason `entry` may not change this peer, if so (counted and logged)."""
    if local or _own(peer, entry):
        return None
    verdict = _problem(peer, entry)
    return None if verdict is None else recorded(entry, verdict)


def awaits_attribution(peer: Peer, entry: Entry, *, local: bool) -> bool:
    """`entry` is another peer's learned key for a decision whose attribution is not here
    yet: judged once it is (daemon/cycle/reconsolidate.py keeps it waiting)."""
    return (
        isinstance(entry, RetrievalKeyEntry)
        and not local
        and entry.origin != peer.peer_id
        and not _own(peer, entry)
        and peer.db.attribution(entry.decision_hash) is None
    )


def recorded(entry: Entry, verdict: Verdict, message: str = "entry refused") -> str:
    """`verdict` counted and logged as an authority refusal; the reason to record."""
    count_rejection(verdict.reason)
    log.warning(
        message,
        extra={"entry": entry.id, "kind": entry.KIND, "origin": entry.origin, "why": str(verdict)},
    )
    return f"authority: {verdict}"


def unauthorised_protection(peer: Peer, entry: AssertEntry) -> Verdict | None:
    """Why the pin an assert carries may not come with the chunk it adopts, if so (neither
    counted nor logged: the caller records it once the chunk is adopted without it).

    An assert under this peer's own name adopts nothing (its chunk is held here already),
    so only other origins are judged.
    """
    if entry.pin_floor <= 0 or entry.origin == peer.peer_id or _own(peer, entry):
        return None
    if _holds(peer, entry, OPERATOR):
        return None
    return Verdict(
        Rejection.NOT_OPERATOR,
        f"{entry.origin} may not pin {entry.content_hash[:12]} (pin_floor {entry.pin_floor:g} "
        "not adopted; not an operator key)",
    )


def _own(peer: Peer, entry: Entry) -> bool:
    signer = peer.zeitgeist.signer
    return (
        signer is not None
        and entry.origin == peer.peer_id
        and entry.signed
        and entry.key_id == signer.key_id
    )


def _problem(peer: Peer, entry: Entry) -> Verdict | None:
    if isinstance(entry, TombstoneEntry):
        forget = entry.forget_pulse
        if forget is not None and forget.origin_peer != entry.origin:
            return Verdict(
                Rejection.CLAIMS_OTHER_PEER,
                f"forget pulse names origin {forget.origin_peer}, signed by {entry.origin}",
            )
        return _deletion(peer, entry, entry.content_hash, "tombstone")
    if isinstance(entry, SupersedeEntry):
        return _deletion(peer, entry, entry.old_hash, "supersede")
    if isinstance(entry, ReconsolidateEntry):
        protected = sorted(PROTECTED_CHANGES & entry.changes.keys())
        if protected and not _holds(peer, entry, OPERATOR):
            return Verdict(
                Rejection.NOT_OPERATOR,
                f"{entry.origin} may not change {', '.join(protected)} of "
                f"{entry.content_hash[:12]} (not an operator key)",
            )
        return None
    if isinstance(entry, OutcomeEntry):
        if entry.observer_peer != entry.origin:
            return Verdict(
                Rejection.CLAIMS_OTHER_PEER,
                f"outcome names observer {entry.observer_peer}, signed by {entry.origin}",
            )
        return _decision(peer, entry, entry.decision_hash)
    if isinstance(entry, AttributionEntry):
        return _decision(peer, entry, entry.decision_hash)
    if isinstance(entry, RetrievalKeyEntry):
        if entry.origin == peer.peer_id:
            return None  # applies nothing: learned when the outcome was converted here
        return _decision(peer, entry, entry.decision_hash) or _attributed_key(peer, entry)
    if isinstance(entry, PulseEntry):
        pulse = entry.pulse
        if pulse.origin_peer != entry.origin:
            return Verdict(
                Rejection.CLAIMS_OTHER_PEER,
                f"pulse names origin {pulse.origin_peer}, signed by {entry.origin}",
            )
        if pulse.seed_hash is not None and pulse.kind is PulseKind.FORGET:
            return _deletion(peer, entry, pulse.seed_hash, "forget pulse")
    return None


def _holds(peer: Peer, entry: Entry, role: str) -> bool:
    return peer.entry_gate.verifier.has_role(entry, role)


def _deletion(peer: Peer, entry: Entry, content_hash: str, what: str) -> Verdict | None:
    """Only an operator deletes what is pinned or kept `never`."""
    held = peer.db.observation_by_hash(content_hash)
    if held is None or held.deleted_at is not None:
        return None
    if held.deletion_policy != NEVER_DELETE and held.pin_floor <= 0:
        return None
    if _holds(peer, entry, OPERATOR):
        return None
    protection = "kept never" if held.deletion_policy == NEVER_DELETE else "pinned"
    return Verdict(
        Rejection.NOT_OPERATOR,
        f"{what} of {protection} chunk {content_hash[:12]} by {entry.origin} (not an operator key)",
    )


def _decision(peer: Peer, entry: Entry, decision_hash: str) -> Verdict | None:
    """Only the decision's peer (or an observer) speaks about a decision already known here.

    A decision not known here cannot be this peer's: its own decisions are recorded
    before their hash is given out.
    """
    attribution = peer.db.attribution(decision_hash)
    if attribution is None or attribution.peer == entry.origin:
        return None
    if _holds(peer, entry, OBSERVER):
        return None
    return Verdict(
        Rejection.NOT_DECISION_OWNER,
        f"{entry.KIND} for decision {decision_hash[:12]} of {attribution.peer} "
        f"by {entry.origin} (not an observer key)",
    )


def _attributed_key(peer: Peer, entry: RetrievalKeyEntry) -> Verdict | None:
    """A learned key teaches only what a recall its signer published returned.

    Its decision must be one whose attribution the signer published (applied here before
    the key: phase 4 applies a batch's attributions first, and a key met before its
    attribution waits for it) or one of this peer's own, and its chunk one that
    attribution lists. A key whose attribution never came is refused when its wait ends.
    """
    decision = entry.decision_hash[:12]
    attribution = peer.db.attribution(entry.decision_hash)
    if attribution is None:
        return Verdict(
            Rejection.UNATTRIBUTED_KEY,
            f"learned key for decision {decision} by {entry.origin}: no attribution of it here",
        )
    if attribution.peer not in (entry.origin, peer.peer_id):
        return Verdict(
            Rejection.UNATTRIBUTED_KEY,
            f"learned key for decision {decision} of {attribution.peer} by {entry.origin}",
        )
    if entry.chunk_hash not in attribution.chunk_hashes:
        return Verdict(
            Rejection.UNATTRIBUTED_KEY,
            f"learned key by {entry.origin} names chunk {entry.chunk_hash[:12]}, which "
            f"decision {decision} did not return",
        )
    return None
