"""Phase 3, interleave: one deterministic order for every entry, duplicates dropped.

Reads: the entries scan gathered, which of them were applied before. Writes: nothing
durable; observes entry HLCs into this peer's clock (persisted by phases 5 and 8), only
of entries classify did not refuse: an unsigned or forged entry moves no clock.
Entries from other peers stamped further ahead than the allowed skew are refused.
A crash inside: nothing to redo.
"""

from __future__ import annotations

from typing import Any

from dreamcycle.daemon.cycle.state import CycleState
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.entries import Entry, entry_order_key
from dreamcycle.zeitgeist.hlc import hlc_from_ms


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """One deterministic order for remote and local entries: (HLC, origin peer, id)."""
    seen: set[str] = set()
    merged: list[Entry] = []
    duplicates = 0
    horizon = hlc_from_ms(peer.now_ms() + peer.zeitgeist.max_future_ms)
    local_ids = {e.id for e in st.local}
    for entry in st.all_entries():
        if entry.id in seen or peer.db.entry_seen(entry.id):
            duplicates += 1
            continue
        seen.add(entry.id)
        merged.append(entry)
        if entry.hlc > horizon:
            # Observing it would drag this peer's clock, and so its keys, into the future.
            # This host's own entries still apply: its own clock stamped them while the wall
            # clock was ahead (daemon/cycle/hlc_recovery.py); only other peers' are refused.
            if entry.id not in local_ids:
                st.rejected[entry.id] = f"hlc {entry.hlc:016x} is more than the allowed skew ahead"
            continue
        if entry.id not in st.rejected:
            peer.clock.observe(entry.hlc)
    merged.sort(key=entry_order_key)
    st.ordered = merged
    return {"entries": len(merged), "duplicates": duplicates}
