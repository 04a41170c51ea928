"""The zeitgeist as the daemon reads and writes it: the window, the bounds on what one
segment or snapshot may cost to read, liveness, compaction, roll-ups, and the S3 and Redis
backends' defaults. The library's own defaults are in zeitgeist/defaults.py.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.zeitgeist import defaults as zeitgeist_defaults

ZEITGEIST_WINDOW_S: Final = zeitgeist_defaults.DEFAULT_WINDOW_MS / 1000
#: What one segment read from the zeitgeist may cost: gzip'd bytes, bytes once
#: decompressed, and lines. A cycle publishes at most MAX_ENTRIES_PER_SEGMENT entries, a
#: few MiB; a segment beyond any limit is refused whole and counted.
ZEITGEIST_MAX_SEGMENT_BYTES: Final = zeitgeist_defaults.MAX_SEGMENT_COMPRESSED_BYTES
ZEITGEIST_MAX_SEGMENT_EXPANDED_BYTES: Final = zeitgeist_defaults.MAX_SEGMENT_EXPANDED_BYTES
ZEITGEIST_MAX_SEGMENT_LINES: Final = zeitgeist_defaults.MAX_SEGMENT_LINES
#: The same for a snapshot, which folds the whole history (read at start-up and by
#: compaction).
ZEITGEIST_MAX_SNAPSHOT_BYTES: Final = zeitgeist_defaults.MAX_SNAPSHOT_COMPRESSED_BYTES
ZEITGEIST_MAX_SNAPSHOT_EXPANDED_BYTES: Final = zeitgeist_defaults.MAX_SNAPSHOT_EXPANDED_BYTES
ZEITGEIST_MAX_SNAPSHOT_LINES: Final = zeitgeist_defaults.MAX_SNAPSHOT_LINES
LIVENESS_TIMEOUT_S: Final = zeitgeist_defaults.DEFAULT_LIVENESS_TIMEOUT_MS / 1000
COMPACTION_INTERVAL_S: Final = 3_600.0
#: Read other peers' segments from roll-ups (zeitgeist/_log_rollup.py): a constant number
#: of requests a cycle instead of one GET per peer publishing.
ZEITGEIST_ROLLUPS: Final = True
#: How many cycle intervals a reader waits for a roll-up to hold a new segment before it
#: reads the segment itself (and asks for the roll-up lease): more than one, so the
#: writer's next cycle has come.
ROLLUP_WAIT_INTERVALS: Final = 2.0
S3_REGION: Final = zeitgeist_defaults.DEFAULT_S3_REGION
S3_PREFIX: Final = "dreamcycle"
REDIS_URL: Final = "redis://127.0.0.1:6379/0"
REDIS_PREFIX: Final = "dreamcycle"
