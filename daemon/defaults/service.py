"""The daemon as a service: where its configuration is looked for and the bounds every
setting keeps, its logs and metrics, what /readyz calls ready, how storage faults are
waited out, how it starts and stops, `doctor`'s limits, and the systemd unit it installs.
"""

from __future__ import annotations

from typing import Final

#: Where a user's config is looked for when --config is not given.
CONFIG_ENV: Final = "DREAMCYCLE_CONFIG"
#: Prefix of environment overrides: DREAMCYCLE_<SECTION>_<KEY>, e.g. DREAMCYCLE_CYCLE_INTERVAL_S.
ENV_PREFIX: Final = "DREAMCYCLE_"
#: The largest values settings may hold, whatever their own rules: beyond them a value is
#: a slip (`1e308`, `inf`, a count with twenty digits) that would overflow later, in
#: milliseconds, in SQLite's 64-bit integers or in a native library's 32-bit ones.
#: Durations (every `*_s` setting) up to a century:
CONFIG_MAX_YEARS: Final = 100
CONFIG_MAX_SECONDS: Final = CONFIG_MAX_YEARS * 365.25 * 24 * 3600.0
#: Counts (the largest 32-bit signed integer) ...
CONFIG_MAX_COUNT: Final = 2**31 - 1
#: ... sizes (every `*_bytes` setting; a snapshot's default is 4 GiB) ...
CONFIG_MAX_BYTES: Final = 2**40
#: ... and threads (embedding.threads, api.workers): each is a real thread of this process.
CONFIG_MAX_THREADS: Final = 1_024

#: Prometheus exposition address; empty disables it.
METRICS_LISTEN: Final = "127.0.0.1:9464"
LOG_LEVEL: Final = "info"
LOG_FORMAT: Final = "json"

#: /readyz calls the daemon unready when no cycle has finished for this many intervals ...
HEALTH_CYCLE_AGE_INTERVALS: Final = 3.0
#: ... or for this long, whichever is longer (a short interval must not flap on one slow cycle).
HEALTH_MIN_CYCLE_AGE_S: Final = 300.0
#: How long /readyz waits for a lock on the database before calling it unusable.
HEALTH_DATABASE_TIMEOUT_MS: Final = 1_000

#: After a cycle met a storage fault (another process's write lock past the busy timeout,
#: a full disk, a read-only data directory) the next attempt waits this long, doubling per
#: failure up to the maximum; reads are served meanwhile.
STORAGE_RETRY_INITIAL_S: Final = 1.0
STORAGE_RETRY_MAX_S: Final = 60.0
#: A lasting storage fault is logged when it starts, then at most once per this many seconds.
STORAGE_FAULT_LOG_INTERVAL_S: Final = 300.0
#: The zeitgeist probe at start-up gives up after this long: an outage at boot is waited
#: out by the cycles (entries queue in the outbox), not by the start.
STARTUP_PROBE_DEADLINE_S: Final = 5.0
#: After SIGTERM / SIGINT a phase gets this long to reach a point where it can stop (between
#: batches); past it the process exits at once (1), leaving what it did not commit for the
#: next start, as a crash would.
STOP_DEADLINE_S: Final = 8.0

#: `dreamcycle doctor` gives the backend this long to answer (the daemon's retries wait 20 s).
DOCTOR_BACKEND_DEADLINE_S: Final = 5.0
#: A clock further than this from the backend's: HLCs and expiries drift (pulse TTLs, windows).
DOCTOR_MAX_CLOCK_SKEW_S: Final = 5.0

#: Where `dreamcycle install-unit` puts things (below --root), and the system user the unit
#: runs as (systemd creates it: DynamicUser). The data directory is the unit's
#: StateDirectory; the example TOML and the environment file name the same one.
UNIT_DIR: Final = "/etc/systemd/system"
UNIT_NAME: Final = "dreamcycle.service"
CONFIG_DIR: Final = "/etc/dreamcycle"
CONFIG_FILE_NAME: Final = "dreamcycle.toml"
ENVIRONMENT_FILE_NAME: Final = "dreamcycle.env"
SERVICE_DATA_DIR: Final = "/var/lib/dreamcycle"
#: The C allocator's arenas in the daemon's process (glibc's default is eight per core):
#: memory a thread frees stays in its thread's arena, and the daemon's API, cycle and
#: helper threads each grew one. Chosen with scripts/bench_scale.py at a million chunks.
MALLOC_ARENAS: Final = 2
#: Allocations of at least this many bytes get pages of their own, handed back to the
#: system when freed: a sweep's arrays over a million chunks, freed, otherwise stay in the
#: heap as glibc raises its threshold past them. Below it (recall's arrays of candidates)
#: freed memory is reused at once, without new pages to fault in.
MALLOC_MMAP_THRESHOLD_BYTES: Final = 4 << 20
