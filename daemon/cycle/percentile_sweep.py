"""Phase 7, percentile_sweep: the bottom percentile to the cold tier, when due.

Reads: the cycle's accounted time, the last sweep's time, every chunk's value for the
sweep (daemon/memory/forgetting.py), recent successful decisions for the prune gate. Writes:
revived and expired cold chunks; the sweep's time (first, in its own transaction); the
words of chunks met for the first time (store/sweep_words.py); chunks moved to the cold
tier with their journal steps. Local curation: nothing is published.
A crash inside: a crash after the sweep's time is recorded skips one sweep rather than
sweeping twice.
"""

from __future__ import annotations

from typing import Any

from dreamcycle.daemon.cycle._tombstone import tombstone_hashes
from dreamcycle.daemon.cycle.state import LAST_SWEEP_META_KEY, CycleState
from dreamcycle.daemon.memory.forgetting import RETENTION_REASON, expire_cold, revive_reingested
from dreamcycle.daemon.memory.forgetting import sweep as run_sweep
from dreamcycle.daemon.runtime import Peer


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Revive re-ingested cold chunks; expire cold ones past retention; when due, sweep the
    bottom percentile into the cold tier.

    The interval, the grace period and retention are measured in accounted time, so a clock
    stepped forward brings none of them closer than one bounded step per cycle, and a
    clock stepped back brings nothing at all.
    """
    sweep = peer.config.sweep
    db = peer.db
    now_ms = st.accounted_now(peer)
    result: dict[str, Any] = {"revived": revive_reingested(peer, now_ms)}
    expired = expire_cold(peer, now_ms)
    if expired:
        result["expired"] = len(
            tombstone_hashes(peer, expired, reason=RETENTION_REASON, now_ms=now_ms)
        )
    if not sweep.enabled:
        return {**result, "skipped": "disabled"}
    last = db.get_meta(LAST_SWEEP_META_KEY)
    if last is None and sweep.interval_s > 0:
        # The interval starts with the first cycle: a fresh store is not swept at once.
        with db.transaction():
            db.set_meta(LAST_SWEEP_META_KEY, str(now_ms))
        return {**result, "skipped": "first interval"}
    if sweep.interval_s > 0 and now_ms - int(last or "0") < sweep.interval_s * 1000:
        return {**result, "skipped": "interval"}
    if not sweep.dry_run:
        # Recorded first: a crash between the two skips one sweep instead of sweeping twice.
        with db.transaction():
            db.set_meta(LAST_SWEEP_META_KEY, str(now_ms))
    return {**result, **run_sweep(peer, now_ms, dry_run=sweep.dry_run)}
