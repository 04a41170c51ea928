"""Bring this peer's hybrid logical clock back after its wall clock ran ahead and returned.

A wall clock stepped forward by days stamps this peer's HLC, and the high-water mark kept
in the meta table, that far ahead; when the wall clock comes back the HLC would stay ahead
until the wall clock caught up, and every segment this peer wrote meanwhile would be
deferred by the other peers as dated beyond the allowed skew (zeitgeist/log.py). Nothing
requires that: the other peers never read keys beyond their own wall clock plus the
allowed skew, so none of them has applied what this peer stamped far ahead, and a key of
this peer is read by a peer as long as it is not below where that peer lists from
(min(its cursor, its wall clock) less the window).

So once the HLC is more than the allowed skew ahead of the wall clock, it is lowered to the
wall clock, but never below any live peer's listing point as its heartbeat tells it
(min(cursor, time of the heartbeat)): what this peer writes next is then listed by every
peer. A peer whose clock is right and which still lists from far ahead keeps the HLC up
(this peer's clock may be the one that is behind). Heartbeats cannot raise the clock: the
rewind only ever lowers it. Entries already stamped ahead keep their stamps (their ids and
signatures cover them): this peer applies them, and other peers when their clocks reach
them.
"""

from __future__ import annotations

import logging

from dreamcycle.daemon.runtime import HLC_META_KEY, Peer
from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms

log = logging.getLogger("dreamcycle.hlc")


def recover_hlc(peer: Peer, now_ms: int) -> int | None:
    """Lower the HLC (and its persisted high-water mark) to where it may be when it is more
    than the allowed skew ahead of `now_ms`; the new value, or None when nothing changed."""
    clock = peer.clock
    zeitgeist = peer.zeitgeist
    ahead = clock.last
    if ahead <= hlc_from_ms(now_ms + zeitgeist.max_future_ms):
        return None
    try:
        beats = zeitgeist.live_peers(now_ms)
    except BackendError as exc:
        log.warning(
            "hlc ahead of the wall clock; heartbeats unreadable, kept", extra={"error": str(exc)}
        )
        return None
    listing_points = [
        min(beat.cursor_hlc, hlc_from_ms(beat.last_seen_ms))
        for beat in beats
        if beat.peer_id != peer.peer_id
    ]
    target = max([hlc_from_ms(now_ms), *listing_points])
    if target >= ahead:
        return None
    with peer.db.transaction():
        clock.rewind(target)
        peer.db.set_meta(HLC_META_KEY, str(clock.last))
    log.warning(
        "hlc was ahead of the wall clock; lowered",
        extra={
            "from_ms": HybridLogicalClock.physical_ms(ahead),
            "to_ms": HybridLogicalClock.physical_ms(target),
            "wall_ms": now_ms,
        },
    )
    return target
