"""The dream cycle: how often it runs, how it gives way to the API's requests, how much one
cycle takes on (segments, entries, chunks to embed), the embedding model it runs, and the
clock it accounts time by.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store import embedder

CYCLE_INTERVAL_S: Final = 30.0
#: How long a statement of the cycle waits at most for the API's requests in flight
#: (daemon/scheduling/requests_first.py); 0: never. Chosen with scripts/bench_recall.py, which compares
#: it with 0 while cycles run (`--give-way`); 20 ms and the two bounds below were not
#: compared with other values there.
CYCLE_GIVE_WAY_S: Final = 0.02
#: Beyond this, a request in flight would hold a cycle up for long (config check).
CYCLE_MAX_GIVE_WAY_S: Final = 1.0
#: How long a cycle may wait for requests per second it runs, over any stretch: requests
#: that never stop arriving make a cycle take at most 1 + this times as long.
CYCLE_WAIT_PER_RUN: Final = 4.0
#: How many full waits a cycle may wait beyond what its running earned (a second's worth
#: at the default give_way_s): a burst of requests is waited out whole.
CYCLE_WAIT_CREDIT_WAITS: Final = 50
#: The cycle's CPU priority (daemon/scheduling/cycle_thread.py): "idle" runs it under SCHED_IDLE,
#: behind the API's requests; "normal" level with them. Chosen with scripts/bench_recall.py
#: (`--cpu-priority`), which compares the two with cycles back to back beside the HTTP
#: figures: under "idle", recall by text, context bundles and save-then-recall have shorter
#: tails, recall by vector stays within the spread of its rounds, and fewer cycles run.
#: `cycle.cpu_priority`'s values: behind the requests, or level with them.
CPU_PRIORITY_IDLE: Final = "idle"
CPU_PRIORITY_NORMAL: Final = "normal"
CPU_PRIORITIES: Final = (CPU_PRIORITY_IDLE, CPU_PRIORITY_NORMAL)
CYCLE_CPU_PRIORITY: Final = CPU_PRIORITY_IDLE
#: A step of the cycle under SCHED_IDLE that has run this long is raised to normal
#: priority: other processes keep the cores busy, and the watchdog (120 s) must not starve.
CYCLE_IDLE_STEP_LIMIT_S: Final = 5.0
#: How often the service looks for a cycle under SCHED_IDLE that holds something up.
CYCLE_PRIORITY_CHECK_S: Final = 0.1
#: Segments applied per cycle at most, so one cycle stays short after a long absence.
MAX_SEGMENTS_PER_CYCLE: Final = 500
#: Entries per published segment at most.
MAX_ENTRIES_PER_SEGMENT: Final = 5_000
EMBEDDING_MODEL: Final = embedder.DEFAULT_MODEL
EMBED_BATCH_SIZE: Final = embedder.DEFAULT_BATCH_SIZE
#: Threads of the embedding model; 0 lets onnxruntime decide.
EMBEDDING_THREADS: Final = 0
#: Threads of the API's own embedder, which embeds one short query at a time: a second
#: thread barely shortens it, and onnxruntime's threads spin while they wait, taking the
#: core that the query's full-text search and other requests need (scripts/bench_recall.py
#: measures recall by text).
API_EMBEDDING_THREADS: Final = 1
#: Chunks embedded per cycle at most (the rest wait for the next cycle).
MAX_EMBED_PER_CYCLE: Final = 4_096

#: Where "now" comes from: "system" (real time) or "file" (simulated time shared by processes).
CLOCK_SOURCE: Final = "system"
CLOCK_SOURCES: Final = ("system", "file")
#: The most time one cycle accounts for (daemon/cycle/accounted.py): decay, the sweep's interval
#: and grace period and cold retention follow a clock stepped forward by at most this much
#: per cycle (one hour, 120 cycles of 30 s; a downscale step); a week of real downtime is
#: caught up within 168 cycles.
CLOCK_MAX_STEP_S: Final = 3_600.0
