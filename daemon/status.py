"""What `dreamcycle status` and the API's status report: counts, live salience, last cycle."""

from __future__ import annotations

from typing import Any, Final

import numpy as np

from dreamcycle.store.database import Database

HISTOGRAM_BINS: Final = 10


def status_report(db: Database, peer_id: str) -> dict[str, Any]:
    saliences = db.live_saliences()
    counts, edges = np.histogram(saliences, bins=HISTOGRAM_BINS, range=(0.0, 1.0))
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
