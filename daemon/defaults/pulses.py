"""Pulses and outcomes as this peer sends and receives them: the shape of a pulse
`pulse-emit` sends, how long an outcome waits for its attribution, and the budget of
salience each other peer's pulses may move. Protocol bounds are in pulses/constants.py.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.daemon.defaults.cycle import CYCLE_INTERVAL_S

#: Defaults of `pulse-emit pulse` (the protocol's "cross-topic ripple").
PULSE_STRENGTH: Final = 0.3
PULSE_SIGMA: Final = 0.30
PULSE_MAX_HOPS: Final = 2
PULSE_K: Final = 3
PULSE_DECAY_PER_HOP: Final = 0.3
PULSE_TTL_S: Final = 7 * 24 * 3600.0
#: How long an outcome waits for its attribution before it is dropped.
OUTCOME_WAIT_S: Final = 24 * 3600.0
#: Salience the pulses of one other peer may move in one cycle, in the worst case
#: (pulses/budget.py). An outcome pulse moves at most 1.71 (pulses/pulse.py), so this
#: admits 18 at full strength per origin and cycle: a decision scored every 5 s of a
#: 30 s cycle, citing three chunks at reward +-1, fits (6 * 3 * 1.71 = 30.8).
PULSE_ORIGIN_BUDGET: Final = 32.0
UPDATE_RULE: Final = "bfs"
#: The budget is spent per window of the origin's own pulse timestamps, not per local
#: cycle: a peer catching up after an outage reads many windows' pulses at once, and each
#: window still has its budget. One default cycle long, as the budget is sized for.
PULSE_BUDGET_WINDOW_S: Final = CYCLE_INTERVAL_S
#: Pulses stamped further back than this are charged to the current window instead: an
#: origin that backdates its pulses gains at most this many windows' budget, once.
PULSE_BUDGET_LOOKBACK_S: Final = 3_600.0
