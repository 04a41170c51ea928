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

from dreamcycle.daemon.cycle import audit, efficacy, hostile
from dreamcycle.daemon.cycle._position import cursor, persist_clock
from dreamcycle.daemon.cycle.state import (
    LAST_COMPACTION_META_KEY,
    PUBLISH_SEQ_META_KEY,
    CycleState,
    FatalCycleError,
)
from dreamcycle.daemon.defaults import FORGED_CLAIMS_PER_PUBLISH, MAX_ENTRIES_PER_SEGMENT
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import count_rejection
from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.entries import Entry, decode_entry, decode_segment
from dreamcycle.zeitgeist.log import ClaimTaken, FencedOut, Heartbeat, PreparedSegment
from dreamcycle.zeitgeist.object_keys import claim_key
from dreamcycle.zeitgeist.signing import Rejection

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
    # Segments prepared before a crash or an outage go first, byte for byte. One left
    # prepared stops this cycle's publishing: a later sequence number published before it
    # would fence this peer out (publish refuses a number below one it already claimed).
    for seq, key, data, hlc in db.prepared_segments():
        if not publish(peer, PreparedSegment(key=key, data=data, hlc=hlc, seq=seq), stats):
            return
    while not st.stop_requested() and (pending := db.outbox_unpublished(MAX_ENTRIES_PER_SEGMENT)):
        entries = [decode_entry(body) for _, body in pending]
        prepared = _prepare(peer, entries, [entry_id for entry_id, _ in pending], st.now_ms)
        started = time.monotonic()
        done = publish(peer, prepared, stats)
        metrics.PUBLISH_SECONDS.observe(time.monotonic() - started)
        stats["published_entries"] += len(pending)
        if not done:
            return


def publish(peer: Peer, prepared: PreparedSegment, stats: dict[str, Any]) -> bool:
    """Write a prepared segment. One that lands late (readers may have moved past its
    key's time) gets a copy under a fresh key, prepared in the same transaction that
    marks the original published, so a crash cannot lose the copy. Entries are
    idempotent: the copy is harmless. False when a segment (or copy) stays prepared, to
    go out first next cycle, before anything this cycle would prepare after it."""
    db, current = peer.db, prepared
    taken = 0
    attempt = 0
    while attempt <= MAX_REPUBLISH:
        try:
            result = peer.zeitgeist.publish(current)
        except FencedOut as exc:
            raise FatalCycleError(str(exc)) from exc
        except ClaimTaken as exc:
            # Each one skips every forged claim in the way (or a junk segment): only a
            # writer of the bucket racing this peer's claims makes it happen again.
            taken += 1
            current = _skip_forged_claim(peer, current, exc)
            if taken >= FORGED_CLAIMS_PER_PUBLISH:
                return False  # the copy stays prepared and goes out first next cycle
            continue
        attempt += 1
        stats["segments"] += 1
        with db.transaction():
            db.finish_segment(current.seq, "published")
            if not result.late:
                return True
            current = _prepare(peer, decode_segment(current.data).entries, [], peer.now_ms())
        stats["republished"] += 1
    # Still late: the last copy stays prepared and goes out first next cycle.
    return False


def _skip_forged_claim(peer: Peer, current: PreparedSegment, taken: ClaimTaken) -> PreparedSegment:
    """Prepare the segment's entries again under the first free sequence number the writer
    found (`taken.next_seq`, past every forged claim in the way): a claim this peer's key
    did not seal is a forgery, and an object at its segment key that this peer's key did
    not seal is junk; fencing on either would let anyone who can write the bucket stop
    this peer. Forged claims count as `forged_claim`, junk as `not_written_here`, and each
    is logged once (one line for a run of forged claims skipped together)."""
    if taken.junk_segment is not None:
        count_rejection(Rejection.NOT_WRITTEN_HERE)
        if hostile.LOGGED.first_time(taken.junk_segment):
            log.warning(
                "object at this peer's segment key not written here; publishing under the "
                "next sequence",
                extra={"key": taken.junk_segment, "reason": str(taken.verdict)},
            )
    else:
        metrics.ENTRIES_REJECTED.labels(hostile.FORGED_CLAIM).inc(taken.skipped)
        claim = claim_key(peer.peer_id, taken.seq)
        if hostile.LOGGED.first_time(claim):
            log.warning(
                "claim under this peer's name not written here; publishing under the next "
                "free sequence",
                extra={
                    "key": claim,
                    "skipped": taken.skipped,
                    "next_seq": taken.next_seq,
                    "reason": str(taken.verdict),
                },
            )
    entries = decode_segment(current.data).entries
    with peer.db.transaction():
        peer.db.finish_segment(current.seq, "superseded")
        # The next counter value is `taken.next_seq`: every number before it is claimed.
        if int(peer.db.get_meta(PUBLISH_SEQ_META_KEY) or "0") < taken.next_seq - 1:
            peer.db.set_meta(PUBLISH_SEQ_META_KEY, str(taken.next_seq - 1))
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
