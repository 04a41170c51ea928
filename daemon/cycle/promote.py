"""Phase 8, promote: this peer's entries published, and the upkeep that follows a cycle.

Reads: prepared segments (written before a crash or an outage), the outbox's unpublished
entries. Writes: each segment is prepared (sequence number, bytes, HLC) in a transaction
before it is written to the log, and marked published after; the heartbeat; compaction when
due; a roll-up of recent segments when this peer holds the roll-up lease; efficacy and
audit checkpoints; the index file when it changed and
`index.save_interval_s` passed.
A crash inside: a prepared segment is published again byte for byte at the next cycle
(entries are idempotent); while the log is unreachable, entries wait in the outbox.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Final

from dreamcycle.daemon import audit, efficacy, hostile, metrics
from dreamcycle.daemon.cycle._position import cursor, persist_clock
from dreamcycle.daemon.cycle.state import (
    LAST_COMPACTION_META_KEY,
    PUBLISH_SEQ_META_KEY,
    CycleState,
    FatalCycleError,
)
from dreamcycle.daemon.defaults import FORGED_CLAIMS_PER_PUBLISH, MAX_ENTRIES_PER_SEGMENT
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.entries import Entry, decode_entry, decode_segment
from dreamcycle.zeitgeist.keys import claim_key
from dreamcycle.zeitgeist.log import ClaimTaken, FencedOut, Heartbeat, PreparedSegment

log = logging.getLogger("dreamcycle.cycle")

#: Copies of a late segment written in one cycle at most (a slow store gets another cycle).
MAX_REPUBLISH: Final = 2


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Publish this cycle's own entries, heartbeat, roll up recent segments when this peer
    writes roll-ups, compact when due, checkpoint the
    journal and prune it when due, and write the index when it changed and
    `index.save_interval_s` passed (the service writes it at stop too)."""
    stats: dict[str, Any] = {"published_entries": 0, "segments": 0, "republished": 0}
    try:
        publish_outbox(peer, st, stats)
        _heartbeat(peer)
        rolled = peer.zeitgeist.roll_up(st.now_ms)
        stats["rolled_up"] = 0 if rolled is None else rolled.segments
        stats["compacted"] = _maybe_compact(peer, st)
    except BackendError as exc:
        log.warning("publishing stalled; entries stay queued", extra={"error": str(exc)})
        peer.snapshot_check_due = True
        stats["stalled"] = str(exc)
    stats["efficacy"] = efficacy.maybe_record(peer, st.now_ms)
    stats["audit"] = audit.maybe_checkpoint(peer, st.now_ms)
    stats["index_saved"] = peer.save_index_when_due(st.now_ms)
    return stats


def publish_outbox(peer: Peer, st: CycleState, stats: dict[str, Any]) -> None:
    db = peer.db
    # Segments prepared before a crash or an outage go first, byte for byte.
    for seq, key, data, hlc in db.prepared_segments():
        publish(peer, PreparedSegment(key=key, data=data, hlc=hlc, seq=seq), stats)
    while not st.stop_requested() and (pending := db.outbox_unpublished(MAX_ENTRIES_PER_SEGMENT)):
        entries = [decode_entry(body) for _, body in pending]
        prepared = _prepare(peer, entries, [entry_id for entry_id, _ in pending], st.now_ms)
        started = time.monotonic()
        publish(peer, prepared, stats)
        metrics.PUBLISH_SECONDS.observe(time.monotonic() - started)
        stats["published_entries"] += len(pending)


def publish(peer: Peer, prepared: PreparedSegment, stats: dict[str, Any]) -> None:
    """Write a prepared segment. One that lands late (readers may have moved past its
    key's time) gets a copy under a fresh key, prepared in the same transaction that
    marks the original published, so a crash cannot lose the copy. Entries are
    idempotent: the copy is harmless."""
    db, current = peer.db, prepared
    forged_claims = 0
    attempt = 0
    while attempt <= MAX_REPUBLISH:
        try:
            result = peer.zeitgeist.publish(current)
        except FencedOut as exc:
            raise FatalCycleError(str(exc)) from exc
        except ClaimTaken as exc:
            forged_claims += 1
            current = _skip_forged_claim(peer, current, exc)
            if forged_claims >= FORGED_CLAIMS_PER_PUBLISH:
                return  # the copy stays prepared and goes out first next cycle
            continue
        attempt += 1
        stats["segments"] += 1
        with db.transaction():
            db.finish_segment(current.seq, "published")
            if not result.late:
                return
            current = _prepare(peer, decode_segment(current.data).entries, [], peer.now_ms())
        stats["republished"] += 1
    # Still late: the last copy stays prepared and goes out first next cycle.


def _skip_forged_claim(peer: Peer, current: PreparedSegment, taken: ClaimTaken) -> PreparedSegment:
    """Prepare the segment's entries again under the next sequence number: a claim this
    peer's key did not seal is a forgery, and fencing on it would let anyone who can write
    the bucket stop this peer. The forged claim is counted and logged once."""
    hostile.count(hostile.FORGED_CLAIM)
    claim = claim_key(peer.peer_id, taken.seq)
    if hostile.LOGGED.first_time(claim):
        log.warning(
            "claim under this peer's name not written here; publishing under the next sequence",
            extra={"key": claim, "reason": str(taken.verdict)},
        )
    entries = decode_segment(current.data).entries
    with peer.db.transaction():
        peer.db.finish_segment(current.seq, "superseded")
        return _prepare(peer, entries, [e.id for e in entries], peer.now_ms())


def _heartbeat(peer: Peer) -> None:
    peer.zeitgeist.heartbeat(
        Heartbeat(
            peer_id=peer.peer_id,
            cursor_hlc=cursor(peer),
            last_seen_ms=peer.now_ms(),
            index_version=peer.embedder.index_version,
            public_key=None if peer.zeitgeist.signer is None else peer.zeitgeist.signer.public_key,
            seq=int(peer.db.get_meta(PUBLISH_SEQ_META_KEY) or "0"),
        )
    )


def _prepare(
    peer: Peer, entries: list[Entry], entry_ids: list[str], now_ms: int
) -> PreparedSegment:
    db, zg = peer.db, peer.zeitgeist
    with db.transaction():
        seq = db.next_counter(PUBLISH_SEQ_META_KEY)
        prepared = zg.prepare(entries, seq)
        db.prepare_segment(seq, prepared.key, prepared.data, prepared.hlc, entry_ids, now_ms=now_ms)
        persist_clock(peer)
    return prepared


def _maybe_compact(peer: Peer, st: CycleState) -> int:
    db = peer.db
    last = int(db.get_meta(LAST_COMPACTION_META_KEY) or "0")
    if st.now_ms - last < peer.config.zeitgeist.compaction_interval_s * 1000:
        return 0
    report = peer.zeitgeist.compact(st.now_ms)
    with db.transaction():
        db.set_meta(LAST_COMPACTION_META_KEY, str(st.now_ms))
    return 0 if report is None else int(report.segments_folded)
