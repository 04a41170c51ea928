"""A memory's life: how its salience decays, how far it is trusted, when the sweep moves it
to the cold tier and lets it go, and how long the journal keeps the history of it.
"""

from __future__ import annotations

import math
from typing import Final

from dreamcycle.daemon.defaults.units import DAY_S
from dreamcycle.pulses import confidence
from dreamcycle.pulses import sweep as sweep_math

DOWNSCALE_ENABLED: Final = True
#: Half-life of salience by chunk kind, from daily decay rates lambda per kind (ln 2 / lambda days).
HALF_LIFE_S: Final = {
    "fact": math.log(2) / 0.01 * DAY_S,
    "preference": math.log(2) / 0.05 * DAY_S,
    "insight": math.log(2) / 0.10 * DAY_S,
    "summary": math.log(2) / 0.15 * DAY_S,
    "note": math.log(2) / 0.05 * DAY_S,
}

#: A memory's half-life is its kind's x (1 + gain x stability) / (1 + gain x the kind's
#: usual stability): at the default gain a memory of stability 1 keeps its salience five
#: times as long as one of stability 0 (stable memories decay much slower),
#: and one of its kind's usual stability decays at exactly the half-life above.
DOWNSCALE_STABILITY_GAIN: Final = confidence.DEFAULT_STABILITY_GAIN
#: A chunk is decayed at most once per this long: decay composes, so waiting loses nothing,
#: and an idle store is not rewritten every cycle (decaying every chunk by each cycle's
#: 30 s took most of an idle cycle; scripts/bench_scale.py measures idle cycles).
DOWNSCALE_MIN_STEP_S: Final = 3_600.0
#: Chunks decayed in one cycle at most, the longest waiting first: a store whose chunks
#: all fell due together (the first cycle, or after downtime) spreads them over cycles.
DOWNSCALE_MAX_CHUNKS_PER_CYCLE: Final = 10_000
#: Usual stability of each kind, given to a memory saved without one (and what its
#: kind's half-life is meant for): facts rarely change, summaries describe a moment.
STABILITY_BY_KIND: Final = confidence.STABILITY_BY_KIND

#: Confidence of a memory saved without one, by its type: an explicit statement (a
#: `manual` save) is worth more than a conclusion, and that more than a pattern or a
#: summary inferred from other memories; other types get CONFIDENCE_OTHER_TYPE ...
CONFIDENCE_BY_TYPE: Final = confidence.CONFIDENCE_BY_TYPE
CONFIDENCE_OTHER_TYPE: Final = confidence.CONFIDENCE_OTHER_TYPE
#: ... and a memory of an inferred kind (insight, summary) no more than this.
CONFIDENCE_CAP_BY_KIND: Final = confidence.CONFIDENCE_CAP_BY_KIND
#: The same content saved again, or a reinforce (a user's verification), closes this
#: share of the distance to confidence 1; a penalize takes this share away. Bounded
#: steps: five verifications take 0.5 to 0.84, and nothing reaches 0 or 1.
CONFIDENCE_VERIFY_STEP: Final = confidence.DEFAULT_VERIFY_STEP
CONFIDENCE_PENALTY_STEP: Final = confidence.DEFAULT_PENALTY_STEP

SWEEP_ENABLED: Final = True
#: True: the cycle's sweep reports what it would move to the cold tier and moves nothing.
SWEEP_DRY_RUN: Final = False
SWEEP_PERCENTILE: Final = sweep_math.DEFAULT_SWEEP_PERCENTILE
SWEEP_MIN_POPULATION: Final = sweep_math.DEFAULT_MIN_POPULATION
#: Seconds between sweeps (0: every cycle). Each sweep removes the bottom percentile of
#: what is left, so sweeping every 30 s cycle would empty memory within minutes.
SWEEP_INTERVAL_S: Final = 86_400.0

#: A chunk cannot be swept before it has been held this long (a chance to prove itself).
SWEEP_GRACE_S: Final = 7 * DAY_S
#: Cold chunks become permanent tombstones after this long without revival.
SWEEP_COLD_RETENTION_S: Final = 365 * DAY_S
#: Shares of learned salience, information content and declared importance in the value
#: the sweep ranks by (each a percentile rank within the chunk's kind).
SWEEP_SALIENCE_SHARE: Final = sweep_math.DEFAULT_SALIENCE_SHARE
SWEEP_INFORMATION_SHARE: Final = sweep_math.DEFAULT_INFORMATION_SHARE
SWEEP_IMPORTANCE_SHARE: Final = sweep_math.DEFAULT_IMPORTANCE_SHARE
#: Before a sweep commits, the prune gate spares what recent successful decisions would
#: no longer find.
SWEEP_PRUNE_GATE: Final = True
#: The prune gate replays this many recent successful decisions before a sweep commits.
SWEEP_GATE_DECISIONS: Final = 200
#: ... made within this window.
SWEEP_GATE_WINDOW_S: Final = 30 * DAY_S

#: Checkpoint the journal and delete what retention lets go.
AUDIT_ENABLED: Final = True
#: The journal (the audit trail of salience) is checkpointed at most this often, during a
#: cycle: the replay state at the journal's head, which rebuild can start from. Each
#: checkpoint holds a row per chunk, so a week between them keeps a large store's
#: checkpoints smaller than its journal.
AUDIT_CHECKPOINT_INTERVAL_S: Final = 7 * DAY_S
#: Journal steps older than this, and covered by a checkpoint, are deleted: the journal
#: holds between 90 and 97 days of history with the default interval.
AUDIT_RETENTION_S: Final = 90 * DAY_S
