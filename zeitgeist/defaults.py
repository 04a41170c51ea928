"""The zeitgeist's defaults that are read beyond the module using them, written once.

The log layer, the entry codec and the backends take these as their defaults, and
daemon/defaults/ derives its configuration defaults from them. Plain numbers only:
reading them must not import a backend's client library (boto3, redis-py), which the
daemon imports only for the backend it is configured with.
"""

from __future__ import annotations

from typing import Final

# ---- the log layer (zeitgeist/log.py) ---------------------------------------------------

#: How far behind its cursor a reader lists; must exceed clock skew plus the slowest write.
DEFAULT_WINDOW_MS: Final = 60_000
#: A peer whose heartbeat is older than this is not waited for by compaction.
DEFAULT_LIVENESS_TIMEOUT_MS: Final = 600_000
#: How long the compaction lease lasts without renewal.
DEFAULT_LEASE_TTL_MS: Final = 120_000
#: A segment key stamped further than this ahead of the wall clock is deferred: a
#: broken clock or a corrupt key must not drag every peer's HLC into the future.
DEFAULT_MAX_FUTURE_MS: Final = 3_600_000

# ---- what one object read from the log may cost (zeitgeist/entries.py: SegmentLimits) ----

#: Largest gzip'd segment read (a cycle publishes at most 5,000 entries: a few MiB).
MAX_SEGMENT_COMPRESSED_BYTES: Final = 64 * 1024 * 1024
#: Largest decompressed segment accepted, so a corrupt or hostile object cannot
#: exhaust memory (a cycle's segment is normally a few hundred kilobytes).
MAX_SEGMENT_EXPANDED_BYTES: Final = 256 * 1024 * 1024
#: Most lines of a segment, blank ones included: the seal, 5,000 entries a cycle
#: publishes at most, and room for entries of newer kinds.
MAX_SEGMENT_LINES: Final = 20_000
#: A snapshot folds the whole history, so it may be far larger than a segment.
MAX_SNAPSHOT_COMPRESSED_BYTES: Final = 1024 * 1024 * 1024
MAX_SNAPSHOT_EXPANDED_BYTES: Final = 4 * 1024 * 1024 * 1024
MAX_SNAPSHOT_LINES: Final = 5_000_000

# ---- the networked backends (zeitgeist/s3*.py, zeitgeist/redis_*.py) --------------------

#: The S3 region when none is configured.
DEFAULT_S3_REGION: Final = "us-east-1"
#: Seconds to open a TCP (and TLS) connection before the attempt counts as failed.
DEFAULT_CONNECT_TIMEOUT_S: Final = 5.0
#: Objects remembered so each refusal is logged once (the counters count them all).
LOGGED_OBJECTS_MEMORY: Final = 4_096
