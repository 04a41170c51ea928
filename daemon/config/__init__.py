"""Configuration: a TOML file with environment overrides, validated with errors that name
the key. This package's public face: `from dreamcycle.daemon.config import Config,
ConfigError, load_config`.

Precedence: defaults < TOML file < environment (DREAMCYCLE_<SECTION>_<KEY>) < CLI flags.
Every setting is stated once, in settings.py's table, its default read from
daemon/defaults; host.py and memory.py hold the sections and their rules, sections.py the
whole `Config`, loading.py the loader, checks.py the rules several settings share.
"""

from dreamcycle.daemon.config.checks import ConfigError
from dreamcycle.daemon.config.host import (
    ApiConfig,
    ClockConfig,
    CycleConfig,
    EmbeddingConfig,
    IndexConfig,
    LogConfig,
    MetricsConfig,
    PeerConfig,
    RedisConfig,
    S3Config,
    SigningConfig,
    ZeitgeistConfig,
)
from dreamcycle.daemon.config.loading import default_peer_id, load_config
from dreamcycle.daemon.config.memory import (
    AuditConfig,
    DownscaleConfig,
    EfficacyConfig,
    LearningConfig,
    PulsesConfig,
    RecallConfig,
    SweepConfig,
)
from dreamcycle.daemon.config.sections import Config

__all__ = [
    "ApiConfig",
    "AuditConfig",
    "ClockConfig",
    "Config",
    "ConfigError",
    "CycleConfig",
    "DownscaleConfig",
    "EfficacyConfig",
    "EmbeddingConfig",
    "IndexConfig",
    "LearningConfig",
    "LogConfig",
    "MetricsConfig",
    "PeerConfig",
    "PulsesConfig",
    "RecallConfig",
    "RedisConfig",
    "S3Config",
    "SigningConfig",
    "SweepConfig",
    "ZeitgeistConfig",
    "default_peer_id",
    "load_config",
]
