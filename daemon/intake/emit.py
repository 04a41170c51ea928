"""Queue this peer's own entries (outcomes, pulses, tombstones, supersedes, revisions) durably
and idempotently.

`pulse-emit` writes here while the daemon may be running: one transaction in
the shared database (WAL, synchronous=FULL), so the entry is on disk when the
command returns. Each request has a key derived from its arguments; repeating
the same command finds the key and queues nothing new.

One module for every kind of entry: they share the queue, its request keys, and the
checks of reasons, hashes and prefixes, and read best beside each other.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import blake3

from dreamcycle.daemon.runtime import Runtime, issue_hlc
from dreamcycle.pulses.constants import QUERY_MAX_CHARS, REASON_MAX_CHARS
from dreamcycle.pulses.outcome import REWARD_MAX, REWARD_MIN, Outcome
from dreamcycle.pulses.pulse import (
    PulseKind,
    SalientPulse,
    check_length,
    check_text,
    validate_parameters,
)
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store.database import Database, hashes_with_prefix, outcomes_of_decision
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import (
    ChangeValue,
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    SupersedeEntry,
    TombstoneEntry,
    encode_entry,
)

_HASH: Final = re.compile(r"^[0-9a-f]{64}$")
#: The shortest prefix of a hash resolved to the one chunk or decision it starts (recall
#: prints 12 digits); `--cited` resolves against the decision's recalled chunks.
CITED_PREFIX_MIN: Final = 8
_HASH_PREFIX: Final = re.compile(rf"^[0-9a-f]{{{CITED_PREFIX_MIN},63}}$")
#: Candidates an ambiguous prefix lists.
AMBIGUOUS_SHOWN: Final = 4
#: What to do about a hash not known here, by what it names.
_UNKNOWN_HINT: Final = {
    "chunk": "neither stored nor tombstoned here: retract it on a peer that holds it, or "
    "give its whole hash with --held-elsewhere",
    "decision": "not recorded here: report its outcome on the peer whose recall printed it, "
    "or, when its attribution is yet to arrive from that peer, give its whole hash with "
    "--decided-elsewhere",
}


def check_reason(reason: str, *, optional: bool = False) -> None:
    """A reason is the audit trail's only account of why: blank says nothing. An `optional`
    one (a pulse's, through the API) may be left out, as "", but not given blank."""
    if not reason.strip() and not (optional and reason == ""):
        raise ValueError("the reason is empty: say why")
    check_length("reason", reason, REASON_MAX_CHARS)
    check_text("the reason", reason)


class ConflictingOutcome(ValueError):
    """A second outcome for a decision that has one: both would be credited."""


class UnknownHash(ValueError):
    """A hash, or a prefix of one, that names no chunk or decision known here."""


def resolve_hash(rt: Runtime, what: str, given: str) -> str:
    """The one known `what` ("chunk" or "decision") hash that `given` is, or starts.

    ValueError names the problem: not a hash, none known (UnknownHash), or a prefix of more
    than one (listing a few).
    """
    if not (_HASH.match(given) or _HASH_PREFIX.match(given)):
        raise ValueError(
            f"{given!r} is not a {what} hash (64 lowercase hex digits, or a unique prefix of "
            f"at least {CITED_PREFIX_MIN})"
        )
    found = hashes_with_prefix(rt.db, what, given, limit=AMBIGUOUS_SHOWN + 1)
    if not found:
        named = given if _HASH.match(given) else f"starting {given}"
        raise UnknownHash(f"{what} {named} is {_UNKNOWN_HINT[what]}")
    if len(found) > 1:
        listed = ", ".join(found[:AMBIGUOUS_SHOWN]) + (
            ", ..." if len(found) > AMBIGUOUS_SHOWN else ""
        )
        raise ValueError(f"{given} starts more than one {what} hash ({listed}): give more digits")
    return found[0]


@dataclass(frozen=True)
class Emitted:
    entry_id: str
    new: bool  # False: an identical request was already queued


@dataclass(frozen=True)
class PulseRequest:
    text: str
    kind: PulseKind
    strength: float
    sigma: float
    k: int
    max_hops: int
    decay_per_hop: float
    ttl_s: float
    reason: str
    nonce: str = ""
    #: Seed at this stored chunk (its embedding and hash) instead of at `text`.
    seed_chunk: str | None = None


def _request_key(verb: str, **fields: Any) -> str:
    return (
        verb
        + ":"
        + blake3.blake3(
            json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:32]
    )


def _queue(
    rt: Runtime,
    request_key: str,
    build: Callable[[int], Entry],
    refuse: Callable[[], None] | None = None,
) -> Emitted:
    """Queue the entry `build` makes, unless the same request was queued already; `refuse`
    raises when a new request contradicts what is stored (checked in the same transaction)."""
    db = rt.db
    with db.transaction():
        existing = db.request_entry(request_key)
        if existing is not None:
            return Emitted(existing, new=False)
        if refuse is not None:
            refuse()
        entry = build(issue_hlc(db, rt.clock.now_ms))
        db.outbox_add(
            entry.id,
            entry.KIND,
            entry.hlc,
            encode_entry(entry),
            now_ms=rt.clock.now_ms(),
            request_key=request_key,
        )
    return Emitted(entry.id, new=True)


def emit_outcome(
    rt: Runtime,
    *,
    decision: str,
    reward: float,
    reason: str,
    cited: Sequence[str] = (),
    decided_elsewhere: bool = False,
) -> Emitted:
    """Queue an outcome of a decision recorded here; `cited` names the recalled chunks the
    decision used.

    `decision` and each cited hash are 64 lowercase hex digits, or a unique prefix of at
    least CITED_PREFIX_MIN of them; every cited chunk must be among the chunks the decision
    recalled. `decided_elsewhere` queues an outcome for a whole decision hash not recorded
    here (yet): it waits until the decision's attribution arrives, and its citations are
    checked then.
    """
    for given in cited:
        _check_cited_form(given)
    check_reason(reason)
    if _HASH_PREFIX.match(decision):
        decision = resolve_hash(rt, "decision", decision)
    # The request's own form (hash, reward, reason) before whether the decision is known.
    Outcome(
        decision_hash=decision, reward=reward, observer_peer=rt.peer_id, ts=0, reason=reason
    ).validate()
    if not (decided_elsewhere and rt.db.attribution(decision) is None):
        decision = resolve_hash(rt, "decision", decision)
    chunks = resolve_cited(rt, decision, cited, decided_elsewhere=decided_elsewhere)
    Outcome(
        decision_hash=decision,
        reward=reward,
        observer_peer=rt.peer_id,
        ts=0,
        reason=reason,
        cited=chunks,
    ).validate()
    fields: dict[str, Any] = {"decision": decision, "reward": reward, "reason": reason}
    if chunks:  # requests without citations keep the key they always had
        fields["cited"] = list(chunks)
    key = _request_key("outcome", **fields)

    def refuse_a_second_outcome() -> None:
        earlier = outcomes_of_decision(rt.db, decision)
        if earlier:
            entry, earlier_reward, earlier_reason = earlier[0]
            raise ConflictingOutcome(
                f"decision {decision} already has an outcome (entry {entry}: reward "
                f"{earlier_reward:g}, reason {earlier_reason!r}); both would be credited, so "
                "this one is refused. An outcome is final: there is no way to withdraw or "
                "replace it; to offset its credit, reinforce or penalize the chunks it cited"
            )

    return _queue(
        rt,
        key,
        lambda hlc: OutcomeEntry(
            hlc=hlc,
            origin=rt.peer_id,
            decision_hash=decision,
            reward=reward,
            observer_peer=rt.peer_id,
            reason=reason,
            cited=chunks,
        ),
        refuse_a_second_outcome,
    )


def emit_session_outcome(rt: Runtime, *, session: str, reward: float, reason: str) -> int:
    """Record a result reported once for a whole agent session; the next cycle credits the
    session's decisions from it (daemon.memory.implicit_credit). Returns its id."""
    check_text("the session id", session)
    if not session.strip():
        raise ValueError("the session id is empty")
    check_reason(reason)
    if not (math.isfinite(reward) and REWARD_MIN <= reward <= REWARD_MAX) or reward == 0:
        raise ValueError(
            f"a session's reward must be non-zero and in [{REWARD_MIN:g}, {REWARD_MAX:g}], "
            f"got {reward}"
        )
    with rt.db.transaction():
        return rt.db.record_session_outcome(
            session, reward=reward, reason=reason, ts_ms=rt.clock.now_ms()
        )


def resolve_cited(
    rt: Runtime, decision: str, cited: Sequence[str], *, decided_elsewhere: bool = False
) -> tuple[str, ...]:
    """Full cited hashes, sorted and unique, each among the chunks the decision (recorded
    here) recalled; ValueError names the first bad one. A decision `decided_elsewhere`, not
    recorded here, takes whole hashes only: nothing here can resolve a prefix."""
    if not cited:
        return ()
    attribution = rt.db.attribution(decision)
    if attribution is None:
        if not decided_elsewhere:
            raise UnknownHash(f"decision {decision} is {_UNKNOWN_HINT['decision']}")
        for given in cited:
            _check_cited_form(given)
            if not _HASH.match(given):
                raise ValueError(
                    f"cited chunk {given!r} is a prefix, and decision {decision} was not "
                    "recorded here to resolve it: give the full 64-digit hash"
                )
        return tuple(sorted(set(cited)))
    recalled = sorted(set(attribution.chunk_hashes))
    resolved: set[str] = set()
    for given in cited:
        _check_cited_form(given)
        matches = [h for h in recalled if h.startswith(given)]
        if len(matches) != 1:
            if _HASH.match(given):
                raise ValueError(
                    f"cited chunk {given} is not among the chunks decision {decision} recalled"
                )
            raise ValueError(
                f"cited chunk {given!r} matches {'none' if not matches else len(matches)} of "
                f"the chunks decision {decision} recalled"
            )
        resolved.add(matches[0])
    return tuple(sorted(resolved))


def _check_cited_form(given: str) -> None:
    if not (_HASH.match(given) or _HASH_PREFIX.match(given)):
        raise ValueError(
            f"cited chunk {given!r} is not a chunk hash (64 lowercase hex digits, or a "
            f"unique prefix of at least {CITED_PREFIX_MIN})"
        )


def emit_pulse(rt: Runtime, request: PulseRequest, *, embedded: Vector | None = None) -> Emitted:
    """`embedded`: the text's embedding, when the caller made it (outside the write lock)."""
    if request.kind is PulseKind.FORGET:
        raise ValueError("forget pulses travel with a tombstone: use `pulse-emit tombstone HASH`")
    check_reason(request.reason, optional=True)
    # Refused before any embedding (the API's request model bounds these before it embeds).
    validate_parameters(
        kind=request.kind,
        strength=request.strength,
        sigma=request.sigma,
        max_hops=request.max_hops,
        k=request.k,
        decay_per_hop=request.decay_per_hop,
        ttl_s=request.ttl_s,
        reason=request.reason,
    )
    if request.seed_chunk is not None:
        stored = rt.db.embedding_of_hash(request.seed_chunk, rt.embedder.index_version)
        if stored is None:
            raise ValueError(
                f"chunk {request.seed_chunk} has no stored embedding of "
                f"{rt.embedder.index_version} to seed at"
            )
        seed, seed_hash = stored, request.seed_chunk
    elif not request.text.strip():
        raise ValueError("the pulse's text is empty: a pulse needs text to seed its embedding")
    else:
        check_text("the pulse's text", request.text)
        check_length("the pulse's text", request.text, QUERY_MAX_CHARS, ValueError)
        seed = rt.embedder.embed_one(request.text) if embedded is None else embedded
        seed_hash = content_hash(request.text)

    def build(hlc: int) -> PulseEntry:
        pulse = SalientPulse(
            seed_embedding=seed,
            kind=request.kind,
            strength=request.strength,
            sigma=request.sigma,
            max_hops=request.max_hops,
            k=request.k,
            decay_per_hop=request.decay_per_hop,
            ts=hlc,
            origin_peer=rt.peer_id,
            reason=request.reason,
            ttl_s=request.ttl_s,
            index_version=rt.embedder.index_version,
            seed_hash=seed_hash,
        ).with_id()
        pulse.validate()
        return PulseEntry(hlc=hlc, origin=rt.peer_id, pulse=pulse)

    # Validate before touching the database, so a bad request writes nothing.
    build(0)
    fields = {**request.__dict__, "kind": request.kind.value, "text": seed_hash}
    if request.seed_chunk is None:  # text-seeded requests keep the key they always had
        del fields["seed_chunk"]
    return _queue(rt, _request_key("pulse", **fields), build)


def emit_tombstone(
    rt: Runtime, *, digest: str, reason: str, ttl_s: float, held_elsewhere: bool = False
) -> Emitted:
    """Queue the retraction of a chunk stored or tombstoned here, named by its hash or a
    unique prefix of it; `held_elsewhere` retracts a whole hash this peer never held."""
    check_reason(reason)
    if not (held_elsewhere and _HASH.match(digest)):
        digest = resolve_hash(rt, "chunk", digest)
    seed = rt.db.embedding_of_hash(digest, rt.embedder.index_version)

    def build(hlc: int) -> TombstoneEntry:
        forget = None
        if seed is not None:
            forget = SalientPulse(
                seed_embedding=seed,
                kind=PulseKind.FORGET,
                strength=math.inf,
                sigma=1.0,
                max_hops=0,
                k=1,
                decay_per_hop=0.0,
                ts=hlc,
                origin_peer=rt.peer_id,
                reason=reason,
                ttl_s=ttl_s,
                index_version=rt.embedder.index_version,
                seed_hash=digest,
            ).with_id()
            forget.validate()
        return TombstoneEntry(
            hlc=hlc,
            origin=rt.peer_id,
            content_hash=digest,
            reason=reason,
            collectable_after_ms=None,
            forget_pulse=forget,
        )

    build(0)  # a bad ttl is refused before anything is written
    return _queue(rt, _request_key("tombstone", digest=digest), build)


def emit_supersede(rt: Runtime, *, old_hash: str, new_hash: str, reason: str) -> Emitted:
    """Queue `new_hash` replacing `old_hash`: the new chunk inherits the old one's salience and
    the old is tombstoned, here and on every peer."""
    for digest in (old_hash, new_hash):
        if not _HASH.match(digest):
            raise ValueError(f"{digest!r} is not a chunk hash (64 lowercase hex digits)")
    check_reason(reason)
    return _queue(
        rt,
        _request_key("supersede", old=old_hash, new=new_hash),
        lambda hlc: SupersedeEntry(
            hlc=hlc, origin=rt.peer_id, old_hash=old_hash, new_hash=new_hash, reason=reason
        ),
    )


@dataclass(frozen=True)
class QueuedRetractions:
    """The retractions queued here and not applied yet: supersedes (old hash -> new) and
    tombstoned hashes. Read once (`queued_retractions`) for as many edits as are weighed."""

    superseded: Mapping[str, str]
    tombstoned: frozenset[str]

    def contradiction(self, old_hash: str, new_hash: str) -> str | None:
        """Why superseding `old_hash` by `new_hash` would contradict them, None if it would
        not: the old chunk already superseded by another or tombstoned, or the new one
        itself on its way out. Applied in order at the next cycle, either would retract
        both versions (an edit and its undo), or leave two successors."""
        due = "at the next dream cycle"
        if old_hash in self.tombstoned:
            return f"chunk {old_hash} is queued to be retracted (tombstoned) {due}"
        successor = self.superseded.get(old_hash)
        if successor is not None and successor != new_hash:
            return (
                f"chunk {old_hash} is queued to be superseded by {successor} {due}: change "
                "that one instead"
            )
        if new_hash in self.tombstoned or new_hash in self.superseded:
            return (
                f"the new content is chunk {new_hash}, which is queued to be retracted {due}; "
                "a retracted chunk's content cannot be saved again"
            )
        return None


def queued_retractions(db: Database) -> QueuedRetractions:
    superseded: dict[str, str] = {}
    tombstoned: set[str] = set()
    for _, body in db.outbox_unapplied_of_kinds((SupersedeEntry.KIND, TombstoneEntry.KIND)):
        if body.get("kind") == SupersedeEntry.KIND:
            superseded[str(body["old_hash"])] = str(body["new_hash"])
        else:
            tombstoned.add(str(body["content_hash"]))
    return QueuedRetractions(superseded, frozenset(tombstoned))


def emit_revision(
    rt: Runtime, *, digest: str, changes: Mapping[str, ChangeValue], nonce: str
) -> Emitted:
    """Queue metadata changes (title, topic_key, importance, pin_floor) to a chunk. `nonce`
    names the revision, so a change back to an earlier value is a new request rather than a
    repeat."""
    if not _HASH.match(digest):
        raise ValueError(f"{digest!r} is not a chunk hash (64 lowercase hex digits)")
    return _queue(
        rt,
        _request_key("reconsolidate", digest=digest, changes=dict(changes), nonce=nonce),
        lambda hlc: ReconsolidateEntry(
            hlc=hlc, origin=rt.peer_id, content_hash=digest, changes=changes
        ),
    )
