"""The sections about where and how this peer runs: its id and data directory, the cycle's
pace, the shared log (zeitgeist), the embedding model and index, the metrics endpoint,
the API, the signing keys, the log and the clock; each with the rules its values must
keep together. Fields take their defaults from the table (settings.py), and values with
choices are checked against it.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.checks import (
    ConfigError,
    check_endpoint_url,
    check_redis_url,
    finite_non_negative,
    positive,
)
from dreamcycle.daemon.config.settings import default
from dreamcycle.zeitgeist.entries import SegmentLimits

_PEER_ID: Final = re.compile(r"^[A-Za-z0-9_.]{1,64}$")


@dataclass
class PeerConfig:
    id: str = default("peer.id")
    data_dir: str = default("peer.data_dir")

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
    interval_s: float = default("cycle.interval_s")
    max_segments: int = default("cycle.max_segments")
    max_embed: int = default("cycle.max_embed")
    give_way_s: float = default("cycle.give_way_s")
    cpu_priority: str = default("cycle.cpu_priority")

    def check(self) -> None:
        positive("cycle.interval_s", self.interval_s)
        positive("cycle.max_segments", self.max_segments)
        positive("cycle.max_embed", self.max_embed)
        if not 0 <= self.give_way_s <= defaults.CYCLE_MAX_GIVE_WAY_S:
            raise ConfigError(
                f"cycle.give_way_s must be in [0, {defaults.CYCLE_MAX_GIVE_WAY_S:g}] seconds, "
                f"got {self.give_way_s}"
            )


@dataclass
class S3Config:
    bucket: str = default("zeitgeist.s3.bucket")
    prefix: str = default("zeitgeist.s3.prefix")
    endpoint_url: str = default("zeitgeist.s3.endpoint_url")
    region: str = default("zeitgeist.s3.region")


@dataclass
class RedisConfig:
    url: str = default("zeitgeist.redis.url")
    prefix: str = default("zeitgeist.redis.prefix")


@dataclass
class ZeitgeistConfig:
    backend: str = default("zeitgeist.backend")
    dir: str = default("zeitgeist.dir")
    window_s: float = default("zeitgeist.window_s")
    liveness_timeout_s: float = default("zeitgeist.liveness_timeout_s")
    compaction_interval_s: float = default("zeitgeist.compaction_interval_s")
    adopt_remote_chunks: bool = default("zeitgeist.adopt_remote_chunks")
    rollups: bool = default("zeitgeist.rollups")
    max_segment_bytes: int = default("zeitgeist.max_segment_bytes")
    max_segment_expanded_bytes: int = default("zeitgeist.max_segment_expanded_bytes")
    max_segment_lines: int = default("zeitgeist.max_segment_lines")
    max_snapshot_bytes: int = default("zeitgeist.max_snapshot_bytes")
    max_snapshot_expanded_bytes: int = default("zeitgeist.max_snapshot_expanded_bytes")
    max_snapshot_lines: int = default("zeitgeist.max_snapshot_lines")
    s3: S3Config = field(default_factory=S3Config)
    redis: RedisConfig = field(default_factory=RedisConfig)

    def check(self) -> None:
        positive("zeitgeist.window_s", self.window_s)
        positive("zeitgeist.liveness_timeout_s", self.liveness_timeout_s)
        positive("zeitgeist.compaction_interval_s", self.compaction_interval_s)
        for kind in ("segment", "snapshot"):
            for limit in ("bytes", "expanded_bytes", "lines"):
                name = f"max_{kind}_{limit}"
                positive(f"zeitgeist.{name}", getattr(self, name))
        if self.max_segment_lines <= defaults.MAX_ENTRIES_PER_SEGMENT:
            # A peer's own segments hold up to that many entries and a seal line.
            raise ConfigError(
                f"zeitgeist.max_segment_lines must be > {defaults.MAX_ENTRIES_PER_SEGMENT} "
                f"(the entries a cycle publishes in one segment), got {self.max_segment_lines}"
            )
        if self.backend == "s3" and not self.s3.bucket:
            raise ConfigError("zeitgeist.s3.bucket must be set when zeitgeist.backend = 's3'")
        if self.backend == "s3" and self.s3.endpoint_url:
            check_endpoint_url("zeitgeist.s3.endpoint_url", self.s3.endpoint_url)
        if self.backend == "redis":
            check_redis_url("zeitgeist.redis.url", self.redis.url)

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
    model: str = default("embedding.model")
    batch_size: int = default("embedding.batch_size")
    threads: int = default("embedding.threads")

    def check(self) -> None:
        positive("embedding.batch_size", self.batch_size)
        if self.threads < 0:
            raise ConfigError(f"embedding.threads must be >= 0, got {self.threads}")


@dataclass
class IndexConfig:
    m: int = default("index.m")
    ef_construction: int = default("index.ef_construction")
    ef: int = default("index.ef")
    save_interval_s: float = default("index.save_interval_s")

    def check(self) -> None:
        positive("index.m", self.m)
        positive("index.ef_construction", self.ef_construction)
        positive("index.ef", self.ef)
        finite_non_negative("index.save_interval_s", self.save_interval_s)


@dataclass
class MetricsConfig:
    listen: str = default("metrics.listen")

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
    enabled: bool = default("api.enabled")
    host: str = default("api.host")
    port: int = default("api.port")
    unix_socket: str = default("api.unix_socket")
    token: str = default("api.token")
    token_file: str = default("api.token_file")
    workers: int = default("api.workers")
    access_log: bool = default("api.access_log")

    def check(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"api.port must be in 0..65535, got {self.port}")
        positive("api.workers", self.workers)
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
class SigningConfig:
    key_file: str = default("signing.key_file")
    keyring_file: str = default("signing.keyring_file")
    mode: str = default("signing.mode")

    def check(self) -> None:
        if not self.key_file or not self.keyring_file:
            raise ConfigError("signing.key_file and signing.keyring_file must not be empty")

    @property
    def strict(self) -> bool:
        return self.mode == "strict"


@dataclass
class LogConfig:
    level: str = default("log.level")
    format: str = default("log.format")


@dataclass
class ClockConfig:
    source: str = default("clock.source")
    file: str = default("clock.file")
    max_step_s: float = default("clock.max_step_s")

    def check(self) -> None:
        if not (math.isfinite(self.max_step_s) and self.max_step_s > 0):
            raise ConfigError(f"clock.max_step_s must be finite and > 0, got {self.max_step_s}")
        if self.source == "file" and not self.file:
            raise ConfigError("clock.file must be set when clock.source = 'file'")
