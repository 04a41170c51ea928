"""A budget of salience per origin peer and window of its pulses' own time.

One valid pulse moves at most MOVED_SALIENCE_MAX (pulses/pulse.py); a peer that sends
many can still move as much as it likes. The pulses of every origin are therefore
admitted in order while the salience they may move in the worst case
(`SalientPulse.moved_salience_bound`) adds up to no more than the budget. The first
pulse that would go over it closes the window for that origin: it is refused, and so is
every later pulse of the origin in that window, whatever its size and whichever batch it
comes in. So a peer cannot slip small pulses in behind a refused large one, and what is
admitted is a function of the origin's pulse sequence alone: the longest prefix of the
window's pulses, in the order they are read, whose bounds fit. The daemon keeps each
window's `WindowState` (daemon/defaults/pulses.py: PULSE_BUDGET_WINDOW_S; store/budget.py) and
passes it back with the next batch, so reading the sequence in one batch or in many admits
the same pulses. Costs are summed as whole numbers of BUDGET_UNITS_PER_SALIENCE: float sums
depend on how they are grouped, integer sums do not, so a pulse at the very edge of the
budget is admitted on every peer or on none.

Why every peer reads one origin's pulses in the same order:

- Within a cycle the daemon sorts entries by (HLC, origin, entry id) and admits each
  origin's pulses in that order. Across cycles it reads whole segments, listed in key order,
  a bounded number per cycle. An origin keys each segment above every entry it holds,
  publishes its segments one at a time (the claim of the next sequence number comes after
  the create of the previous segment returned), and stamps what it emits from one HLC that
  only grows. So its segments become visible in key order, the pulses it stamps as it emits
  them sort after those of its earlier segments, and however its segments are split between
  cycles the order is the same: the origin's publication order.
- A snapshot read at bootstrap holds the folded segments' entries; sorted by HLC they are in
  the order the segments had, less the pulses already expired when they were folded.

Where it is not the same: the pulses of an outcome carry the outcome's HLC and are published
once its attribution is known, possibly after later-stamped pulses of the same origin went
out; a writer may stamp or create segments out of order, or a store list a new object late.
Peers that read such pulses in different batches order them differently and, at the edge of
the budget, may admit different ones, each within the budget. A pulse read more than the
look-back after its time (daemon/defaults/pulses.py: PULSE_BUDGET_LOOKBACK_S; after an outage, or
from an old snapshot) is charged to the reader's present window, so backdating buys no
budget; the pulses a compactor dropped as expired are not charged by a peer that bootstraps
from its snapshot. An expired pulse is otherwise still charged: it was admitted, or not,
where it arrived in time.

The budget is the operator's (daemon/defaults/pulses.py: PULSE_ORIGIN_BUDGET); pulses of the
origins in `exempt` (this peer's own, whose outcomes and requests the operator made) are
never counted. Forget pulses move nothing by propagation and cost nothing.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from dreamcycle.pulses.pulse import SalientPulse

#: Costs and budgets are counted in these whole units (a billionth of a unit of salience):
#: exact to sum in any grouping, far finer than any pulse's bound.
BUDGET_UNITS_PER_SALIENCE: Final = 1_000_000_000


class InvalidBudget(ValueError):
    """A budget that is not a positive number."""


def to_units(salience: float) -> int:
    """`salience` in whole budget units (nearest)."""
    return round(salience * BUDGET_UNITS_PER_SALIENCE)


def from_units(units: int) -> float:
    return units / BUDGET_UNITS_PER_SALIENCE


def cost_units(pulse: SalientPulse) -> int | None:
    """What `pulse` is charged, in budget units; None when its bound is not finite (a pulse
    that breaks the convergence invariant, refused whatever budget is left)."""
    bound = pulse.moved_salience_bound()
    return to_units(bound) if math.isfinite(bound) else None


@dataclass(frozen=True)
class WindowState:
    """One origin's window so far: what its admitted pulses may move, and the pulse at
    which it went over its budget (None while it is open)."""

    spent_units: int = 0
    closed_by: str | None = None

    @property
    def spent(self) -> float:
        return from_units(self.spent_units)


@dataclass(frozen=True)
class OverBudget:
    """A pulse refused because its origin spent its budget; `reason` says by how much."""

    pulse: SalientPulse
    reason: str


@dataclass(frozen=True)
class BudgetVerdict:
    """The pulses admitted (in the order given) and those refused, with what each origin's
    window holds after them."""

    admitted: tuple[SalientPulse, ...]
    rejected: tuple[OverBudget, ...]
    windows: dict[str, WindowState] = field(default_factory=dict)

    @property
    def spent(self) -> dict[str, float]:
        """Salience each origin's admitted pulses may move, its earlier batches included."""
        return {origin: window.spent for origin, window in self.windows.items()}


def admit_within_budget(
    pulses: Iterable[SalientPulse],
    budget: float,
    *,
    exempt: Collection[str] = (),
    windows: Mapping[str, WindowState] | None = None,
) -> BudgetVerdict:
    """Admit `pulses` (in the order they apply) origin by origin, until an origin's
    worst-case moved salience would exceed `budget`; see the module docstring.

    `windows` is what earlier batches of the same window left for each origin (none: a
    fresh window); the verdict's `windows` is what this batch leaves, to pass to the next.
    """
    if not budget > 0:
        raise InvalidBudget(f"the budget per origin must be > 0, got {budget}")
    allowance = to_units(budget)
    state: dict[str, WindowState] = dict(windows or {})
    admitted: list[SalientPulse] = []
    rejected: list[OverBudget] = []
    for pulse in pulses:
        origin = pulse.origin_peer
        if origin in exempt:
            admitted.append(pulse)
            continue
        before = state.get(origin, WindowState())
        if before.closed_by is not None:
            reason = (
                f"over budget: origin {origin} went over its {budget:g} salience per window at "
                f"pulse {before.closed_by}; its later pulses in the window are refused too"
            )
            rejected.append(OverBudget(pulse, reason))
            continue
        cost = cost_units(pulse)
        if cost is not None and before.spent_units + cost <= allowance:
            state[origin] = replace(before, spent_units=before.spent_units + cost)
            admitted.append(pulse)
            continue
        state[origin] = replace(before, closed_by=pulse.pulse_id)
        reason = (
            f"over budget: origin {origin} may move {budget:g} salience per window; "
            f"{before.spent:.3g} was admitted before this pulse, which may move "
            f"{pulse.moved_salience_bound():.3g}"
        )
        rejected.append(OverBudget(pulse, reason))
    return BudgetVerdict(admitted=tuple(admitted), rejected=tuple(rejected), windows=state)
