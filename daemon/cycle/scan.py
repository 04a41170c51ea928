"""Phase 1, scan: what is new in the log, and what this peer queued itself.

Reads: the log (LIST after the cursor, GET of new segments, or of the roll-ups that hold
them; the newest snapshot on first start or after a long absence), the outbox's unapplied entries, new chunks' salience.
Writes: own segments seen in the listing are recorded (they are never applied from the log);
corrupt segments are recorded as read, with one rejection. Nothing else.
The clock observes a foreign segment's time only once it was read and its seal held
(`Zeitgeist.check_read`): a key listed, waited for or refused moves neither the clock nor
the cursor, and neither does a segment under this peer's name that it did not write.
A crash inside: the next cycle lists and fetches the same segments again.
"""

from __future__ import annotations

import logging
from typing import Any

from dreamcycle.daemon.cycle import hostile
from dreamcycle.daemon.cycle._position import cursor, key_hlc
from dreamcycle.daemon.cycle.hlc_recovery import recover_hlc
from dreamcycle.daemon.cycle.state import CycleState, FetchedSegment
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import count_rejection
from dreamcycle.zeitgeist.backend import BackendError, UnreadableObject
from dreamcycle.zeitgeist.entries import CorruptSegment, DecodedSegment, decode_entry
from dreamcycle.zeitgeist.log import RolledUp, Zeitgeist
from dreamcycle.zeitgeist.object_keys import parse_segment_key
from dreamcycle.zeitgeist.signing import Rejection

log = logging.getLogger("dreamcycle.cycle")


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """New log segments (after the cursor, inside the window) and local unapplied entries."""
    zg, db = peer.zeitgeist, peer.db
    fetched = 0
    # Before anything is stamped this cycle: a wall clock back from a jump ahead.
    recover_hlc(peer, st.now_ms)
    try:
        if peer.snapshot_check_due:
            _read_snapshot(peer, st)
        keys = zg.poll(cursor(peer), db.segment_applied)
    except BackendError as exc:
        # The log is unreachable: carry on with local work; read it again next cycle.
        log.warning("zeitgeist unreachable; cycle runs on local entries", extra={"error": str(exc)})
        peer.snapshot_check_due = True
        keys = []
    own = [k for k in keys if parse_segment_key(k).peer_id == peer.peer_id]
    own_set = set(own)
    forged: set[str] = set()
    for key in own:
        if db.segment_written(key):
            zg.clock.observe(key_hlc(key))  # sealed here, by this peer's own clock
            continue
        # Never read (no peer applies its own segments from the log), but someone who
        # can write the bucket is publishing under this peer's name: its time moves
        # neither the clock nor the cursor.
        forged.add(key)
        count_rejection(Rejection.NOT_WRITTEN_HERE)
        log.warning("segment under this peer's name not written here", extra={"key": key})
    if own:
        with db.transaction():
            for key in own:
                db.record_segment(key, entries=0, rejected=0, skipped=0, now_ms=st.now_ms)
    foreign = [k for k in keys if k not in own_set]
    waiting = foreign[peer.config.cycle.max_segments :]
    batch = foreign[: peer.config.cycle.max_segments]
    rolled = _from_rollups(peer, batch)
    # Waited for (no roll-up holds them yet): read by a later cycle, the cursor kept before.
    st.unread_keys.extend(rolled.deferred)
    for key, decoded in rolled.segments.items():
        _keep(zg, st, key, decoded)
    deferred = set(rolled.deferred)
    direct = [k for k in batch if k not in rolled.segments and k not in deferred]
    for index, key in enumerate(direct):
        try:
            decoded = zg.fetch(key)
        except CorruptSegment as exc:
            log.error("corrupt segment skipped", extra={"key": key, "error": str(exc)})
            with db.transaction():
                db.record_segment(key, entries=0, rejected=1, skipped=0, now_ms=st.now_ms)
            continue
        except KeyError:
            # Compacted away between LIST and GET: its entries are in the newest snapshot.
            peer.snapshot_check_due = True
            continue
        except UnreadableObject as exc:
            # Read again by every cycle until it can be, and the ones after it meanwhile.
            log.warning(
                "segment cannot be read; waiting for it", extra={"key": key, "error": str(exc)}
            )
            st.unread_keys.append(key)
            continue
        except BackendError as exc:
            log.warning("zeitgeist unreachable mid-scan", extra={"key": key, "error": str(exc)})
            peer.snapshot_check_due = True
            waiting = sorted([*direct[index:], *waiting])
            break
        _keep(zg, st, key, decoded)
        fetched += 1
    read_again = 0 if waiting else _read_again_with_new_signers(peer, st)
    st.unread_keys.sort()
    rejected_lines = sum(segment.rejected for segment in st.segments)
    # Own segments move the cursor too, but never past a foreign one still waiting.
    limit = key_hlc(waiting[0]) if waiting else None
    st.own_keys = [k for k in own if k not in forged and (limit is None or key_hlc(k) < limit)]
    for _entry_id, body in db.outbox_unapplied():
        st.local.append(decode_entry(body))
    new_chunks = peer.salience.refresh()
    return {
        "listed": len(keys),
        "fetched": fetched,
        "from_rollups": len(rolled.segments),
        "awaiting_rollup": len(rolled.deferred),
        "rejected_lines": rejected_lines,
        # Entries of unknown versions or kinds: skipped, counted, never fatal.
        "skipped_entries": sum(segment.skipped for segment in st.segments),
        "unreadable": len(st.unread_keys),
        "read_again": read_again,
        "local": len(st.local),
        "new_chunks": new_chunks,
    }


def _read_again_with_new_signers(peer: Peer, st: CycleState) -> int:
    """Segments refused earlier for want of a key that the keyring now trusts, read again
    (at most a cycle's `max_segments`): a peer trusted after it published is heard.

    Left for the next cycle when the log cannot be read now; dropped from the wait when
    the segment is gone (compacted: its entries are in the snapshot) or is not a segment.
    """
    verifier, db = peer.zeitgeist.verifier, peer.db
    if verifier is None:
        return 0
    verifier.refresh()
    trusted = [signer for signer in db.signers_awaited() if signer in verifier.keyring.keys]
    room = peer.config.cycle.max_segments
    read = 0
    for signer in trusted:
        for key in db.segments_awaiting(signer, room - read):
            try:
                decoded = peer.zeitgeist.fetch(key)
            except (CorruptSegment, KeyError):
                st.read_again.append(key)
                continue
            except BackendError as exc:  # UnreadableObject included
                log.warning(
                    "segment to read again unreadable", extra={"key": key, "error": str(exc)}
                )
                return read
            st.read_again.append(key)
            _keep(peer.zeitgeist, st, key, decoded)
            read += 1
        if read >= room:
            break
    return read


def _from_rollups(peer: Peer, keys: list[str]) -> RolledUp:
    """What roll-ups hold of `keys`, and which to wait for; nothing if they cannot be read
    now (the segments are then read one by one)."""
    try:
        return peer.zeitgeist.read_rollups(keys)
    except BackendError as exc:
        log.warning("roll-ups unreadable; reading segments", extra={"error": str(exc)})
        return RolledUp()


def _keep(zg: Zeitgeist, st: CycleState, key: str, decoded: DecodedSegment) -> None:
    """A segment read (from the log or from a roll-up) for this cycle, its seal judged;
    its time observed by the clock only if the seal holds."""
    # Rejected lines were counted and logged, once per segment, when it was decoded.
    seal_problem = zg.check_read(key, decoded)
    if seal_problem is not None:
        st.seal_problems[key] = seal_problem
        metrics.SEGMENTS_REFUSED.labels(seal_problem.reason.value).inc()
        if hostile.LOGGED.first_time(f"seal/{key}"):
            log.warning("segment refused by its seal", extra={"key": key, "why": str(seal_problem)})
        if seal_problem.reason is Rejection.UNKNOWN_KEY and decoded.seal is not None:
            st.awaiting_signer[key] = decoded.seal.key_id
    st.segments.append(
        FetchedSegment(key, decoded.entries, len(decoded.rejected), sum(decoded.skipped.values()))
    )


def _read_snapshot(peer: Peer, st: CycleState) -> None:
    """Fold in the newest snapshot if not yet applied (first start, or back from an absence
    long enough that segments this peer never read may have been compacted away)."""
    snapshot = peer.zeitgeist.latest_snapshot()
    peer.snapshot_check_due = False
    if snapshot is None or peer.db.segment_applied(snapshot.key):
        return
    # Entries already applied are skipped by id in interleave; the rest are new here.
    st.segments.append(FetchedSegment(snapshot.key, list(snapshot.entries), 0, 0))
