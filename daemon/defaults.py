"""Every operational default of the daemon, in one place.

Protocol constants (epsilon, outcome pulse parameters) live in pulses/constants.py;
index and embedder tuning in store/index.py and store/embedder.py.
"""

from __future__ import annotations

import math
from typing import Final

#: Where a user's config is looked for when --config is not given.
CONFIG_ENV: Final = "DREAMCYCLE_CONFIG"
#: Prefix of environment overrides: DREAMCYCLE_<SECTION>_<KEY>, e.g. DREAMCYCLE_CYCLE_INTERVAL_S.
ENV_PREFIX: Final = "DREAMCYCLE_"
#: Data directory when none is configured (XDG data home).
DATA_DIR: Final = "~/.local/share/dreamcycle"
DATABASE_FILE: Final = "dreamcycle.db"
INDEX_FILE: Final = "index.hnsw"
LOCK_FILE: Final = "daemon.lock"
#: The embedded default zeitgeist: a directory beside the database.
ZEITGEIST_DIR: Final = "zeitgeist"

CYCLE_INTERVAL_S: Final = 30.0
#: Segments applied per cycle at most, so one cycle stays short after a long absence.
MAX_SEGMENTS_PER_CYCLE: Final = 500
#: Entries per published segment at most.
MAX_ENTRIES_PER_SEGMENT: Final = 5_000
EMBED_BATCH_SIZE: Final = 32
#: Chunks embedded per cycle at most (the rest wait for the next cycle).
MAX_EMBED_PER_CYCLE: Final = 4_096

ZEITGEIST_WINDOW_S: Final = 60.0
LIVENESS_TIMEOUT_S: Final = 600.0
COMPACTION_INTERVAL_S: Final = 3_600.0
S3_REGION: Final = "us-east-1"
S3_PREFIX: Final = "dreamcycle"
REDIS_URL: Final = "redis://127.0.0.1:6379/0"
REDIS_PREFIX: Final = "dreamcycle"

#: Defaults of `pulse-emit pulse` (the seed's "cross-topic ripple").
PULSE_STRENGTH: Final = 0.3
PULSE_SIGMA: Final = 0.30
PULSE_MAX_HOPS: Final = 2
PULSE_K: Final = 3
PULSE_DECAY_PER_HOP: Final = 0.3
PULSE_TTL_S: Final = 7 * 24 * 3600.0
#: How long an outcome waits for its attribution before it is dropped.
OUTCOME_WAIT_S: Final = 24 * 3600.0
UPDATE_RULE: Final = "bfs"

#: Half-life of salience by chunk kind, from seed 001's daily decay rates (ln 2 / lambda days).
_DAY_S: Final = 86_400.0
HALF_LIFE_S: Final = {
    "fact": math.log(2) / 0.01 * _DAY_S,
    "preference": math.log(2) / 0.05 * _DAY_S,
    "insight": math.log(2) / 0.10 * _DAY_S,
    "summary": math.log(2) / 0.15 * _DAY_S,
    "note": math.log(2) / 0.05 * _DAY_S,
}

SWEEP_PERCENTILE: Final = 60.0
#: No sweep on a cold database (seed section 5).
SWEEP_MIN_POPULATION: Final = 100
#: Seconds between sweeps (0: every cycle). Each sweep removes the bottom percentile of
#: what is left, so sweeping every 30 s cycle would empty memory within minutes.
SWEEP_INTERVAL_S: Final = 86_400.0

RECALL_TOP_K: Final = 5
RECALL_CANDIDATES: Final = 50
RECALL_SIMILARITY_WEIGHT: Final = 0.7
RECALL_SALIENCE_WEIGHT: Final = 0.3

#: Prometheus exposition address; empty disables it.
METRICS_LISTEN: Final = "127.0.0.1:9464"
LOG_LEVEL: Final = "info"
LOG_FORMAT: Final = "json"
