"""What the daemon refuses beyond signatures and authority, counted like them.

A writer of the bucket without this peer's key can forge claims under its name; a
trusted peer can still send a chunk whose embedding is not its content's, or more
pulses than its budget. Each is refused, counted in
`dreamcycle_entries_rejected_total{reason}` under the reasons below, and logged once
per object (a flood of forgeries must not flood the log).
"""

from __future__ import annotations

from typing import Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.observe import metrics
from dreamcycle.zeitgeist.log import LogOnce

#: A claim of one of this peer's sequence numbers that no key of this peer sealed.
FORGED_CLAIM: Final = "forged_claim"
#: An assert whose embedding is not what this peer's model makes of its content.
EMBEDDING_MISMATCH: Final = "embedding_mismatch"
#: A pulse past its origin's budget of salience for its window.
OVER_BUDGET: Final = "over_budget"


def count(reason: str) -> None:
    metrics.ENTRIES_REJECTED.labels(reason).inc()


#: One per process: one daemon runs per process, and object keys name their peer.
LOGGED: Final = LogOnce(defaults.REJECTION_LOG_MEMORY)
