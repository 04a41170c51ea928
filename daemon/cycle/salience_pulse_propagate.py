"""Phase 5, salience_pulse_propagate: outcomes become pulses, and every pulse propagates.

Reads: outcomes due for credit and their attributions, what agent sessions did since the
last cycle (daemon.memory.implicit_credit), the ordered pulse entries, each origin's
budget window, the live index (k-NN for the BFS; a batch's first two hops are asked at
once, pulses.neighbour_cache). Writes: pulses derived from outcomes (outbox), each
pulse's salience changes with its journal step and its row in `pulses_applied`, budget
charges; then, in one last transaction, the segments read this cycle (and those to read
again once their key is trusted), the cursor and the HLC. Pulses commit in batches of
PULSES_PER_TRANSACTION, so pulse-emit, recall and ingest never wait on one long
transaction.
A crash inside: batches committed stay applied; the segments and the cursor are not
recorded yet, so the next cycle reads them again and skips the pulses already recorded.
"""

from __future__ import annotations

from typing import Any, Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cycle import authority
from dreamcycle.daemon.cycle._budget import (
    BUDGET_LOOKBACK_MS,
    budget_window,
    charge_budgets,
    refuse_from_the_future,
)
from dreamcycle.daemon.cycle._entry import isolated, record
from dreamcycle.daemon.cycle._position import cursor, key_hlc, persist_clock
from dreamcycle.daemon.cycle.state import CURSOR_META_KEY, CycleState, EntryOutcome, EntryStatus
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory import implicit_credit
from dreamcycle.daemon.memory.forgetting import revive
from dreamcycle.daemon.memory.learning import convert_outcomes
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.neighbour_cache import NeighbourCache
from dreamcycle.pulses.propagate import UpdateRule, propagate
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.store import budget, tiers
from dreamcycle.zeitgeist.entries import PulseEntry, entry_order_key
from dreamcycle.zeitgeist.hlc import hlc_from_ms

#: Pulses applied per transaction: other writers wait at most this long for the lock.
PULSES_PER_TRANSACTION: Final = 500


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Outcomes become pulses (where the attribution is ours), then every pulse propagates."""
    db = peer.db
    stats = dict.fromkeys(
        ("applied", "rejected", "expired", "skipped", "duplicate", "changed", "knn_queries"), 0
    )
    with db.transaction():
        derived, keys_changed = convert_outcomes(peer, st.now_ms)
        inferred, implicit = implicit_credit.run(peer, st.now_ms)
    stats["from_outcomes"] = len(derived)
    stats["keys_changed"] = keys_changed + implicit.keys_changed
    stats["implicit_credits"] = inferred
    stats["from_implicit_credits"] = len(implicit.pulses)
    derived += implicit.pulses
    queued_here = {e.id for e in st.local} | {e.id for e in derived}
    pulses = sorted(
        [e for e in st.ordered if isinstance(e, PulseEntry)] + derived, key=entry_order_key
    )
    stats["from_the_future"] = refuse_from_the_future(peer, st, pulses, queued_here)
    charges = charge_budgets(peer, st, pulses, queued_here)
    stats["over_budget"] = sum(not c.admitted for c in charges.values())
    for start in range(0, len(pulses), PULSES_PER_TRANSACTION):
        batch = pulses[start : start + PULSES_PER_TRANSACTION]
        done: list[PulseEntry] = []
        neighbours = _prefetched(peer, st, batch)
        with db.transaction():
            for entry in batch:
                # Checked before every pulse (a batch of wide pulses takes seconds): the
                # pulses applied so far commit as a smaller batch would have.
                if st.stop_requested():
                    break
                local = entry.id in queued_here
                _apply_pulse_entry(peer, st, entry, stats, local=local, neighbours=neighbours)
                if entry.id in charges:
                    budget.record_charge(db, entry.pulse.pulse_id, charges[entry.id])
                done.append(entry)
            peer.salience.flush()
            db.outbox_mark_applied([e.id for e in done if e.id in queued_here])
        if len(done) < len(batch):
            # Segments and the cursor stay unrecorded: the next start reads them again
            # and skips the pulses applied.
            return {**stats, "interrupted": True}
    with db.transaction():
        db.outbox_mark_applied([e.id for e in st.local])
        position = cursor(peer)
        for segment in st.segments:
            db.record_segment(
                segment.key,
                entries=len(segment.entries),
                rejected=segment.rejected,
                skipped=segment.skipped,
                now_ms=st.now_ms,
            )
            position = max(position, peer.zeitgeist.cursor_for(key_hlc(segment.key)))
        for key in st.own_keys:
            position = max(position, peer.zeitgeist.cursor_for(key_hlc(key)))
        _record_awaiting_signers(peer, st)
        if st.unread_keys:
            # Never past a segment still to be read: the next listings hold it again.
            held = peer.zeitgeist.cursor_for(key_hlc(st.unread_keys[0]))
            position = max(cursor(peer), min(position, held))
        db.set_meta(CURSOR_META_KEY, str(position))
        persist_clock(peer)
        budget.forget_windows_before(db, budget_window(st.now_ms - BUDGET_LOOKBACK_MS, st.now_ms))
    return stats


def _record_awaiting_signers(peer: Peer, st: CycleState) -> None:
    """Segments refused for want of a key: kept to read again (bounded in age and number);
    those read again this cycle leave the wait."""
    db = peer.db
    for segment_key in st.read_again:
        db.stop_awaiting(segment_key)
    for segment_key, signer_key_id in st.awaiting_signer.items():
        db.await_signer(segment_key, signer_key_id=signer_key_id, segment_hlc=key_hlc(segment_key))
    if st.awaiting_signer:
        oldest = hlc_from_ms(max(0, st.now_ms - defaults.AWAIT_KEY_FOR_MS))
        db.bound_awaiting(oldest_hlc=oldest, most=defaults.AWAIT_KEY_SEGMENTS)


def _prefetched(peer: Peer, st: CycleState, batch: list[PulseEntry]) -> NeighbourCache:
    """The index's neighbours for the first two hops of the batch's pulses still to apply,
    asked in a few batched searches rather than a few per pulse. A pulse that will be
    refused costs no search: a trusted peer's refused pulses must not buy work here."""
    neighbours = NeighbourCache(peer.index)
    neighbours.prefetch(
        entry.pulse
        for entry in batch
        if entry.id not in st.rejected
        # The one authority rule for pulses (daemon/cycle/authority.py).
        and entry.pulse.origin_peer == entry.origin
        and not entry.pulse.is_expired(st.now_ms)
        and not peer.db.pulse_seen(entry.pulse.pulse_id)
    )
    return neighbours


def _apply_pulse_entry(
    peer: Peer,
    st: CycleState,
    entry: PulseEntry,
    stats: dict[str, int],
    *,
    local: bool,
    neighbours: NeighbourCache,
) -> None:
    db, pulse = peer.db, entry.pulse
    if db.pulse_seen(pulse.pulse_id):
        stats[EntryStatus.DUPLICATE] += 1
        record(db, entry, EntryStatus.DUPLICATE, None)
        return
    changes: list[int] = []

    def apply() -> EntryOutcome:
        if pulse.is_expired(st.now_ms):
            return EntryStatus.EXPIRED, "ts + ttl < now"
        if pulse.kind is PulseKind.FORGET:
            return EntryStatus.SKIPPED, "forget pulses travel with their tombstone"
        if pulse.kind is PulseKind.REWARD and pulse.seed_hash and peer.salience.any_cold():
            # A Reward seeded at a swept chunk brings it back before it is credited.
            cold = tiers.cold_rowid_of_hash(db, pulse.seed_hash)
            if cold is not None:
                revive(peer, [cold], st.now_ms)
        rule = UpdateRule(peer.config.pulses.update_rule)
        result = propagate(pulse, neighbours, peer.salience, rule)
        body = {"pulse": pulse.to_json(), "rule": rule.value}
        journal_seq = db.journal(JournalKind.PULSE, pulse.pulse_id, body, now_ms=st.now_ms)
        db.record_pulse(
            pulse.pulse_id,
            status=EntryStatus.APPLIED,
            origin_peer=pulse.origin_peer,
            reason=pulse.reason,
            changed=len(result.changes),
            journal_seq=journal_seq,
            now_ms=st.now_ms,
        )
        changes.append(len(result.changes))
        stats["knn_queries"] += result.knn_queries
        return EntryStatus.APPLIED, None

    rejected = st.rejected.get(entry.id) or authority.refusal(peer, entry, local=local)
    status, reason = isolated(peer, entry, rejected, apply)
    if status != EntryStatus.APPLIED:
        db.record_pulse(
            pulse.pulse_id,
            status=status,
            origin_peer=pulse.origin_peer,
            reason=reason,
            changed=0,
            journal_seq=None,
            now_ms=st.now_ms,
        )
    stats[status] += 1
    stats["changed"] += sum(changes)
    record(db, entry, status, reason)
