"""Phase 4, reconsolidate: every structural entry applied, in the interleaved order
(a batch's attributions first, so that the outcomes and keys of their decisions find them).

Reads: the ordered entries (pulses are left to phase 5), the chunks they name.
Writes, in one transaction: each entry's effect in its own savepoint (tombstones,
supersedes, pin and metadata changes, adopted chunks, attributions, outcomes, learned
keys) together with its status in `entries_applied`; learned keys met before their
decision's attribution kept waiting, and those whose attribution came judged
(daemon/cycle/_awaiting_attribution.py); local entries marked applied in the outbox. Adopted
chunks join, and hidden ones leave, the live index after the commit.
A crash inside: nothing of the transaction stays; the next cycle applies the same entries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np

from dreamcycle.daemon.cycle import _awaiting_attribution as awaiting_attribution
from dreamcycle.daemon.cycle import authority
from dreamcycle.daemon.cycle._adopt import adopt, embed_adoptable
from dreamcycle.daemon.cycle._entry import isolated, record
from dreamcycle.daemon.cycle._tombstone import hide_chunk
from dreamcycle.daemon.cycle.state import CycleState, EntryOutcome, EntryStatus
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.learning import teach_key
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.outcome import Attribution, Outcome
from dreamcycle.pulses.vectors import Vector
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
from dreamcycle.zeitgeist.hlc import HybridLogicalClock

#: The reason a superseded chunk's tombstone carries.
SUPERSEDED_REASON: Final = "superseded"


@dataclass
class _Effects:
    """What this phase's entries ask of the live index once their transaction commits, and
    this peer's embeddings of the remote chunks it may adopt."""

    hidden: list[int] = field(default_factory=list)
    adopted: list[tuple[int, Vector]] = field(default_factory=list)
    expected: dict[str, Vector] = field(default_factory=dict)


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Apply assert / supersede / reconsolidate / tombstone / attribution / outcome entries."""
    db = peer.db
    counts: dict[str, int] = {}
    local_ids = {e.id for e in st.local}
    # Outside the transaction: embedding is slow, and writers wait on the lock.
    effects = _Effects(expected=embed_adoptable(peer, st))
    # A batch's attributions first (in their order): a decision's outcomes and learned keys
    # are judged against its attribution, and a key carries its outcome's HLC, which an
    # observer whose clock lags may have stamped before the attribution's.
    ordered = sorted(st.ordered, key=lambda e: not isinstance(e, AttributionEntry))

    def judge(entry: Entry) -> EntryOutcome:
        return isolated(
            peer,
            entry,
            # Judged against the store as the entries before it left it.
            st.rejected.get(entry.id)
            or authority.refusal(peer, entry, local=entry.id in local_ids),
            functools.partial(HANDLERS.get(type(entry), _unhandled), peer, st, entry, effects),
            (effects.hidden, effects.adopted),
        )

    def count(kind: str, status: str) -> None:
        counts[f"{kind}:{status}"] = counts.get(f"{kind}:{status}", 0) + 1

    with db.transaction():
        for entry in ordered:
            if isinstance(entry, PulseEntry):
                continue
            if (
                isinstance(entry, RetrievalKeyEntry)
                and entry.id not in st.rejected
                and authority.awaits_attribution(peer, entry, local=entry.id in local_ids)
            ):
                awaiting_attribution.keep_waiting(peer, entry)
                count(entry.KIND, EntryStatus.AWAITING)
                continue
            status, reason = judge(entry)
            record(db, entry, status, reason)
            count(entry.KIND, status)
        # After this batch's attributions: the keys that waited for them.
        for status in awaiting_attribution.retry_attributed(peer, judge):
            count(f"{RetrievalKeyEntry.KIND}:retried", status)
        if expired := awaiting_attribution.expire(peer, st.now_ms):
            counts[f"{RetrievalKeyEntry.KIND}:expired"] = expired
        db.outbox_mark_applied([e.id for e in st.local if not isinstance(e, PulseEntry)])
        peer.salience.flush()
    index = peer.index
    if effects.adopted:
        index.add(
            np.array([r for r, _ in effects.adopted], dtype=np.int64),
            np.stack([v for _, v in effects.adopted]),
        )
    if effects.hidden:
        index.mark_deleted(np.array(effects.hidden, dtype=np.int64))
    return counts


def _tombstone(
    peer: Peer, st: CycleState, entry: TombstoneEntry, effects: _Effects
) -> EntryOutcome:
    db = peer.db
    journal_seq = db.journal(
        JournalKind.TOMBSTONE, entry.content_hash, {"hash": entry.content_hash}, now_ms=st.now_ms
    )
    rowid = hide_chunk(
        db,
        peer.salience,
        entry.content_hash,
        reason=entry.reason,
        origin_peer=entry.origin,
        now_ms=st.now_ms,
        journal_seq=journal_seq,
        collectable_after_ms=entry.collectable_after_ms,
    )
    if entry.forget_pulse is not None and not db.pulse_seen(entry.forget_pulse.pulse_id):
        db.record_pulse(
            entry.forget_pulse.pulse_id,
            status=EntryStatus.APPLIED,
            origin_peer=entry.origin,
            reason=entry.forget_pulse.reason,
            changed=0 if rowid is None else 1,
            journal_seq=journal_seq,
            now_ms=st.now_ms,
        )
    if rowid is not None:
        effects.hidden.append(rowid)
    return EntryStatus.APPLIED, None


def _supersede(
    peer: Peer, st: CycleState, entry: SupersedeEntry, effects: _Effects
) -> EntryOutcome:
    db, cache = peer.db, peer.salience
    old = db.observation_by_hash(entry.old_hash)
    new = db.observation_by_hash(entry.new_hash)
    journal_seq = db.journal(
        JournalKind.SUPERSEDE,
        entry.old_hash,
        {
            "old": None if old is None else old.rowid,
            "new": None if new is None else new.rowid,
        },
        now_ms=st.now_ms,
    )
    if old is not None and new is not None and old.deleted_at is None and new.deleted_at is None:
        cache.set_salience(new.rowid, max(cache.salience(old.rowid), new.pin_floor))
    rowid = hide_chunk(
        db,
        cache,
        entry.old_hash,
        reason=SUPERSEDED_REASON,
        origin_peer=entry.origin,
        now_ms=st.now_ms,
        journal_seq=journal_seq,
    )
    if rowid is not None:
        effects.hidden.append(rowid)
    return EntryStatus.APPLIED, None


def _reconsolidate(
    peer: Peer, st: CycleState, entry: ReconsolidateEntry, effects: _Effects
) -> EntryOutcome:
    db = peer.db
    obs = db.observation_by_hash(entry.content_hash)
    if obs is None or obs.deleted_at is not None:
        return EntryStatus.SKIPPED, "chunk not held here"
    changes = dict(entry.changes)
    if "pin_floor" in changes:
        floor = float(changes.pop("pin_floor") or 0.0)
        db.set_pin_floor(obs.rowid, floor, now_ms=st.now_ms)
        db.journal(
            JournalKind.RECONSOLIDATE,
            obs.content_hash,
            {"rowid": obs.rowid, "pin_floor": floor},
            now_ms=st.now_ms,
        )
        cache = peer.salience
        cache.set_pin_floor(obs.rowid, floor)
        if cache.salience(obs.rowid) < floor:
            cache.set_salience(obs.rowid, floor)
    if changes:
        db.revise(obs.rowid, changes, now_ms=st.now_ms)
    return EntryStatus.APPLIED, None


def _assert(peer: Peer, st: CycleState, entry: AssertEntry, effects: _Effects) -> EntryOutcome:
    expected = effects.expected.get(entry.id)
    verdict = authority.unauthorised_protection(peer, entry)
    if verdict is None:
        return adopt(peer, st, entry, effects.adopted, expected)
    # The chunk is an ordinary signal and is adopted; its pin would refuse every other
    # peer's tombstone of it, which needs an operator key. The copy has another id, but
    # only the original is recorded.
    outcome = adopt(peer, st, replace(entry, pin_floor=0.0), effects.adopted, expected)
    if outcome != (EntryStatus.APPLIED, None):
        return outcome  # not adopted here: no pin was refused
    return EntryStatus.APPLIED, authority.recorded(entry, verdict, "adopted without its pin")


def _attribution(
    peer: Peer, st: CycleState, entry: AttributionEntry, effects: _Effects
) -> EntryOutcome:
    Attribution(
        decision_hash=entry.decision_hash,
        chunk_hashes=entry.chunk_hashes,
        peer=entry.origin,
        ts=entry.hlc,
        decision_text=entry.decision_text,
    ).validate()
    peer.db.record_attribution(
        entry.decision_hash,
        entry.chunk_hashes,
        peer=entry.origin,
        hlc=entry.hlc,
        ts_ms=HybridLogicalClock.physical_ms(entry.hlc),
        decision_text=entry.decision_text,
    )
    return EntryStatus.APPLIED, None


def _outcome(peer: Peer, st: CycleState, entry: OutcomeEntry, effects: _Effects) -> EntryOutcome:
    Outcome(
        decision_hash=entry.decision_hash,
        reward=entry.reward,
        observer_peer=entry.observer_peer,
        ts=entry.hlc,
        reason=entry.reason,
        cited=entry.cited,
    ).validate()
    peer.db.record_outcome(
        entry.id,
        decision_hash=entry.decision_hash,
        reward=entry.reward,
        observer_peer=entry.observer_peer,
        hlc=entry.hlc,
        reason=entry.reason,
        expires_ms=HybridLogicalClock.physical_ms(entry.hlc)
        + int(peer.config.pulses.outcome_wait_s * 1000),
        cited=entry.cited,
    )
    return EntryStatus.APPLIED, None


def _retrieval_key(
    peer: Peer, st: CycleState, entry: RetrievalKeyEntry, effects: _Effects
) -> EntryOutcome:
    """Another peer's credited outcome teaches (or unteaches) a chunk held here a key."""
    if entry.origin == peer.peer_id:
        return EntryStatus.APPLIED, None  # learned when the outcome was converted here
    if not peer.config.learning.keys:
        return EntryStatus.SKIPPED, "learning.keys is off"
    if entry.embedding.shape != (peer.embedder.dim,):
        return (
            EntryStatus.REJECTED,
            f"embedding shape {entry.embedding.shape} != ({peer.embedder.dim},)",
        )
    if not teach_key(peer, entry.chunk_hash, entry.embedding, entry.text, entry.amount, st.now_ms):
        return EntryStatus.SKIPPED, "chunk not held here or key unchanged"
    return EntryStatus.APPLIED, None


def _unhandled(peer: Peer, st: CycleState, entry: Entry, effects: _Effects) -> EntryOutcome:
    return EntryStatus.SKIPPED, f"unhandled kind {entry.KIND}"


#: Each handler takes the entry kind it is registered for (the table below pairs them).
Handler = Callable[[Peer, CycleState, Any, _Effects], EntryOutcome]

#: One row per structural entry kind; a new kind adds a row (pulses are phase 5's).
HANDLERS: Final[dict[type[Entry], Handler]] = {
    TombstoneEntry: _tombstone,
    SupersedeEntry: _supersede,
    ReconsolidateEntry: _reconsolidate,
    AssertEntry: _assert,
    AttributionEntry: _attribution,
    OutcomeEntry: _outcome,
    RetrievalKeyEntry: _retrieval_key,
}
