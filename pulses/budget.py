"""A budget of salience per origin peer and window of its pulses' own time.

One valid pulse moves at most MOVED_SALIENCE_MAX (pulses/pulse.py); a peer that sends
many can still move as much as it likes. The pulses of every origin are therefore
admitted in order while the salience they may move in the worst case
(`SalientPulse.moved_salience_bound`) adds up to no more than the budget. The daemon
calls this once per origin and window (daemon/defaults.py: PULSE_BUDGET_WINDOW_S) with
what the window has left. The first pulse that would go over it is rejected, and so is
every later pulse of that origin in the same batch: which pulses pass then depends only
on the order, never on their sizes after the first refusal, so a peer cannot slip small
pulses in behind a refused large one. Peers that read an over-budget origin's pulses in
different batches may admit different ones; an honest origin never reaches the budget.

The budget is the operator's (daemon/defaults.py: PULSE_ORIGIN_BUDGET); pulses of the
origins in `exempt` (this peer's own, whose outcomes and requests the operator made) are
never counted. Forget pulses move nothing by propagation and cost nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from pulses.pulse import SalientPulse


class InvalidBudget(ValueError):
    """A budget that is not a positive number."""


@dataclass(frozen=True)
class OverBudget:
    """A pulse refused because its origin spent its budget; `reason` says by how much."""

    pulse: SalientPulse
    reason: str


@dataclass(frozen=True)
class BudgetVerdict:
    """The pulses admitted (in the order given) and those refused, with what each origin
    was charged for the admitted ones."""

    admitted: tuple[SalientPulse, ...]
    rejected: tuple[OverBudget, ...]
    spent: dict[str, float]


def admit_within_budget(
    pulses: Iterable[SalientPulse], budget: float, *, exempt: Collection[str] = ()
) -> BudgetVerdict:
    """Admit `pulses` (one batch, in the order they apply) origin by origin, until an
    origin's worst-case moved salience would exceed `budget`; see the module docstring.

    The pulses are expected valid (their bound finite): a pulse whose bound is not finite
    is refused however much budget is left.
    """
    if not budget > 0:
        raise InvalidBudget(f"the budget per origin must be > 0, got {budget}")
    admitted: list[SalientPulse] = []
    rejected: list[OverBudget] = []
    spent: dict[str, float] = {}
    #: origin -> the pulse at which it went over its budget in this batch
    went_over: dict[str, str] = {}
    for pulse in pulses:
        origin = pulse.origin_peer
        if origin in exempt:
            admitted.append(pulse)
            continue
        if origin in went_over:
            reason = (
                f"over budget: origin {origin} went over its {budget:g} salience per window at "
                f"pulse {went_over[origin]}; its later pulses in the window are refused too"
            )
            rejected.append(OverBudget(pulse, reason))
            continue
        before = spent.get(origin, 0.0)
        cost = pulse.moved_salience_bound()
        if before + cost <= budget:
            spent[origin] = before + cost
            admitted.append(pulse)
            continue
        went_over[origin] = pulse.pulse_id
        reason = (
            f"over budget: origin {origin} may move {budget:g} salience per window; "
            f"{before:.3g} was admitted before this pulse, which may move {cost:.3g}"
        )
        rejected.append(OverBudget(pulse, reason))
    return BudgetVerdict(admitted=tuple(admitted), rejected=tuple(rejected), spent=spent)
