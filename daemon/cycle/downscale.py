"""Phase 6, downscale: time decay since each chunk's last decay, half-life by kind.

Reads: the chunks due for decay (last decayed `downscale.min_step_s` or more ago, longest
waiting first, `downscale.max_chunks_per_cycle` at most: pulses.decay.due_for_decay), the
cycle's accounted time. Writes: one journal step with the rule's numbers, then salience and
each chunk's decay time, DOWNSCALE_ROWS_PER_TRANSACTION chunks per transaction.
A crash inside: the journaled step is replayed alike (the same rule, the chunks live then);
chunks not yet decayed decay later from their own last decay, which loses nothing since
decay composes. A stop between batches records how many the step decayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from dreamcycle.daemon.cycle.state import CycleState
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.decay import downscale
from dreamcycle.store.database import DecayCandidate
from dreamcycle.store.timefmt import ms_from_iso

#: Chunks decayed per transaction: few enough that a writer waiting for the lock waits briefly.
DOWNSCALE_ROWS_PER_TRANSACTION: Final = 2000


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Decay the chunks due, pin floors respected.

    "Now" is the cycle's accounted time, so a clock stepped forward decays one bounded
    step per cycle and a clock stepped back decays nothing until it passes the time
    already accounted. A chunk saved between batches is not among this step's and decays
    from its creation later, as the replay has it.
    """
    if not peer.config.downscale.enabled:
        return {"skipped": "disabled"}
    db = peer.db
    config = peer.config.downscale
    changed = 0
    # Journaled with the half-lives and cadence used, so a replay decays alike whatever
    # the config is then.
    half_lives = HalfLives.from_config(config)
    min_step_ms = round(config.min_step_s * 1000)
    with db.transaction():
        now_ms = st.accounted_now(peer)
        # "now_ms" is the accounted time replay decays to; "observed_ms" what the clock
        # said, for the audit trail (steps journaled before accounted time carry the clock).
        body = {
            "now_ms": now_ms,
            "observed_ms": st.now_ms,
            **half_lives.journal(),
            "min_step_ms": min_step_ms,
            "max_chunks": config.max_chunks_per_cycle,
        }
        seq = db.journal(JournalKind.DOWNSCALE, str(now_ms), body, now_ms=st.now_ms)
        rows = db.decay_candidates(
            due_by_ms=now_ms - min_step_ms, limit=config.max_chunks_per_cycle
        )
        first = rows[:DOWNSCALE_ROWS_PER_TRANSACTION]
        changed += decay_batch(peer, now_ms, first, half_lives)
    decayed = len(first)
    for start in range(DOWNSCALE_ROWS_PER_TRANSACTION, len(rows), DOWNSCALE_ROWS_PER_TRANSACTION):
        batch = rows[start : start + DOWNSCALE_ROWS_PER_TRANSACTION]
        with db.transaction():
            if st.stop_requested():
                # Stopped between batches: the step says how many it decayed, so replay
                # decays the same ones and leaves the rest to the next step, as here.
                db.amend_journal(seq, {"decayed": decayed})
                break
            changed += decay_batch(peer, now_ms, batch, half_lives)
            decayed += len(batch)
    return {"decayed": decayed, "changed": changed, "accounted_lag_ms": st.now_ms - now_ms}


def decay_batch(
    peer: Peer, now_ms: int, rows: Sequence[DecayCandidate], half_lives: HalfLives
) -> int:
    """Decay these chunks up to `now_ms` and record them decayed (inside the caller's
    transaction)."""
    cache = peer.salience
    changed = 0
    for rowid, kind, decay_from, stability in rows:
        elapsed_s = (now_ms - ms_from_iso(decay_from)) / 1000.0
        before = cache.salience(rowid)
        half_life = half_lives.of(kind, stability)
        after = downscale(before, cache.pin_floor(rowid), elapsed_s, half_life)
        if after != before:
            cache.set_salience(rowid, after)
            changed += 1
    cache.flush(decayed_at_ms=now_ms, decayed=[row[0] for row in rows])
    return changed
