"""What the daemon refuses beyond signatures and authority, counted like them.

A writer of the bucket without this peer's key can forge claims under its name; a
trusted peer can still send a chunk whose embedding is not its content's, or more
pulses than its budget. Each is refused, counted in
`dreamcycle_entries_rejected_total{reason}` under the reasons below, and logged once
per object (a flood of forgeries must not flood the log).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from dreamcycle.daemon import defaults, metrics

#: A claim of one of this peer's sequence numbers that no key of this peer sealed.
FORGED_CLAIM: Final = "forged_claim"
#: An assert whose embedding is not what this peer's model makes of its content.
EMBEDDING_MISMATCH: Final = "embedding_mismatch"
#: A pulse past its origin's budget of salience for its window.
OVER_BUDGET: Final = "over_budget"


def count(reason: str) -> None:
    metrics.ENTRIES_REJECTED.labels(reason).inc()


class LogOnce:
    """Remembers the most recent objects logged about, so each is logged once."""

    def __init__(self, memory: int = defaults.REJECTION_LOG_MEMORY) -> None:
        self.memory = memory
        self._logged: OrderedDict[str, None] = OrderedDict()

    def first_time(self, object_key: str) -> bool:
        if object_key in self._logged:
            return False
        self._logged[object_key] = None
        if len(self._logged) > self.memory:
            self._logged.popitem(last=False)
        return True


#: One per process: one daemon runs per process, and object keys name their peer.
LOGGED: Final = LogOnce()
