"""How far this peer has read the log, and the clock it stamps with (phases 1, 5, 8)."""

from __future__ import annotations

from dreamcycle.daemon.cycle.state import CURSOR_META_KEY
from dreamcycle.daemon.memory.admission import persist_clock as persist_hlc
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.object_keys import parse_segment_key, parse_snapshot_key


def key_hlc(key: str) -> int:
    """The HLC a segment or snapshot key carries: how far the log has been read."""
    if key.startswith("snap/"):
        return parse_snapshot_key(key).hlc
    return parse_segment_key(key).hlc


def cursor(peer: Peer) -> int:
    return int(peer.db.get_meta(CURSOR_META_KEY) or "0")


def persist_clock(peer: Peer) -> None:
    persist_hlc(peer.db, peer.clock)
