"""Every setting, stated once: its dotted name, its default, what it does, and its choices.

The sections (host.py, memory.py) take their fields' defaults from this table; the loader
knows the file's keys and the environment's variables from it; the options that set a
setting take their help from it; docs/settings.md and scripts/dreamcycle.example.toml are
generated from it (scripts/settings_docs.py). A setting's type is its default's type.

A new setting: its row here, its field in host.py or memory.py with the rules it must keep,
then `python -m scripts.settings_docs`; tests/test_settings_table.py holds the two in step.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from typing import Any, Final

from dreamcycle.daemon import defaults as d
from dreamcycle.pulses.credit import CreditRule
from dreamcycle.pulses.propagate import UpdateRule

#: What a setting may hold: TOML's scalars.
Value = bool | int | float | str


@dataclass(frozen=True)
class Setting:
    """One setting: `cycle.interval_s` is the key `interval_s` of the file's `[cycle]`."""

    name: str
    default: Value
    #: What the setting does, in one line: the docs, the example file and --help print it.
    help: str
    #: The only values accepted, where they are a short list of words.
    choices: tuple[str, ...] = ()
    #: A value the example file shows commented out, for a setting whose default ("") is
    #: no value to copy: it stands for the host name, a path, or nothing.
    example: str = ""

    @property
    def value_type(self) -> type[Value]:
        return type(self.default)

    @property
    def table(self) -> str:
        """The TOML table that holds it: "cycle", "zeitgeist.s3"."""
        return self.name.rpartition(".")[0]

    @property
    def key(self) -> str:
        return self.name.rpartition(".")[2]

    @property
    def env(self) -> str:
        """The environment variable that overrides it: DREAMCYCLE_<SECTION>_<KEY>."""
        return d.ENV_PREFIX + self.name.replace(".", "_").upper()

    @property
    def literal(self) -> str:
        """The default as the TOML file writes it (json's string escapes are TOML's)."""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, str):
            return json.dumps(self.default)
        return repr(self.default)


_IN_DATA_DIR: Final = "relative: in the data directory"

# One row per setting, in the order of the sections' fields (tests/test_settings_table.py).
SETTINGS: Final[tuple[Setting, ...]] = (
    Setting("peer.id", "", "this peer's id in the mesh: 1-64 letters, digits, '_' or '.' "
            "(empty: the host name)", example="host-a"),
    Setting("peer.data_dir", d.DATA_DIR, "where the database, the index and the keys live"),

    Setting("cycle.interval_s", d.CYCLE_INTERVAL_S, "seconds between cycle starts"),
    Setting("cycle.max_segments", d.MAX_SEGMENTS_PER_CYCLE, "log segments applied per cycle at "
            "most"),
    Setting("cycle.max_embed", d.MAX_EMBED_PER_CYCLE, "new chunks embedded per cycle at most"),
    Setting("cycle.give_way_s", d.CYCLE_GIVE_WAY_S, "how long a statement of the cycle waits "
            f"at most for API requests in flight (0: never; at most {d.CYCLE_MAX_GIVE_WAY_S:g})"),
    Setting("cycle.cpu_priority", d.CYCLE_CPU_PRIORITY, "idle: the cycle runs under SCHED_IDLE, "
            "behind API requests; normal: level with them", d.CPU_PRIORITIES),

    Setting("zeitgeist.backend", "dir", "where the peers' shared log lives: a directory, an S3 "
            "bucket or Redis", ("dir", "s3", "redis")),
    Setting("zeitgeist.dir", "", "the shared directory of the dir backend (empty: "
            f"<data_dir>/{d.ZEITGEIST_DIR})", example="/srv/shared/zeitgeist"),
    Setting("zeitgeist.window_s", d.ZEITGEIST_WINDOW_S, "how far back a poll lists the log: "
            "more than clock skew plus the slowest write"),
    Setting("zeitgeist.liveness_timeout_s", d.LIVENESS_TIMEOUT_S, "a peer whose last heartbeat "
            "is older than this no longer counts as live"),
    Setting("zeitgeist.compaction_interval_s", d.COMPACTION_INTERVAL_S, "seconds between "
            "compactions of the log into a snapshot, by one peer at a time"),
    Setting("zeitgeist.adopt_remote_chunks", False, "take other peers' chunks into this store"),
    Setting("zeitgeist.rollups", d.ZEITGEIST_ROLLUPS, "read other peers' segments from "
            "roll-ups (docs/scale.md)"),
    Setting("zeitgeist.max_segment_bytes", d.ZEITGEIST_MAX_SEGMENT_BYTES, "largest segment read "
            "from the log, gzip'd; one beyond any of these limits is refused whole and counted"),
    Setting("zeitgeist.max_segment_expanded_bytes", d.ZEITGEIST_MAX_SEGMENT_EXPANDED_BYTES,
            "largest segment read from the log, decompressed"),
    Setting("zeitgeist.max_segment_lines", d.ZEITGEIST_MAX_SEGMENT_LINES, "most lines of a "
            f"segment read from the log (above {d.MAX_ENTRIES_PER_SEGMENT:,}, a cycle's entries)"),
    Setting("zeitgeist.max_snapshot_bytes", d.ZEITGEIST_MAX_SNAPSHOT_BYTES, "largest snapshot "
            "read from the log, gzip'd (a snapshot folds the whole history)"),
    Setting("zeitgeist.max_snapshot_expanded_bytes", d.ZEITGEIST_MAX_SNAPSHOT_EXPANDED_BYTES,
            "largest snapshot read from the log, decompressed"),
    Setting("zeitgeist.max_snapshot_lines", d.ZEITGEIST_MAX_SNAPSHOT_LINES, "most lines of a "
            "snapshot read from the log"),
    Setting("zeitgeist.s3.bucket", "", 'the bucket (required with backend = "s3")'),
    Setting("zeitgeist.s3.prefix", d.S3_PREFIX, "the log's keys in the bucket start with this"),
    Setting("zeitgeist.s3.endpoint_url", "", "an S3-compatible server, e.g. "
            "http://minio.internal:9000 (empty: AWS S3)"),
    Setting("zeitgeist.s3.region", d.S3_REGION, "the bucket's region"),
    Setting("zeitgeist.redis.url", d.REDIS_URL, "redis://HOST:PORT/DB, rediss://... or "
            "unix:///path/to/socket"),
    Setting("zeitgeist.redis.prefix", d.REDIS_PREFIX, "the log's keys start with this"),

    Setting("embedding.model", d.EMBEDDING_MODEL, "the embedding model (the default is shipped "
            "and works offline)"),
    Setting("embedding.batch_size", d.EMBED_BATCH_SIZE, "texts embedded per batch"),
    Setting("embedding.threads", d.EMBEDDING_THREADS, "threads of bulk embedding (0: onnxruntime "
            "decides; the API embeds one query at a time on one thread)"),

    Setting("index.m", d.INDEX_M, "links per node of the HNSW graph"),
    Setting("index.ef_construction", d.INDEX_EF_CONSTRUCTION, "HNSW search breadth while "
            "building the graph"),
    Setting("index.ef", d.INDEX_EF, "HNSW search breadth of a query"),
    Setting("index.save_interval_s", d.INDEX_SAVE_INTERVAL_S, "the daemon writes its changed "
            "index at most this often, and when it stops (0: after every cycle)"),

    Setting("pulses.update_rule", d.UPDATE_RULE, "how a pulse spreads (literal: the protocol's "
            "pseudocode)", tuple(rule.value for rule in UpdateRule)),
    Setting("pulses.strength", d.PULSE_STRENGTH, "magnitude of an emitted pulse"),
    Setting("pulses.sigma", d.PULSE_SIGMA, "kernel width of an emitted pulse, in cosine-distance "
            "units"),
    Setting("pulses.max_hops", d.PULSE_MAX_HOPS, "BFS depth of an emitted pulse"),
    Setting("pulses.k", d.PULSE_K, "neighbours per BFS node of an emitted pulse"),
    Setting("pulses.decay_per_hop", d.PULSE_DECAY_PER_HOP, "attenuation per hop of an emitted "
            "pulse"),
    Setting("pulses.ttl_s", d.PULSE_TTL_S, "time to live of an emitted pulse or tombstone, in "
            "seconds"),
    Setting("pulses.outcome_wait_s", d.OUTCOME_WAIT_S, "how long an outcome waits for its "
            "attribution"),
    Setting("pulses.origin_budget", d.PULSE_ORIGIN_BUDGET, "salience another peer's pulses may "
            f"move per {d.PULSE_BUDGET_WINDOW_S:g} s of their time, at most"),

    Setting("downscale.enabled", d.DOWNSCALE_ENABLED, "salience decays by each kind's half-life"),
    *(Setting(f"downscale.{kind}_half_life_s", half_life, f"salience half-life of {kind} chunks")
      for kind, half_life in d.HALF_LIFE_S.items()),
    Setting("downscale.stability_gain", d.DOWNSCALE_STABILITY_GAIN, "half-life x (1 + gain x "
            "stability), against the kind's usual stability (0: stability changes nothing)"),
    Setting("downscale.min_step_s", d.DOWNSCALE_MIN_STEP_S, "a chunk decays at most once per "
            "this long"),
    Setting("downscale.max_chunks_per_cycle", d.DOWNSCALE_MAX_CHUNKS_PER_CYCLE, "chunks decayed "
            "per cycle at most, the longest waiting first"),

    Setting("sweep.enabled", d.SWEEP_ENABLED, "move the least valuable chunks to the cold tier"),
    Setting("sweep.percentile", d.SWEEP_PERCENTILE, "per kind, live and cold together, the "
            "bottom percentile is cold"),
    Setting("sweep.min_population", d.SWEEP_MIN_POPULATION, "a store with fewer sweepable "
            "chunks is not swept"),
    Setting("sweep.interval_s", d.SWEEP_INTERVAL_S, "seconds between sweeps (0: every cycle)"),
    Setting("sweep.dry_run", d.SWEEP_DRY_RUN, "report what a sweep would move, and move nothing"),
    Setting("sweep.grace_s", d.SWEEP_GRACE_S, "a chunk younger than this (or revived since) is "
            "not swept"),
    Setting("sweep.cold_retention_s", d.SWEEP_COLD_RETENTION_S, "cold this long without revival: "
            "a permanent tombstone"),
    Setting("sweep.salience_share", d.SWEEP_SALIENCE_SHARE, "share of learned salience in the "
            "value swept by (each a percentile rank within the kind)"),
    Setting("sweep.information_share", d.SWEEP_INFORMATION_SHARE, "share of information content "
            "in the value swept by"),
    Setting("sweep.importance_share", d.SWEEP_IMPORTANCE_SHARE, "share of declared importance in "
            "the value swept by"),
    Setting("sweep.prune_gate", d.SWEEP_PRUNE_GATE, "spare what recent successful decisions "
            "would no longer find, replayed before a sweep commits"),
    Setting("sweep.gate_decisions", d.SWEEP_GATE_DECISIONS, "recent successful decisions the "
            "prune gate replays"),
    Setting("sweep.gate_window_s", d.SWEEP_GATE_WINDOW_S, "how far back the decisions the prune "
            "gate replays may lie"),

    Setting("recall.top_k", d.RECALL_TOP_K, f"chunks a recall returns (1-{d.RECALL_MAX_TOP_K})"),
    Setting("recall.candidates", d.RECALL_CANDIDATES, "candidates taken from each retriever: "
            "vector index, learned keys, full text, cold tier"),
    Setting("recall.exact_filter_scale", d.RECALL_EXACT_FILTER_SCALE, "a filter of at most "
            "sqrt(this x live chunks) chunks is searched exactly"),
    Setting("recall.cold_graph_from", d.RECALL_COLD_GRAPH_FROM, "recall searches a cold tier "
            "this large through the index's graph (0: always exactly)"),
    Setting("recall.embeddings_held_mib", d.RECALL_EMBEDDINGS_HELD_MIB, "MiB of stored "
            "embeddings kept in memory to rank from; the rest are read per query"),
    Setting("recall.rrf_k", d.RECALL_RRF_K, "reciprocal-rank fusion constant (larger flattens "
            "the lists)"),
    Setting("recall.salience_bound", d.RECALL_SALIENCE_BOUND, "salience multiplies relevance by "
            "at most 1 +- this"),
    Setting("recall.confidence_bound", d.RECALL_CONFIDENCE_BOUND, "confidence multiplies "
            "relevance by at most 1 +- this"),
    Setting("recall.key_weight", d.RECALL_KEY_WEIGHT, "a learned key's cosine counts at this "
            "fraction of the chunk's own"),
    Setting("recall.cold_factor", d.RECALL_COLD_FACTOR, "relevance of a cold (swept) chunk is "
            "multiplied by this"),
    Setting("recall.key_min_similarity", d.RECALL_KEY_MIN_SIMILARITY, "a learned key answers "
            "only queries this close to its question"),
    Setting("recall.lexical_weight", d.RECALL_LEXICAL_WEIGHT, "weight of full-text matches in "
            "the fusion (0: off)"),
    Setting("recall.vector_weight", d.RECALL_VECTOR_WEIGHT, "weight of vector matches, chunk or "
            "learned key, in the fusion (0: off)"),
    Setting("recall.learned_weight", d.RECALL_LEARNED_WEIGHT, "weight of learned keys' words in "
            "the fusion (0: off)"),

    Setting("learning.credit_rule", d.LEARNING_CREDIT_RULE, "what an outcome without --cited "
            "credits (pulses/credit.py)", tuple(rule.value for rule in CreditRule)),
    Setting("learning.keys", d.LEARNING_KEYS, "credited outcomes teach chunks the query as a key"),
    Setting("learning.share_key_text", d.LEARNING_SHARE_KEY_TEXT, "send queries' words to other "
            "peers (keys' embeddings always go)"),
    Setting("learning.miss_factor", d.LEARNING_MISS_FACTOR, "a miss weakens by this share of "
            "what a hit strengthens"),
    Setting("learning.key_half_life_s", d.LEARNING_KEY_HALF_LIFE_S, "a learned key's weight "
            "halves over this long without reinforcement (0: keys do not fade with time)"),
    Setting("learning.max_keys_per_chunk", d.LEARNING_MAX_KEYS_PER_CHUNK, "learned keys kept per "
            "chunk; the weakest goes first"),
    Setting("learning.fusion", d.LEARNING_FUSION, "cited successes teach how far to trust "
            "vectors against words"),
    Setting("learning.key_gate", d.LEARNING_KEY_GATE, "keys rank only as close to a query as new "
            "questions showed helps"),
    Setting("learning.intrinsic_prior", d.LEARNING_INTRINSIC_PRIOR, "cited successes teach a "
            "prior over the candidates' sizes"),
    Setting("learning.cold_weight", d.LEARNING_COLD_WEIGHT, "cited successes teach how far a "
            "swept chunk falls (false: recall.cold_factor holds)"),
    Setting("learning.implicit_saved", d.LEARNING_IMPLICIT_SAVED, "weight of a save, in a "
            "session, that reproduces a recalled chunk"),
    Setting("learning.implicit_summary", d.LEARNING_IMPLICIT_SUMMARY, "weight of a session "
            "summary that names a recalled chunk"),
    Setting("learning.implicit_asked_again", d.LEARNING_IMPLICIT_ASKED_AGAIN, "weight of asking "
            "again in the session: the earlier top result did not serve"),
    Setting("learning.implicit_session", d.LEARNING_IMPLICIT_SESSION, "weight of a result "
            "reported for a whole session (pulse-emit outcome --session)"),
    Setting("learning.implicit_window_s", d.LEARNING_IMPLICIT_WINDOW_S, "how long after a "
            "recall its session's actions still count"),
    Setting("learning.session_window_s", d.LEARNING_SESSION_WINDOW_S, "how far back a "
            "session's reported result reaches"),
    Setting("learning.asked_again_similarity", d.LEARNING_ASKED_AGAIN_SIMILARITY, "a recall "
            "this close to an earlier one of its session asks again"),

    Setting("efficacy.enabled", d.EFFICACY_ENABLED, "compute the three efficacy metrics, as "
            "observations and gauges"),
    Setting("efficacy.interval_s", d.EFFICACY_INTERVAL_S, "seconds between computations of the "
            "efficacy metrics"),
    Setting("efficacy.window_s", d.EFFICACY_WINDOW_S, "how far back, in seconds, the efficacy "
            "metrics look for decisions"),

    Setting("audit.enabled", d.AUDIT_ENABLED, "checkpoint the journal and delete what "
            "retention lets go"),
    Setting("audit.checkpoint_interval_s", d.AUDIT_CHECKPOINT_INTERVAL_S, "at most one "
            "checkpoint of the replay state this often"),
    Setting("audit.retention_s", d.AUDIT_RETENTION_S, "journal steps older than this, covered "
            "by a checkpoint, go"),

    Setting("metrics.listen", d.METRICS_LISTEN, "HOST:PORT of the Prometheus metrics, /healthz "
            "and /readyz (empty: none)"),

    Setting("api.enabled", d.API_ENABLED, "serve recall, save, outcomes... over local HTTP"),
    Setting("api.host", d.API_HOST, "the address TCP is served on"),
    Setting("api.port", d.API_PORT, "TCP port, e.g. 9465 (0: no TCP, the Unix socket only)"),
    Setting("api.unix_socket", d.API_UNIX_SOCKET, f"the Unix socket, mode {d.API_SOCKET_MODE:04o} "
            f"({_IN_DATA_DIR}; empty: none)"),
    Setting("api.token", "", "bearer token required on TCP, which no file mode guards "
            "(empty: none)"),
    Setting("api.token_file", "", "or: a file holding it (not both)"),
    Setting("api.workers", d.API_WORKERS, "requests answered side by side at most"),
    Setting("api.access_log", d.API_ACCESS_LOG, "a line per request (logger "
            "dreamcycle.api.access)"),

    Setting("signing.key_file", d.SIGNING_KEY_FILE, "this peer's Ed25519 private key, mode "
            f"{d.KEY_FILE_MODE:04o} ({_IN_DATA_DIR})"),
    Setting("signing.keyring_file", d.SIGNING_KEYRING_FILE, "trusted peers' public keys "
            f"({_IN_DATA_DIR})"),
    Setting("signing.mode", d.SIGNING_MODE, "strict: only entries signed by a trusted key; permissive "
            "(migration only): unsigned entries too", d.SIGNING_MODES),

    Setting("log.level", d.LOG_LEVEL, "the least severe level logged",
            ("debug", "info", "warning", "error")),
    Setting("log.format", d.LOG_FORMAT, "a JSON object per line, or plain text", ("json", "text")),

    Setting("clock.source", d.CLOCK_SOURCE, "the system clock, or a file of simulated time "
            "(tests, benchmarks)", d.CLOCK_SOURCES),
    Setting("clock.file", "", 'with source = "file": it holds milliseconds since the Unix '
            "epoch, read on every use", example="/tmp/dreamcycle-clock"),
    Setting("clock.max_step_s", d.CLOCK_MAX_STEP_S, "the most time one cycle accounts for: "
            "decay, sweeps and retention follow a clock that jumped by at most this much"),
)  # fmt: skip

BY_NAME: Final = {setting.name: setting for setting in SETTINGS}
#: Tables still read under an earlier name, with a warning that names the new one. The
#: signing settings were `[keys]` until learned retrieval keys (`learning.keys`) made the
#: word mean two things.
RENAMED_TABLES: Final = {"keys": "signing"}
# Lower-cased: the loader has always matched a variable's name after the prefix in any case.
_BY_VARIABLE: Final = {setting.env.lower(): setting for setting in SETTINGS}


def default(name: str) -> Any:
    """The default of setting `name`, for the section field that holds it."""
    return BY_NAME[name].default


def named_by(variable: str) -> Setting | None:
    """The setting an environment variable overrides, or None."""
    return _BY_VARIABLE.get(variable.lower())


def renamed_variable(variable: str) -> str | None:
    """The variable a renamed table's variable now is (DREAMCYCLE_KEYS_MODE ->
    DREAMCYCLE_SIGNING_MODE), or None when `variable` names no renamed table."""
    for old, new in RENAMED_TABLES.items():
        prefix = f"{d.ENV_PREFIX}{old.upper()}_"
        if variable.upper().startswith(prefix):
            return f"{d.ENV_PREFIX}{new.upper()}_{variable[len(prefix) :]}"
    return None


def keys_in(table: str) -> list[str]:
    """The keys of a TOML table ("" for the file's top level): settings and sub-tables."""
    prefix = f"{table}." if table else ""
    return sorted(
        {s.name[len(prefix) :].split(".")[0] for s in SETTINGS if s.name.startswith(prefix)}
    )


def value_of(config: object, name: str) -> Any:
    """The value of setting `name` in a Config."""
    return functools.reduce(getattr, name.split("."), config)


def option_help(name: str, *, default_of: bool = False) -> str:
    """The help of a command-line option that sets setting `name` for this run, or that
    takes it as its default."""
    setting = BY_NAME[name]
    return f"{setting.help} ({'default: ' if default_of else ''}{setting.name})"
