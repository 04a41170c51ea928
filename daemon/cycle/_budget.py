"""Each origin's pulses charged to its budget, per window of the pulses' own time (phase 5).

An origin may move `pulses.origin_budget` salience per window; the longest prefix of a
window's pulses that fits is admitted (pulses/budget.py), however they arrive in batches,
and a window closes at its first refusal (store/budget.py keeps both per window).
Pulses dated beyond the accepted clock skew ahead are refused before any is charged: each
could open a window of its own that nothing else fills, and would outlive its TTL.
"""

from __future__ import annotations

import logging
from typing import Final

from dreamcycle.daemon.cycle import hostile
from dreamcycle.daemon.cycle.state import CycleState
from dreamcycle.daemon.defaults import PULSE_BUDGET_LOOKBACK_S, PULSE_BUDGET_WINDOW_S
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.budget import admit_within_budget, cost_units
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.store import budget
from dreamcycle.zeitgeist.entries import PulseEntry, Refusal
from dreamcycle.zeitgeist.hlc import HybridLogicalClock

log = logging.getLogger("dreamcycle.cycle")

BUDGET_WINDOW_MS: Final = int(PULSE_BUDGET_WINDOW_S * 1000)
BUDGET_LOOKBACK_MS: Final = int(PULSE_BUDGET_LOOKBACK_S * 1000)


def budget_window(ts_ms: int, now_ms: int) -> int:
    """The start of the window a pulse stamped `ts_ms` is charged to: its own, unless it
    is older than the look-back (then the current one, so backdating buys no budget)."""
    charged_ms = ts_ms if ts_ms >= now_ms - BUDGET_LOOKBACK_MS else now_ms
    return charged_ms - charged_ms % BUDGET_WINDOW_MS


def refuse_from_the_future(
    peer: Peer, st: CycleState, pulses: list[PulseEntry], queued_here: set[str]
) -> int:
    """Other peers' pulses whose own time is further ahead of this cycle's now than the
    allowed clock skew are rejected (recorded with the reason, counted); how many.

    A pulse's time is its own field, not its entry's HLC (which interleave bounds), and it
    sets both the budget window the pulse is charged to and the start of its TTL: dated
    ahead without limit, each pulse would open a fresh window and never expire. An honest
    peer stamps a pulse no later than its entry, so this refuses none whose entry applies.
    This host's own pulses pass, as in interleave: its clock stamped them.
    """
    max_future_ms = peer.zeitgeist.max_future_ms
    horizon_ms = st.now_ms + max_future_ms
    refused: dict[str, int] = {}
    for entry in pulses:
        pulse = entry.pulse
        pulse_ms = HybridLogicalClock.physical_ms(pulse.ts)
        if (
            pulse_ms <= horizon_ms
            or entry.id in st.rejected
            or entry.id in queued_here
            or peer.db.pulse_seen(pulse.pulse_id)
        ):
            continue
        hostile.count(Refusal.FROM_THE_FUTURE)
        st.rejected[entry.id] = (
            f"{Refusal.FROM_THE_FUTURE}: pulse time {pulse_ms} ms is more than the allowed "
            f"skew of {max_future_ms // 1000} s ahead of this peer's {st.now_ms} ms"
        )
        refused[entry.origin] = refused.get(entry.origin, 0) + 1
    for origin, count in refused.items():
        if hostile.LOGGED.first_time(f"future-pulses/{origin}"):
            log.warning(
                "pulses dated beyond the allowed clock skew refused",
                extra={"origin": origin, "refused": count, "max_future_ms": max_future_ms},
            )
    return sum(refused.values())


def charge_budgets(
    peer: Peer, st: CycleState, pulses: list[PulseEntry], queued_here: set[str]
) -> dict[str, budget.Charge]:
    """Entry id -> its charge, for other peers' pulses that would apply; those past their
    origin's budget for their window are rejected here (recorded with the reason, counted).

    Windows are of the origin's own pulse timestamps, not of this peer's cycles: a peer
    that reads ten windows' pulses at once after an outage admits each window's within
    budget, and what a window admitted or closed in earlier cycles counts (stored per window).
    An expired pulse is charged too, so a peer that reads it late admits what one that read
    it in time did, unless it is past the look-back (it would only close the present window).
    Call `refuse_from_the_future` first: the windows charged then lie between the look-back
    and the allowed skew around now, never further ahead.
    """
    db, allowance = peer.db, peer.config.pulses.origin_budget
    groups: dict[tuple[str, int], list[PulseEntry]] = {}
    for entry in pulses:
        pulse = entry.pulse
        pulse_ms = HybridLogicalClock.physical_ms(pulse.ts)
        if (
            entry.id in st.rejected
            or entry.id in queued_here
            or pulse.origin_peer == peer.peer_id
            # Signed by another peer than it names: refused by authority, and charging it
            # would spend the named peer's budget.
            or pulse.origin_peer != entry.origin
            or pulse.kind is PulseKind.FORGET
            or (pulse.is_expired(st.now_ms) and pulse_ms < st.now_ms - BUDGET_LOOKBACK_MS)
            or db.pulse_seen(pulse.pulse_id)
        ):
            continue
        window = budget_window(pulse_ms, st.now_ms)
        groups.setdefault((pulse.origin_peer, window), []).append(entry)
    charges: dict[str, budget.Charge] = {}
    for (origin, window), entries in groups.items():
        before = budget.window_state(db, origin, window)
        by_pulse = {e.pulse.pulse_id: e for e in entries}
        verdict = admit_within_budget(
            (e.pulse for e in by_pulse.values()), allowance, windows={origin: before}
        )
        admitted = {p.pulse_id for p in verdict.admitted}
        closed_by = verdict.windows[origin].closed_by
        refused = 0
        for pulse_id, entry in by_pulse.items():
            ok = pulse_id in admitted
            cost = (cost_units(entry.pulse) or 0) if ok else 0
            # Only a refusal closes the window: recorded with an admitted pulse, a crash
            # before the rest were recorded would refuse them next cycle.
            charges[entry.id] = budget.Charge(origin, window, cost, ok, None if ok else closed_by)
            if not ok:
                refused += 1
                hostile.count(hostile.OVER_BUDGET)
                st.rejected[entry.id] = (
                    f"{hostile.OVER_BUDGET}: origin {origin} may move {allowance:g} salience "
                    f"per {BUDGET_WINDOW_MS // 1000} s of its pulses' time; the window from "
                    f"{window} ms had {before.spent:.3g} admitted before this cycle"
                )
        if refused and hostile.LOGGED.first_time(f"budget/{origin}/{window}"):
            log.warning(
                "pulses over their origin's budget refused",
                extra={"origin": origin, "window_start_ms": window, "refused": refused},
            )
    return charges
