"""Learned keys met before their decision's attribution (phase 4): kept, retried, expired.

Another peer's key is judged against the attribution its signer published (authority.py).
The attribution comes first in that peer's log, but this peer may read the key first:
the attribution's segment listed late, or refused until its seal's key was trusted. Such
a key is recorded `awaiting`, kept as its verified wire object, and judged like any key
once the attribution is here; after `pulses.outcome_wait_s` (as an outcome waits for its
decision), or once AWAIT_ATTRIBUTION_KEYS newer ones wait, it is refused for good.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.cycle import authority
from dreamcycle.daemon.cycle._entry import record
from dreamcycle.daemon.cycle.state import EntryOutcome, EntryStatus
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.entries import Entry, RetrievalKeyEntry, decode_entry, encode_entry
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.rejections import Rejection
from dreamcycle.zeitgeist.signing import Verdict

AWAITING_REASON: Final = "awaiting the attribution of its decision"

#: Judges one entry as phase 4 does (authority, then its handler, in a savepoint).
Judge = Callable[[Entry], EntryOutcome]


def keep_waiting(peer: Peer, entry: RetrievalKeyEntry) -> None:
    """Record `entry` (a key authority.awaits_attribution named) as awaiting, and keep it."""
    peer.db.await_attribution(
        entry.id,
        decision_hash=entry.decision_hash,
        hlc=entry.hlc,
        wire_json=json.dumps(encode_entry(entry), separators=(",", ":")),
    )
    record(peer.db, entry, EntryStatus.AWAITING, AWAITING_REASON)


def retry_attributed(peer: Peer, judge: Judge) -> Iterator[EntryStatus]:
    """Judge every waiting key whose attribution is here now; the status of each."""
    db = peer.db
    for entry_id, wire_json in db.learned_keys_now_attributed(defaults.RETRIED_KEYS_PER_CYCLE):
        entry = decode_entry(json.loads(wire_json))
        status, reason = judge(entry)
        db.set_entry_status(entry_id, status, reason)
        db.stop_awaiting_attribution(entry_id)
        yield status


def expire(peer: Peer, now_ms: int) -> int:
    """Refuse the keys that waited too long, or beyond the number kept; how many."""
    wait_ms = int(peer.config.pulses.outcome_wait_s * 1000)
    dropped = peer.db.drop_overdue_learned_keys(
        oldest_hlc=hlc_from_ms(max(0, now_ms - wait_ms)), most=defaults.AWAIT_ATTRIBUTION_KEYS
    )
    for entry_id, wire_json in dropped:
        entry = decode_entry(json.loads(wire_json))
        decision = entry.decision_hash if isinstance(entry, RetrievalKeyEntry) else "?"
        verdict = Verdict(
            Rejection.UNATTRIBUTED_KEY,
            f"learned key for decision {decision[:12]} by "
            f"{entry.origin}: its attribution never came",
        )
        reason = authority.recorded(entry, verdict, "learned key refused after its wait")
        peer.db.set_entry_status(entry_id, EntryStatus.REJECTED, reason)
    return len(dropped)
