"""Every operational default of the daemon, in one place.

Protocol constants (epsilon, outcome pulse parameters) live in pulses/constants.py. A
default that a library module uses itself (the sweep's percentile, ranking weights, the
index's graph, the embedder's batch) is a named constant there, with its reason, and is
imported here rather than written twice.

One module of about 400 lines on purpose: a reader looking for why a default has its
value finds every one, with the figure that chose it, in this file.
"""

from __future__ import annotations

import math
from typing import Final

from dreamcycle.pulses import confidence, credit, ranking
from dreamcycle.pulses import retrieval_keys as keys
from dreamcycle.pulses import sweep as sweep_math
from dreamcycle.store import embedder
from dreamcycle.store import index as hnsw_index
from dreamcycle.zeitgeist import defaults as zeitgeist_defaults

#: Where a user's config is looked for when --config is not given.
CONFIG_ENV: Final = "DREAMCYCLE_CONFIG"
#: Prefix of environment overrides: DREAMCYCLE_<SECTION>_<KEY>, e.g. DREAMCYCLE_CYCLE_INTERVAL_S.
ENV_PREFIX: Final = "DREAMCYCLE_"
#: Data directory when none is configured (XDG data home).
DATA_DIR: Final = "~/.local/share/dreamcycle"
DATABASE_FILE: Final = "dreamcycle.db"
INDEX_FILE: Final = "index.hnsw"
#: The daemon writes its changed index at most this often (and when it stops): a write
#: holds the GIL for a time that grows with the index, during which nothing is added to it
#: (an API save waits). A crash in between costs a rebuild from stored vectors at the next
#: start, far slower than loading the saved file; 0 writes it after every cycle that
#: changed it.
INDEX_SAVE_INTERVAL_S: Final = 300.0
INDEX_M: Final = hnsw_index.DEFAULT_M
INDEX_EF_CONSTRUCTION: Final = hnsw_index.DEFAULT_EF_CONSTRUCTION
INDEX_EF: Final = hnsw_index.DEFAULT_EF
LOCK_FILE: Final = "daemon.lock"
#: Where a daemon that `dreamcycle mcp` started writes its log, in the data directory.
STARTED_DAEMON_LOG_FILE: Final = "daemon.log"
#: How long `dreamcycle mcp` waits for a daemon it started to serve memory (its model and
#: index loaded), before giving up with the daemon's log.
MCP_DAEMON_START_TIMEOUT_S: Final = 120.0
#: The embedded default zeitgeist: a directory beside the database.
ZEITGEIST_DIR: Final = "zeitgeist"

CYCLE_INTERVAL_S: Final = 30.0
#: How long a statement of the cycle waits at most for the API's requests in flight
#: (daemon/service/requests_first.py); 0: never. Chosen with scripts/bench_recall.py, which compares
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
#: The cycle's CPU priority (daemon/service/cycle_thread.py): "idle" runs it under SCHED_IDLE,
#: behind the API's requests; "normal" level with them. Chosen with scripts/bench_recall.py
#: (`--cpu-priority`), which compares the two with cycles back to back beside the HTTP
#: figures: under "idle", recall by text, context bundles and save-then-recall have shorter
#: tails, recall by vector stays within the spread of its rounds, and fewer cycles run.
CYCLE_CPU_PRIORITY: Final = "idle"
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

#: Defaults of `pulse-emit pulse` (the protocol's "cross-topic ripple").
PULSE_STRENGTH: Final = 0.3
PULSE_SIGMA: Final = 0.30
PULSE_MAX_HOPS: Final = 2
PULSE_K: Final = 3
PULSE_DECAY_PER_HOP: Final = 0.3
PULSE_TTL_S: Final = 7 * 24 * 3600.0
#: How long an outcome waits for its attribution before it is dropped.
OUTCOME_WAIT_S: Final = 24 * 3600.0
#: Salience the pulses of one other peer may move in one cycle, in the worst case
#: (pulses/budget.py). An outcome pulse moves at most 1.71 (pulses/pulse.py), so this
#: admits 18 at full strength per origin and cycle: a decision scored every 5 s of a
#: 30 s cycle, citing three chunks at reward +-1, fits (6 * 3 * 1.71 = 30.8).
PULSE_ORIGIN_BUDGET: Final = 32.0
UPDATE_RULE: Final = "bfs"
#: The budget is spent per window of the origin's own pulse timestamps, not per local
#: cycle: a peer catching up after an outage reads many windows' pulses at once, and each
#: window still has its budget. One default cycle long, as the budget is sized for.
PULSE_BUDGET_WINDOW_S: Final = CYCLE_INTERVAL_S
#: Pulses stamped further back than this are charged to the current window instead: an
#: origin that backdates its pulses gains at most this many windows' budget, once.
PULSE_BUDGET_LOOKBACK_S: Final = 3_600.0

DOWNSCALE_ENABLED: Final = True
#: Half-life of salience by chunk kind, from daily decay rates lambda per kind (ln 2 / lambda days).
_DAY_S: Final = 86_400.0
HALF_LIFE_S: Final = {
    "fact": math.log(2) / 0.01 * _DAY_S,
    "preference": math.log(2) / 0.05 * _DAY_S,
    "insight": math.log(2) / 0.10 * _DAY_S,
    "summary": math.log(2) / 0.15 * _DAY_S,
    "note": math.log(2) / 0.05 * _DAY_S,
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
SWEEP_GRACE_S: Final = 7 * _DAY_S
#: Cold chunks become permanent tombstones after this long without revival.
SWEEP_COLD_RETENTION_S: Final = 365 * _DAY_S
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
SWEEP_GATE_WINDOW_S: Final = 30 * _DAY_S

RECALL_TOP_K: Final = 5
#: Most chunks one recall may return: an answer is an attribution, and outcomes credit at
#: most a bounded number of chunks per decision.
RECALL_MAX_TOP_K: Final = 100
#: Candidates taken from each retriever (vector, learned keys, full text, cold tier).
#: 100 with a search breadth of 100 returned the exact top 10 in every benchmark query.
RECALL_CANDIDATES: Final = 100
#: A filter matching at most sqrt(this x live chunks) chunks is searched exactly, over
#: those chunks' stored embeddings, rather than through the index. Through the index a
#: filter of m of N chunks whose chunks are scattered visits about k * N / m chunks,
#: each through a callback, and misses some of the nearest; the exact search reads m
#: embeddings and misses none, so the two cost the same where m^2 is proportional to N.
#: A filter whose chunks lie where the query points (a project asked about its own work)
#: is cheap through the index. Chosen with scripts/bench_filtered.py, which times both
#: paths for scattered filters and for whole topics of several sizes: 500 switches (at
#: sqrt(500 x 100,000) = 7,071 matches of 100k chunks) a little below where scattered
#: filters cost the same both ways, since whole topics cost more exactly there, so that
#: neither kind strays far from its faster path.
RECALL_EXACT_FILTER_SCALE: Final = 500.0
#: From this many cold chunks on, the API searches the cold tier through a graph of it
#: rather than reading every cold embedding per query (daemon/recall/cold_search.py). The exact
#: search costs in proportion to the cold tier (scripts/bench_recall.py `--cold-share`
#: measures it); below this size it costs less than one k-NN query of the live index of a
#: store of 100k chunks. 0 searches exactly at every size.
RECALL_COLD_GRAPH_FROM: Final = 8_192
#: A cold graph is built again once this many chunks went cold since it was built (they
#: are searched exactly meanwhile: at most a quarter of `recall.cold_graph_from`'s chunks)...
COLD_GRAPH_PENDING_MAX: Final = 2_048
#: ... or this many of its chunks left the cold tier (each widens every search by one).
COLD_GRAPH_SKIP_MAX: Final = 256
#: A cold graph is built behind the requests (`cycle.cpu_priority`), and raised to normal
#: priority once it has run this long: other processes then keep every core busy, and
#: while no graph is ready the whole cold tier is searched exactly. The limit is several
#: times what a build of a large cold tier takes under SCHED_IDLE beside requests back to
#: back (scripts/bench_cold_build.py times builds beside requests), so only a build that
#: other processes starve is raised.
COLD_GRAPH_IDLE_LIMIT_S: Final = 120.0
RECALL_RRF_K: Final = ranking.DEFAULT_RRF_K
RECALL_SALIENCE_BOUND: Final = ranking.DEFAULT_SALIENCE_BOUND
#: Confidence multiplies relevance by at most 1 +- this; 0 (off) by the efficacy
#: benchmark (docs/efficacy.md): its corpora carry no evidence that certainty helps.
RECALL_CONFIDENCE_BOUND: Final = ranking.DEFAULT_CONFIDENCE_BOUND
RECALL_KEY_WEIGHT: Final = ranking.DEFAULT_KEY_WEIGHT
RECALL_COLD_FACTOR: Final = ranking.DEFAULT_COLD_FACTOR
#: A learned key answers only queries at least this close to the question it was learned from.
RECALL_KEY_MIN_SIMILARITY: Final = 0.8
#: Weights of the fused lists: BM25 over content, cosine (chunk or learned key), BM25
#: over the words of usable learned keys.
RECALL_LEXICAL_WEIGHT: Final = ranking.DEFAULT_LEXICAL_WEIGHT
RECALL_VECTOR_WEIGHT: Final = ranking.DEFAULT_VECTOR_WEIGHT
RECALL_LEARNED_WEIGHT: Final = ranking.DEFAULT_LEARNED_WEIGHT

#: Without citations an outcome credits nothing (see pulses/credit.py for why).
LEARNING_CREDIT_RULE: Final = "none"
LEARNING_KEYS: Final = True
#: Whether a learned key's words travel to other peers (its embedding always does).
LEARNING_SHARE_KEY_TEXT: Final = False
LEARNING_MISS_FACTOR: Final = credit.MISS_FACTOR
LEARNING_KEY_HALF_LIFE_S: Final = keys.KEY_HALF_LIFE_S
LEARNING_MAX_KEYS_PER_CHUNK: Final = keys.MAX_KEYS_PER_CHUNK
#: Cited successes teach recall how far to trust vectors against words (pulses.fusion).
LEARNING_FUSION: Final = True
#: Learned keys rank only in the similarity bands where the store's own new questions
#: showed they help (pulses.key_gate); off, every key at least key_min_similarity-close.
LEARNING_KEY_GATE: Final = True
#: Cited successes teach recall a prior over the candidates' sizes (pulses.intrinsic).
LEARNING_INTRINSIC_PRIOR: Final = True
#: Cited successes could teach recall how far a swept chunk falls (pulses.cold_weight),
#: but they are biased witnesses: a cited chunk was rewarded, so it stays live, while new
#: questions' answers were never cited and are swept like anything else. Learned, the
#: weight buried them (docs/efficacy.md); off, recall.cold_factor holds.
LEARNING_COLD_WEIGHT: Final = False
#: Weights of the credit inferred from what agent sessions do (daemon/memory/implicit_credit.py),
#: each the amount one signal credits a chunk with (0: the signal is ignored).
LEARNING_IMPLICIT_SAVED: Final = 0.5
LEARNING_IMPLICIT_SUMMARY: Final = 0.5
LEARNING_IMPLICIT_ASKED_AGAIN: Final = 0.25
LEARNING_IMPLICIT_SESSION: Final = 0.5
#: How long after a recall what its session does still says something about it.
LEARNING_IMPLICIT_WINDOW_S: Final = 3_600.0
#: How far back a result reported for a whole session reaches.
LEARNING_SESSION_WINDOW_S: Final = 86_400.0
#: A recall at least this close to an earlier one of its session asks the same again.
LEARNING_ASKED_AGAIN_SIMILARITY: Final = 0.8

EFFICACY_ENABLED: Final = True
#: Seconds between computations of the efficacy metrics, and the window they look back on.
EFFICACY_INTERVAL_S: Final = 3_600.0
EFFICACY_WINDOW_S: Final = 7 * _DAY_S

#: Checkpoint the journal and delete what retention lets go.
AUDIT_ENABLED: Final = True
#: The journal (the audit trail of salience) is checkpointed at most this often, during a
#: cycle: the replay state at the journal's head, which rebuild can start from. Each
#: checkpoint holds a row per chunk, so a week between them keeps a large store's
#: checkpoints smaller than its journal.
AUDIT_CHECKPOINT_INTERVAL_S: Final = 7 * _DAY_S
#: Journal steps older than this, and covered by a checkpoint, are deleted: the journal
#: holds between 90 and 97 days of history with the default interval.
AUDIT_RETENTION_S: Final = 90 * _DAY_S

#: Where "now" comes from: "system" (real time) or "file" (simulated time shared by processes).
CLOCK_SOURCE: Final = "system"
CLOCK_SOURCES: Final = ("system", "file")
#: The most time one cycle accounts for (daemon/cycle/accounted.py): decay, the sweep's interval
#: and grace period and cold retention follow a clock stepped forward by at most this much
#: per cycle (one hour, 120 cycles of 30 s; a downscale step); a week of real downtime is
#: caught up within 168 cycles.
CLOCK_MAX_STEP_S: Final = 3_600.0

#: The local HTTP API, served by `dreamcycle run` unless turned off: a Unix socket in the
#: data directory, whose file mode (0600) is its access control, and loopback TCP when a
#: port is set.
API_ENABLED: Final = True
API_HOST: Final = "127.0.0.1"
#: 0: no TCP listener, the Unix socket only. TCP is asked for with a port (e.g. 9465),
#: best with a token: any local user can reach a loopback port.
API_PORT: Final = 0
API_UNIX_SOCKET: Final = "api.sock"
#: Requests answered side by side at most (each in its own worker thread, never
#: waiting for a dream cycle's phase).
API_WORKERS: Final = 8
#: The server's access log (a line per request, on the dreamcycle.api.access logger).
API_ACCESS_LOG: Final = False
#: Mode of the Unix socket file: only the daemon's user may connect.
API_SOCKET_MODE: Final = 0o600
#: Largest request body accepted, in bytes (a memory is text, not a file upload): room for
#: the longest content a memory may hold (daemon/memory/limits.py) written as JSON, whose escapes
#: take up to twelve bytes a character (a surrogate pair).
API_MAX_BODY_BYTES: Final = 16 << 20
#: How long a thread holding the GIL runs before one waiting for it may take it. A request
#: waits up to this long at each hand-over while a cycle computes in pure Python beside it
#: (Python's default is 5 ms). Chosen with scripts/bench_recall.py (`--switch-interval`),
#: in process with cycles running, which compared it with 1 ms: recall by vector's p99 was
#: shorter at this value in every run.
THREAD_SWITCH_INTERVAL_S: Final = 0.0002
#: How long a client (daemon/api/client.py, `dreamcycle mcp`) waits for the daemon's answer.
CLIENT_TIMEOUT_S: Final = 30.0
#: Connections the blocking client keeps open to the daemon: as many threads call at once.
CLIENT_CONNECTIONS: Final = 4

#: Context bundles (POST /v1/context, mem_context): the token budget when none is given,
#: and the largest one accepted (tokens estimated as in pulses/context.py).
CONTEXT_BUDGET_TOKENS: Final = 3_000
CONTEXT_MAX_BUDGET_TOKENS: Final = 4_000
#: References listed for the memories that did not fit, at most.
CONTEXT_MAX_OVERFLOW: Final = 64
#: The salience pinned memories are ranked at, at least, when the budget is spent.
CONTEXT_PINNED_SALIENCE: Final = 0.9
#: Pinned memories considered at most (highest salience first).
CONTEXT_PINNED_LIMIT: Final = 200
#: Memories the frame-relevant tier asks recall for.
CONTEXT_RELEVANT_TOP_K: Final = 20
#: The outcomes tier: chunks cited by this peer's successful decisions made within the
#: window (the most recent ones first, at most this many decisions), whose query was at
#: least this close (cosine) to the task.
CONTEXT_OUTCOME_WINDOW_S: Final = 30 * _DAY_S
CONTEXT_OUTCOME_DECISIONS: Final = 50
CONTEXT_OUTCOME_MIN_SIMILARITY: Final = 0.5
#: What explaining one memory lists at most: its most recent journal steps, and the most
#: recent decisions that returned it.
EXPLAIN_STEPS: Final = 50
EXPLAIN_DECISIONS: Final = 20
#: Timeline pages: rows when a request does not say, and at most.
TIMELINE_PAGE: Final = 20
TIMELINE_MAX_PAGE: Final = 200
#: Rows of the cold tier (`forgotten`) listed when a request does not say, and at most per
#: API request.
FORGOTTEN_PAGE: Final = 20
FORGOTTEN_MAX_PAGE: Final = 500
#: Around a point in time, the timeline spans this long on either side unless told.
TIMELINE_SPAN_S: Final = 3_600.0
#: Characters of each memory's content a timeline row shows.
TIMELINE_PREVIEW_CHARS: Final = 300
#: Strength of a reinforce (Reward) or penalize (Decay) pulse when none is given.
FEEDBACK_STRENGTH: Final = 0.5
#: The pin floor a pin sets when none is given.
PIN_FLOOR: Final = 0.5

#: This peer's Ed25519 private key and the keyring of trusted public keys; relative paths
#: are inside the data directory.
KEYS_KEY_FILE: Final = "peer.key"
KEYS_KEYRING_FILE: Final = "keyring.json"
#: "strict": only entries signed by a trusted key of their origin peer are applied, and
#: the daemon does not start without a key. "permissive" (migration only): unsigned
#: entries and unknown keys are accepted too, and the daemon warns at every start.
KEYS_MODE: Final = "strict"
KEYS_MODES: Final = ("strict", "permissive")
#: Mode of the private key file; a key that group or others may read is refused.
KEY_FILE_MODE: Final = 0o600
#: A remote chunk is adopted only if its embedding and this peer's embedding of its title
#: and content (same model) have at least this cosine. The int8 model gives the same text a cosine of
#: 1.0 with itself whatever the batch (measured: 64 texts alone, batched, reordered, beside
#: longer ones); two different documentation paragraphs reach 0.964.
EMBEDDING_MATCH_MIN_COSINE: Final = 0.98
#: Times one publish finds its claim or segment key taken by an object this peer's key did
#: not seal (each time it skips the whole run of forged claims in the way, so only a writer
#: racing its claims makes it happen again); the segment then waits for the next cycle.
FORGED_CLAIMS_PER_PUBLISH: Final = 64
#: Rejected objects remembered so each is logged once (the counter counts them all).
REJECTION_LOG_MEMORY: Final = zeitgeist_defaults.LOGGED_OBJECTS_MEMORY
#: Segments refused for want of a trusted key are read again once the keyring trusts it
#: (a peer added after it published): those dated up to this long ago, and at most this
#: many, the newest kept. Any other refusal is for good and kept nowhere.
AWAIT_KEY_FOR_MS: Final = 7 * 24 * 3600 * 1000
AWAIT_KEY_SEGMENTS: Final = 10_000

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
#: Where `keys init --rotate` moves a key file it cannot use (unreadable, or open to other
#: users): beside it, named `<key file>.unusable-<UTC time>`, never deleted.
KEYS_UNUSABLE_SUFFIX: Final = "unusable"

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
