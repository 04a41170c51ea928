"""How far a swept chunk falls in recall, learned from what agents cite.

The sweep keeps the lowest-valued chunks of each kind in a cold tier that recall still
searches, each at a weight of its relevance (`recall.cold_factor`). Configured close to 1,
forgetting changes almost no ranking; far below 1, it buries whatever the sweep chose
wrongly. Which is right depends on the store, and on how well its sweep chooses: a store
whose agents keep citing cold chunks needs them near, and one whose cold tier holds what
its answers are not gains precision by pushing it down. So the weight is learned like
the vector/word split (pulses.evidence): each cited success, before it teaches anything,
scores every candidate weight in WEIGHTS against the configured one on the candidates
recall had for it, and recall uses the weight whose gain is clearly above zero.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.evidence import rescored_gains

#: The weights of cold relevance recall may learn.
WEIGHTS: Final = (0.5, 0.7, 0.85, 0.95)


def gains_of_weights(
    cited: Sequence[int],
    labels: npt.NDArray[np.int64],
    relevance: npt.NDArray[np.float64],
    cold: npt.NDArray[np.bool_],
    configured: float,
) -> list[float] | None:
    """Per weight of WEIGHTS, the reciprocal-rank gain over `configured` it gives the cited
    chunks among these candidates (None when none of them is a candidate)."""
    if not (len(labels) == len(relevance) == len(cold)):
        raise ValueError("labels, relevance and cold differ in length")
    position = {int(label): i for i, label in enumerate(labels.tolist())}
    targets = [position[c] for c in cited if c in position]
    base = np.where(cold, relevance * configured, relevance)
    return rescored_gains(
        targets, base, [np.where(cold, relevance * w, relevance) for w in WEIGHTS]
    )
