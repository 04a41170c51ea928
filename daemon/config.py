"""TOML configuration with environment overrides, validated with errors that name the key.

Precedence: defaults < TOML file < environment (DREAMCYCLE_<SECTION>_<KEY>) < CLI flags.
Every default is read from daemon/defaults.py. One module, because the loader walks these
sections' fields and type hints and their checks raise its errors; without the loader the
sections alone are still some 500 lines.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import os
import re
import socket
import tomllib
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Union, get_args, get_origin, get_type_hints
from urllib.parse import SplitResult, urlsplit

from dreamcycle.daemon import defaults
from dreamcycle.daemon.service.cycle_thread import CPU_PRIORITIES
from dreamcycle.pulses.credit import CreditRule
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, preview, validate_parameters
from dreamcycle.pulses.ranking import InvalidRanking, RankingWeights
from dreamcycle.pulses.sweep import SweepMix
from dreamcycle.store.database import CHUNK_KINDS
from dreamcycle.zeitgeist.entries import SegmentLimits


class ConfigError(ValueError):
    """A bad configuration value; the message names the key, its source and the rule."""


_PEER_ID = re.compile(r"^[A-Za-z0-9_.]{1,64}$")
#: A host name as botocore accepts one in an endpoint URL: dot-separated labels of letters,
#: digits and '-' (not at either end), at most 63 characters each.
_HOST_NAME: Final = re.compile(r"^((?!-)[A-Za-z0-9-]{1,63}(?<!-)\.)*(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")
_HOST_NAME_MAX_CHARS: Final = 255
_ENDPOINT_SCHEMES: Final = ("http", "https")
_REDIS_SCHEMES: Final = ("redis", "rediss", "unix")
#: Tighter bounds than CONFIG_MAX_COUNT, for the counts that have one.
_COUNT_BOUNDS: Final[Mapping[str, tuple[int, str]]] = {
    "embedding.threads": (defaults.CONFIG_MAX_THREADS, " threads"),
    "api.workers": (defaults.CONFIG_MAX_THREADS, " threads"),
}


@dataclass
class PeerConfig:
    id: str = ""
    data_dir: str = defaults.DATA_DIR

    def check(self) -> None:
        if not _PEER_ID.match(self.id):
            raise ConfigError(
                f"peer.id {self.id!r} must be 1-64 characters of letters, digits, '_' or '.'"
            )
        # An empty path is the current directory: the database would land wherever the
        # command happens to run.
        if not self.data_dir.strip():
            raise ConfigError(
                f"peer.data_dir {self.data_dir!r} is empty: name the data directory "
                f"(default {defaults.DATA_DIR})"
            )
        if "\0" in self.data_dir:
            raise ConfigError(
                f"peer.data_dir {self.data_dir!r} is not a usable path: it holds a NUL"
            )


@dataclass
class CycleConfig:
    interval_s: float = defaults.CYCLE_INTERVAL_S
    max_segments: int = defaults.MAX_SEGMENTS_PER_CYCLE
    max_embed: int = defaults.MAX_EMBED_PER_CYCLE
    give_way_s: float = defaults.CYCLE_GIVE_WAY_S
    cpu_priority: str = defaults.CYCLE_CPU_PRIORITY

    def check(self) -> None:
        _positive("cycle.interval_s", self.interval_s)
        if self.cpu_priority not in CPU_PRIORITIES:
            raise ConfigError(
                f"cycle.cpu_priority must be one of {', '.join(CPU_PRIORITIES)}, "
                f"got {self.cpu_priority!r}"
            )
        _positive("cycle.max_segments", self.max_segments)
        _positive("cycle.max_embed", self.max_embed)
        if not 0 <= self.give_way_s <= defaults.CYCLE_MAX_GIVE_WAY_S:
            raise ConfigError(
                f"cycle.give_way_s must be in [0, {defaults.CYCLE_MAX_GIVE_WAY_S:g}] seconds, "
                f"got {self.give_way_s}"
            )


@dataclass
class S3Config:
    bucket: str = ""
    prefix: str = defaults.S3_PREFIX
    endpoint_url: str = ""
    region: str = defaults.S3_REGION


@dataclass
class RedisConfig:
    url: str = defaults.REDIS_URL
    prefix: str = defaults.REDIS_PREFIX


@dataclass
class ZeitgeistConfig:
    backend: str = "dir"
    dir: str = ""
    window_s: float = defaults.ZEITGEIST_WINDOW_S
    liveness_timeout_s: float = defaults.LIVENESS_TIMEOUT_S
    compaction_interval_s: float = defaults.COMPACTION_INTERVAL_S
    adopt_remote_chunks: bool = False
    rollups: bool = defaults.ZEITGEIST_ROLLUPS
    max_segment_bytes: int = defaults.ZEITGEIST_MAX_SEGMENT_BYTES
    max_segment_expanded_bytes: int = defaults.ZEITGEIST_MAX_SEGMENT_EXPANDED_BYTES
    max_segment_lines: int = defaults.ZEITGEIST_MAX_SEGMENT_LINES
    max_snapshot_bytes: int = defaults.ZEITGEIST_MAX_SNAPSHOT_BYTES
    max_snapshot_expanded_bytes: int = defaults.ZEITGEIST_MAX_SNAPSHOT_EXPANDED_BYTES
    max_snapshot_lines: int = defaults.ZEITGEIST_MAX_SNAPSHOT_LINES
    s3: S3Config = field(default_factory=S3Config)
    redis: RedisConfig = field(default_factory=RedisConfig)

    def check(self) -> None:
        _one_of("zeitgeist.backend", self.backend, ("dir", "s3", "redis"))
        _positive("zeitgeist.window_s", self.window_s)
        _positive("zeitgeist.liveness_timeout_s", self.liveness_timeout_s)
        _positive("zeitgeist.compaction_interval_s", self.compaction_interval_s)
        for kind in ("segment", "snapshot"):
            for limit in ("bytes", "expanded_bytes", "lines"):
                name = f"max_{kind}_{limit}"
                _positive(f"zeitgeist.{name}", getattr(self, name))
        if self.max_segment_lines <= defaults.MAX_ENTRIES_PER_SEGMENT:
            # A peer's own segments hold up to that many entries and a seal line.
            raise ConfigError(
                f"zeitgeist.max_segment_lines must be > {defaults.MAX_ENTRIES_PER_SEGMENT} "
                f"(the entries a cycle publishes in one segment), got {self.max_segment_lines}"
            )
        if self.backend == "s3" and not self.s3.bucket:
            raise ConfigError("zeitgeist.s3.bucket must be set when zeitgeist.backend = 's3'")
        if self.backend == "s3" and self.s3.endpoint_url:
            _check_endpoint_url("zeitgeist.s3.endpoint_url", self.s3.endpoint_url)
        if self.backend == "redis":
            _check_redis_url("zeitgeist.redis.url", self.redis.url)

    def segment_limits(self) -> SegmentLimits:
        return SegmentLimits(
            self.max_segment_bytes, self.max_segment_expanded_bytes, self.max_segment_lines
        )

    def snapshot_limits(self) -> SegmentLimits:
        return SegmentLimits(
            self.max_snapshot_bytes, self.max_snapshot_expanded_bytes, self.max_snapshot_lines
        )


@dataclass
class EmbeddingConfig:
    model: str = defaults.EMBEDDING_MODEL
    batch_size: int = defaults.EMBED_BATCH_SIZE
    threads: int = defaults.EMBEDDING_THREADS

    def check(self) -> None:
        _positive("embedding.batch_size", self.batch_size)
        if self.threads < 0:
            raise ConfigError(f"embedding.threads must be >= 0, got {self.threads}")


@dataclass
class IndexConfig:
    m: int = defaults.INDEX_M
    ef_construction: int = defaults.INDEX_EF_CONSTRUCTION
    ef: int = defaults.INDEX_EF
    save_interval_s: float = defaults.INDEX_SAVE_INTERVAL_S

    def check(self) -> None:
        _positive("index.m", self.m)
        _positive("index.ef_construction", self.ef_construction)
        _positive("index.ef", self.ef)
        if not (math.isfinite(self.save_interval_s) and self.save_interval_s >= 0):
            raise ConfigError(
                f"index.save_interval_s must be finite and >= 0, got {self.save_interval_s}"
            )


@dataclass
class PulsesConfig:
    update_rule: str = defaults.UPDATE_RULE
    strength: float = defaults.PULSE_STRENGTH
    sigma: float = defaults.PULSE_SIGMA
    max_hops: int = defaults.PULSE_MAX_HOPS
    k: int = defaults.PULSE_K
    decay_per_hop: float = defaults.PULSE_DECAY_PER_HOP
    ttl_s: float = defaults.PULSE_TTL_S
    outcome_wait_s: float = defaults.OUTCOME_WAIT_S
    origin_budget: float = defaults.PULSE_ORIGIN_BUDGET

    def check(self) -> None:
        _one_of("pulses.update_rule", self.update_rule, ("bfs", "literal"))
        _positive("pulses.ttl_s", self.ttl_s)
        _positive("pulses.outcome_wait_s", self.outcome_wait_s)
        _positive("pulses.origin_budget", self.origin_budget)
        try:  # the defaults of `pulse-emit pulse` must make a pulse every peer accepts
            validate_parameters(
                kind=PulseKind.REWARD,
                strength=self.strength,
                sigma=self.sigma,
                max_hops=self.max_hops,
                k=self.k,
                decay_per_hop=self.decay_per_hop,
                ttl_s=self.ttl_s,
            )
        except InvalidPulse as exc:
            # Every message starts with the field it is about; ttl is the key ttl_s.
            about = str(exc).split(" ", 1)[0]
            key = f"pulses.{'ttl_s' if about == 'ttl' else about}"
            raise ConfigError(f"{key} makes pulses no peer accepts: {exc}") from None


@dataclass
class DownscaleConfig:
    enabled: bool = defaults.DOWNSCALE_ENABLED
    fact_half_life_s: float = defaults.HALF_LIFE_S["fact"]
    preference_half_life_s: float = defaults.HALF_LIFE_S["preference"]
    insight_half_life_s: float = defaults.HALF_LIFE_S["insight"]
    summary_half_life_s: float = defaults.HALF_LIFE_S["summary"]
    note_half_life_s: float = defaults.HALF_LIFE_S["note"]
    #: How much stability stretches a memory's half-life (0: stability changes nothing).
    stability_gain: float = defaults.DOWNSCALE_STABILITY_GAIN
    min_step_s: float = defaults.DOWNSCALE_MIN_STEP_S
    max_chunks_per_cycle: int = defaults.DOWNSCALE_MAX_CHUNKS_PER_CYCLE

    def check(self) -> None:
        for kind in CHUNK_KINDS:
            _positive(f"downscale.{kind}_half_life_s", self.half_life(kind))
        if not (math.isfinite(self.min_step_s) and self.min_step_s >= 0):
            raise ConfigError(
                f"downscale.min_step_s must be finite and >= 0, got {self.min_step_s}"
            )
        _positive("downscale.max_chunks_per_cycle", self.max_chunks_per_cycle)
        if not (math.isfinite(self.stability_gain) and self.stability_gain >= 0):
            raise ConfigError(
                f"downscale.stability_gain must be finite and >= 0, got {self.stability_gain}"
            )

    def half_life(self, kind: str) -> float:
        return float(getattr(self, f"{kind}_half_life_s"))


@dataclass
class SweepConfig:
    enabled: bool = defaults.SWEEP_ENABLED
    percentile: float = defaults.SWEEP_PERCENTILE
    min_population: int = defaults.SWEEP_MIN_POPULATION
    interval_s: float = defaults.SWEEP_INTERVAL_S
    dry_run: bool = defaults.SWEEP_DRY_RUN
    grace_s: float = defaults.SWEEP_GRACE_S
    cold_retention_s: float = defaults.SWEEP_COLD_RETENTION_S
    salience_share: float = defaults.SWEEP_SALIENCE_SHARE
    information_share: float = defaults.SWEEP_INFORMATION_SHARE
    importance_share: float = defaults.SWEEP_IMPORTANCE_SHARE
    prune_gate: bool = defaults.SWEEP_PRUNE_GATE
    gate_decisions: int = defaults.SWEEP_GATE_DECISIONS
    gate_window_s: float = defaults.SWEEP_GATE_WINDOW_S

    def check(self) -> None:
        if not 0 < self.percentile < 100:
            raise ConfigError(f"sweep.percentile must be in (0, 100), got {self.percentile}")
        if self.min_population < 0:
            raise ConfigError(f"sweep.min_population must be >= 0, got {self.min_population}")
        if self.interval_s < 0:
            raise ConfigError(f"sweep.interval_s must be >= 0, got {self.interval_s}")
        for name in ("grace_s", "salience_share", "information_share", "importance_share"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"sweep.{name} must be >= 0, got {getattr(self, name)}")
        if self.salience_share + self.information_share + self.importance_share <= 0:
            raise ConfigError("sweep.salience_share, information_share, importance_share are all 0")
        _positive("sweep.cold_retention_s", self.cold_retention_s)
        _positive("sweep.gate_window_s", self.gate_window_s)
        if self.gate_decisions < 0:
            raise ConfigError(f"sweep.gate_decisions must be >= 0, got {self.gate_decisions}")

    def mix(self) -> SweepMix:
        return SweepMix(self.salience_share, self.information_share, self.importance_share)


@dataclass
class RecallConfig:
    top_k: int = defaults.RECALL_TOP_K
    candidates: int = defaults.RECALL_CANDIDATES
    exact_filter_scale: float = defaults.RECALL_EXACT_FILTER_SCALE
    cold_graph_from: int = defaults.RECALL_COLD_GRAPH_FROM
    rrf_k: float = defaults.RECALL_RRF_K
    salience_bound: float = defaults.RECALL_SALIENCE_BOUND
    confidence_bound: float = defaults.RECALL_CONFIDENCE_BOUND
    key_weight: float = defaults.RECALL_KEY_WEIGHT
    cold_factor: float = defaults.RECALL_COLD_FACTOR
    key_min_similarity: float = defaults.RECALL_KEY_MIN_SIMILARITY
    #: Weights of the two lists in the fusion; 0 turns a retriever off (for comparisons).
    lexical_weight: float = defaults.RECALL_LEXICAL_WEIGHT
    vector_weight: float = defaults.RECALL_VECTOR_WEIGHT
    learned_weight: float = defaults.RECALL_LEARNED_WEIGHT

    def check(self) -> None:
        _positive("recall.top_k", self.top_k)
        if self.top_k > defaults.RECALL_MAX_TOP_K:
            raise ConfigError(
                f"recall.top_k must be <= {defaults.RECALL_MAX_TOP_K}, got {self.top_k}"
            )
        _positive("recall.candidates", self.candidates)
        if not self.exact_filter_scale >= 0:
            raise ConfigError(
                f"recall.exact_filter_scale must be >= 0, got {self.exact_filter_scale}"
            )
        if self.cold_graph_from < 0:
            raise ConfigError(
                f"recall.cold_graph_from must be >= 0 (0: always exact), got {self.cold_graph_from}"
            )
        if not -1.0 <= self.key_min_similarity <= 1.0:
            raise ConfigError(
                f"recall.key_min_similarity must be in [-1, 1], got {self.key_min_similarity}"
            )
        try:
            self.weights().validate()
        except InvalidRanking as exc:
            raise ConfigError(f"recall.{exc}") from None

    def weights(self) -> RankingWeights:
        return RankingWeights(
            rrf_k=self.rrf_k,
            salience_bound=self.salience_bound,
            confidence_bound=self.confidence_bound,
            key_weight=self.key_weight,
            cold_factor=self.cold_factor,
            lexical_weight=self.lexical_weight,
            vector_weight=self.vector_weight,
            learned_weight=self.learned_weight,
        )


@dataclass
class LearningConfig:
    credit_rule: str = defaults.LEARNING_CREDIT_RULE
    keys: bool = defaults.LEARNING_KEYS
    share_key_text: bool = defaults.LEARNING_SHARE_KEY_TEXT
    miss_factor: float = defaults.LEARNING_MISS_FACTOR
    key_half_life_s: float = defaults.LEARNING_KEY_HALF_LIFE_S
    max_keys_per_chunk: int = defaults.LEARNING_MAX_KEYS_PER_CHUNK
    fusion: bool = defaults.LEARNING_FUSION
    key_gate: bool = defaults.LEARNING_KEY_GATE
    intrinsic_prior: bool = defaults.LEARNING_INTRINSIC_PRIOR
    cold_weight: bool = defaults.LEARNING_COLD_WEIGHT
    implicit_saved: float = defaults.LEARNING_IMPLICIT_SAVED
    implicit_summary: float = defaults.LEARNING_IMPLICIT_SUMMARY
    implicit_asked_again: float = defaults.LEARNING_IMPLICIT_ASKED_AGAIN
    implicit_session: float = defaults.LEARNING_IMPLICIT_SESSION
    implicit_window_s: float = defaults.LEARNING_IMPLICIT_WINDOW_S
    session_window_s: float = defaults.LEARNING_SESSION_WINDOW_S
    asked_again_similarity: float = defaults.LEARNING_ASKED_AGAIN_SIMILARITY

    def check(self) -> None:
        _one_of("learning.credit_rule", self.credit_rule, tuple(r.value for r in CreditRule))
        if not 0 <= self.miss_factor <= 1:
            raise ConfigError(f"learning.miss_factor must be in [0, 1], got {self.miss_factor}")
        for name in (
            "implicit_saved",
            "implicit_summary",
            "implicit_asked_again",
            "implicit_session",
        ):
            value = getattr(self, name)
            if not 0 <= value <= 1:
                raise ConfigError(f"learning.{name} must be in [0, 1], got {value}")
        _positive("learning.implicit_window_s", self.implicit_window_s)
        _positive("learning.session_window_s", self.session_window_s)
        if not -1 <= self.asked_again_similarity <= 1:
            raise ConfigError(
                "learning.asked_again_similarity must be in [-1, 1], "
                f"got {self.asked_again_similarity}"
            )
        _positive("learning.key_half_life_s", self.key_half_life_s)
        _positive("learning.max_keys_per_chunk", self.max_keys_per_chunk)


@dataclass
class EfficacyConfig:
    enabled: bool = defaults.EFFICACY_ENABLED
    interval_s: float = defaults.EFFICACY_INTERVAL_S
    window_s: float = defaults.EFFICACY_WINDOW_S

    def check(self) -> None:
        _positive("efficacy.interval_s", self.interval_s)
        _positive("efficacy.window_s", self.window_s)


@dataclass
class AuditConfig:
    enabled: bool = defaults.AUDIT_ENABLED
    checkpoint_interval_s: float = defaults.AUDIT_CHECKPOINT_INTERVAL_S
    retention_s: float = defaults.AUDIT_RETENTION_S

    def check(self) -> None:
        _positive("audit.checkpoint_interval_s", self.checkpoint_interval_s)
        _positive("audit.retention_s", self.retention_s)


@dataclass
class MetricsConfig:
    listen: str = defaults.METRICS_LISTEN

    def check(self) -> None:
        if self.listen:
            host, _, port = self.listen.rpartition(":")
            # isdigit() alone would let through digits int() refuses, such as '²'.
            if not host or not (port.isascii() and port.isdigit()) or not 0 <= int(port) <= 65535:
                raise ConfigError(f"metrics.listen {self.listen!r} must be HOST:PORT (or empty)")

    def address(self) -> tuple[str, int] | None:
        if not self.listen:
            return None
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass
class ApiConfig:
    enabled: bool = defaults.API_ENABLED
    host: str = defaults.API_HOST
    port: int = defaults.API_PORT
    #: Relative paths are inside the data directory; empty: no Unix socket.
    unix_socket: str = defaults.API_UNIX_SOCKET
    #: Bearer token required on TCP (the Unix socket is guarded by its file mode).
    token: str = ""
    token_file: str = ""
    workers: int = defaults.API_WORKERS
    #: A line per request on the dreamcycle.api.access logger.
    access_log: bool = defaults.API_ACCESS_LOG

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"api.port must be in 0..65535, got {self.port}")
        _positive("api.workers", self.workers)
        if self.token and self.token_file:
            raise ConfigError("api.token and api.token_file are both set; set one")
        if self.enabled and not self.listens():
            raise ConfigError("api.port is 0 and api.unix_socket is empty: nothing to listen on")
        if self.token_file:
            self.bearer_token()

    def listens(self) -> bool:
        """Whether an address is left to serve on: a TCP port or a socket path."""
        return bool(self.port or self.unix_socket)

    def bearer_token(self) -> str:
        """The token TCP requests must carry ("" when none is required)."""
        if not self.token_file:
            return self.token
        try:
            token = Path(os.path.expanduser(self.token_file)).read_text(encoding="utf-8").strip()
        # ValueError: a NUL in the path, or a file that is not UTF-8 text.
        except (OSError, ValueError) as exc:
            raise ConfigError(f"api.token_file {self.token_file!r} cannot be read: {exc}") from None
        if not token:
            raise ConfigError(f"api.token_file {self.token_file!r} is empty")
        return token


@dataclass
class LogConfig:
    level: str = defaults.LOG_LEVEL
    format: str = defaults.LOG_FORMAT

    def check(self) -> None:
        _one_of("log.level", self.level, ("debug", "info", "warning", "error"))
        _one_of("log.format", self.format, ("json", "text"))


@dataclass
class ClockConfig:
    source: str = defaults.CLOCK_SOURCE
    file: str = ""  # with source = "file": holds milliseconds since the Unix epoch
    #: The most time one cycle accounts for, whatever the clock jumped (daemon/cycle/accounted.py).
    max_step_s: float = defaults.CLOCK_MAX_STEP_S

    def check(self) -> None:
        _one_of("clock.source", self.source, defaults.CLOCK_SOURCES)
        if not (math.isfinite(self.max_step_s) and self.max_step_s > 0):
            raise ConfigError(f"clock.max_step_s must be finite and > 0, got {self.max_step_s}")
        if self.source == "file" and not self.file:
            raise ConfigError("clock.file must be set when clock.source = 'file'")


@dataclass
class KeysConfig:
    #: Relative paths are inside the data directory.
    key_file: str = defaults.KEYS_KEY_FILE
    keyring_file: str = defaults.KEYS_KEYRING_FILE
    mode: str = defaults.KEYS_MODE

    def check(self) -> None:
        _one_of("keys.mode", self.mode, defaults.KEYS_MODES)
        if not self.key_file or not self.keyring_file:
            raise ConfigError("keys.key_file and keys.keyring_file must not be empty")

    @property
    def strict(self) -> bool:
        return self.mode == "strict"


@dataclass
class Config:
    peer: PeerConfig = field(default_factory=PeerConfig)
    cycle: CycleConfig = field(default_factory=CycleConfig)
    zeitgeist: ZeitgeistConfig = field(default_factory=ZeitgeistConfig)
    embedding: EmbeddingConfig = field(default_factory=EmbeddingConfig)
    index: IndexConfig = field(default_factory=IndexConfig)
    pulses: PulsesConfig = field(default_factory=PulsesConfig)
    downscale: DownscaleConfig = field(default_factory=DownscaleConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    recall: RecallConfig = field(default_factory=RecallConfig)
    learning: LearningConfig = field(default_factory=LearningConfig)
    efficacy: EfficacyConfig = field(default_factory=EfficacyConfig)
    audit: AuditConfig = field(default_factory=AuditConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    api: ApiConfig = field(default_factory=ApiConfig)
    keys: KeysConfig = field(default_factory=KeysConfig)
    log: LogConfig = field(default_factory=LogConfig)
    clock: ClockConfig = field(default_factory=ClockConfig)

    # ---- derived paths ------------------------------------------------------------

    @property
    def data_dir(self) -> Path:
        return Path(os.path.expanduser(self.peer.data_dir))

    @property
    def database_path(self) -> Path:
        return self.data_dir / defaults.DATABASE_FILE

    @property
    def index_path(self) -> Path:
        return self.data_dir / defaults.INDEX_FILE

    @property
    def lock_path(self) -> Path:
        return self.data_dir / defaults.LOCK_FILE

    @property
    def api_socket_path(self) -> Path | None:
        if not self.api.unix_socket:
            return None
        return self.data_dir / os.path.expanduser(self.api.unix_socket)

    @property
    def key_path(self) -> Path:
        return self.data_dir / os.path.expanduser(self.keys.key_file)

    @property
    def keyring_path(self) -> Path:
        return self.data_dir / os.path.expanduser(self.keys.keyring_file)

    @property
    def zeitgeist_dir(self) -> Path:
        if self.zeitgeist.dir:
            return Path(os.path.expanduser(self.zeitgeist.dir))
        return self.data_dir / defaults.ZEITGEIST_DIR

    def rollup_wait_ms(self) -> int:
        """How long a reader waits for a roll-up to hold a new segment: a few of the roll-up
        writer's cycles (taken to run at this peer's interval)."""
        return max(1, int(defaults.ROLLUP_WAIT_INTERVALS * self.cycle.interval_s * 1000))

    def check(self) -> None:
        for section in dataclasses.fields(self):
            value = getattr(self, section.name)
            if hasattr(value, "check"):
                value.check()
        # After the sections' own rules, whose messages say more where they apply.
        _check_magnitudes(self, "")


def default_peer_id() -> str:
    """The host name, reduced to the characters a peer id may hold."""
    name = re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64]
    return name or "peer"


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> Config:
    """Defaults, then the TOML file, then DREAMCYCLE_* variables, then `overrides` ("section.key")."""
    env = os.environ if environ is None else environ
    config = Config()
    sources: dict[str, str] = {}  # dotted key -> where its value came from
    if path is None and env.get(defaults.CONFIG_ENV):
        path = Path(env[defaults.CONFIG_ENV])
    if path is not None:
        if "\0" in str(path):
            raise ConfigError(f"config file {str(path)!r} is not a usable path: it holds a NUL")
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        # tomllib raises a plain ValueError for an integer of more than 4300 digits.
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"config file {path} cannot be read: {exc}") from None
        _merge(config, data, source=str(path), prefix="", sources=sources)
    _apply_environment(config, env, sources)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(config, dotted, value, source="command line", sources=sources)
    if not config.peer.id:
        config.peer.id = default_peer_id()
    if "api.enabled" not in sources and not config.api.listens():
        # On by default; off where neither a port nor a socket is left to serve on. Asked
        # for in so many words, it is refused below instead.
        config.api.enabled = False
    try:
        config.check()
    except ConfigError as exc:
        raise ConfigError(_with_source(str(exc), sources)) from None
    return config


def _with_source(message: str, sources: Mapping[str, str]) -> str:
    """A range error prefixed with where its value was set, like every other config error."""
    key = message.split(" ", 1)[0]
    return f"{sources[key]}: {message}" if key in sources else message


def _merge(
    target: Any, data: Mapping[str, Any], *, source: str, prefix: str, sources: dict[str, str]
) -> None:
    known = {f.name: f for f in dataclasses.fields(target)}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if key not in known:
            raise ConfigError(
                f"{source}: unknown key {dotted!r} (known: {', '.join(sorted(known))})"
            )
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            if not isinstance(value, Mapping):
                raise ConfigError(f"{source}: {dotted!r} must be a table")
            _merge(current, value, source=source, prefix=f"{dotted}.", sources=sources)
        else:
            setattr(target, key, _coerce(type(target), key, value, dotted=dotted, source=source))
            sources[dotted] = source


def _apply_environment(config: Config, env: Mapping[str, str], sources: dict[str, str]) -> None:
    paths = dict(_leaf_paths(config, ""))
    for name, raw in env.items():
        if not name.startswith(defaults.ENV_PREFIX) or name == defaults.CONFIG_ENV:
            continue
        dotted = paths.get(name[len(defaults.ENV_PREFIX) :].lower())
        if dotted is None:
            raise ConfigError(
                f"environment variable {name} does not name a setting "
                f"(expected {defaults.ENV_PREFIX}<SECTION>_<KEY>, e.g. DREAMCYCLE_CYCLE_INTERVAL_S)"
            )
        _set_dotted(config, dotted, raw, source=f"environment variable {name}", sources=sources)


def _leaf_paths(target: Any, prefix: str) -> list[tuple[str, str]]:
    """('zeitgeist_s3_bucket', 'zeitgeist.s3.bucket') for every leaf setting."""
    out: list[tuple[str, str]] = []
    for f in dataclasses.fields(target):
        dotted = f"{prefix}{f.name}"
        value = getattr(target, f.name)
        if dataclasses.is_dataclass(value):
            out.extend(_leaf_paths(value, f"{dotted}."))
        else:
            out.append((dotted.replace(".", "_"), dotted))
    return out


def _set_dotted(
    config: Config, dotted: str, value: Any, *, source: str, sources: dict[str, str]
) -> None:
    *parents, leaf = dotted.split(".")
    target: Any = config
    for part in parents:
        if not hasattr(target, part):
            raise ConfigError(f"{source}: unknown setting {dotted!r}")
        target = getattr(target, part)
    if not dataclasses.is_dataclass(target) or leaf not in {
        f.name for f in dataclasses.fields(target)
    }:
        raise ConfigError(f"{source}: unknown setting {dotted!r}")
    setattr(target, leaf, _coerce(type(target), leaf, value, dotted=dotted, source=source))
    sources[dotted] = source


def _coerce(owner: type, key: str, value: Any, *, dotted: str, source: str) -> Any:
    expected = get_type_hints(owner)[key]
    if get_origin(expected) in (Union, types.UnionType):
        expected = next(a for a in get_args(expected) if a is not type(None))
    try:
        if expected is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
                return True
            if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true or false")
        if expected is int:
            if isinstance(value, bool | float):
                raise ValueError("expected an integer")
            return int(value)
        if expected is float:
            if isinstance(value, bool):
                raise ValueError("expected a number")
            number = float(value)  # OverflowError for an integer beyond 1e308
            if math.isnan(number):
                raise ValueError("NaN is not a valid value")
            return number
        if expected is str:
            if not isinstance(value, str):
                raise ValueError("expected a string")
            return value
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"{source}: {dotted} = {preview(value)}: {exc}") from None
    raise ConfigError(f"{source}: {dotted} has an unsupported type")


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be > 0, got {value}")
    # Only floats: math.isfinite cannot take an integer beyond 1e308, and every int is finite.
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number, got {value}")


def _check_magnitudes(target: Any, prefix: str) -> None:
    """Every number finite, every duration, count and size within its CONFIG_MAX_*: what
    no section's rule bounds must still not overflow where it is used."""
    hints = get_type_hints(type(target))
    for f in dataclasses.fields(target):
        key = f"{prefix}{f.name}"
        value = getattr(target, f.name)
        if dataclasses.is_dataclass(value):
            _check_magnitudes(value, f"{key}.")
        elif hints[f.name] is float:
            if not math.isfinite(value):
                raise ConfigError(f"{key} must be a finite number, got {value}")
            if f.name.endswith("_s") and value > defaults.CONFIG_MAX_SECONDS:
                raise ConfigError(
                    f"{key} must be at most {defaults.CONFIG_MAX_SECONDS:.0f} seconds "
                    f"({defaults.CONFIG_MAX_YEARS} years), got {value:g}"
                )
        elif hints[f.name] is int:
            if key in _COUNT_BOUNDS:
                bound, unit = _COUNT_BOUNDS[key]
            elif f.name.endswith("_bytes"):
                bound, unit = defaults.CONFIG_MAX_BYTES, " bytes"
            else:
                bound, unit = defaults.CONFIG_MAX_COUNT, ""
            if value > bound:
                raise ConfigError(f"{key} must be at most {bound}{unit}, got {value}")


def _check_endpoint_url(key: str, url: str) -> None:
    """An http(s) URL with a host botocore accepts, and a port if any: botocore refuses
    anything else only when the daemon starts, with a traceback."""
    parts = _split_url(key, url)
    host = parts.hostname or ""
    if parts.scheme not in _ENDPOINT_SCHEMES or not host:
        raise ConfigError(
            f"{key} {url!r} must be an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:9000), or empty for AWS S3"
        )
    if not (_is_ip_address(host) or (len(host) <= _HOST_NAME_MAX_CHARS and _HOST_NAME.match(host))):
        raise ConfigError(
            f"{key} {url!r}: {host!r} is not a host name (letters, digits, '-' and '.') "
            "or an IP address"
        )


def _check_redis_url(key: str, url: str) -> None:
    """A URL redis-py can connect with: redis://, rediss:// or unix://, a numeric port."""
    parts = _split_url(key, url)
    if parts.scheme not in _REDIS_SCHEMES:
        raise ConfigError(
            f"{key} {url!r} is not a redis:// URL (redis://HOST:PORT/DB, rediss://..., or "
            "unix:///path/to/socket)"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ConfigError(f"{key} {url!r} names no socket: unix:///path/to/socket")
    if parts.query:
        # Only redis-py knows which query options it takes and their types; it is imported
        # for the rare URL that has some.
        from redis import connection

        parse: Callable[[str], object] = connection.parse_url
        try:
            parse(url)
        except ValueError as exc:
            raise ConfigError(f"{key} {url!r} is not usable: {exc}") from None


def _split_url(key: str, url: str) -> SplitResult:
    """The URL's parts, its port checked (urlsplit checks it only when it is read)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - read for its check: a number in 0..65535
    except ValueError as exc:
        raise ConfigError(f"{key} {url!r} is not a usable URL: {exc}") from None
    return parts


def _is_ip_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _one_of(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(f"{name} must be one of {', '.join(choices)}; got {value!r}")
