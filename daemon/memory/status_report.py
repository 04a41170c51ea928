"""What `dreamcycle status` and the API's status report: counts, live salience, last cycle.

The salience histogram counts the memories `counts.live` counts: the chunks neither
tombstoned nor cold, less the daemon's own records of its efficacy metrics (type
EFFICACY_TYPE), which are stored as chunks but are not memory."""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import EFFICACY_TYPE, Database

HISTOGRAM_BINS: Final = 10
#: The salience of the efficacy records that live_saliences holds: the index of filters
#: holds each chunk's type, so only their rows are read (a plain scan would read every row,
#: embedding and all).
_LIVE_EFFICACY_SALIENCE: Final = (
    "SELECT salience FROM observations INDEXED BY observations_filters "
    "WHERE type = ? AND deleted_at IS NULL AND cold_at IS NULL"
)


def _histogram(saliences: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    counts: npt.NDArray[np.int64] = np.histogram(saliences, bins=HISTOGRAM_BINS, range=(0.0, 1.0))[
        0
    ]
    return counts


def status_report(db: Database, peer_id: str) -> dict[str, Any]:
    efficacy = np.array(
        [row[0] for row in db.fetch_all(_LIVE_EFFICACY_SALIENCE, (EFFICACY_TYPE,))],
        dtype=np.float64,
    )
    counts = _histogram(db.live_saliences()) - _histogram(efficacy)
    edges = np.linspace(0.0, 1.0, HISTOGRAM_BINS + 1)
    return {
        "peer": peer_id,
        "counts": db.counts(),
        "salience_histogram": [
            {
                "from": round(float(edges[i]), 2),
                "to": round(float(edges[i + 1]), 2),
                "chunks": int(counts[i]),
            }
            for i in range(HISTOGRAM_BINS)
        ],
        "tombstones_by_reason": db.tombstones_by_reason(),
        "last_cycle": db.last_cycle(),
    }
