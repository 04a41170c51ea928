"""`Config`, the whole configuration: one field per section of the file, in the file's
order, the paths derived from them, and the order its rules are checked in.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.checks import check_choices, check_magnitudes
from dreamcycle.daemon.config.host import (
    ApiConfig,
    ClockConfig,
    CycleConfig,
    EmbeddingConfig,
    IndexConfig,
    LogConfig,
    MetricsConfig,
    PeerConfig,
    SigningConfig,
    ZeitgeistConfig,
)
from dreamcycle.daemon.config.memory import (
    AuditConfig,
    DownscaleConfig,
    EfficacyConfig,
    LearningConfig,
    PulsesConfig,
    RecallConfig,
    SweepConfig,
)


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
    signing: SigningConfig = field(default_factory=SigningConfig)
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
        return self.data_dir / os.path.expanduser(self.signing.key_file)

    @property
    def keyring_path(self) -> Path:
        return self.data_dir / os.path.expanduser(self.signing.keyring_file)

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
            check_choices(self, section.name)
            value = getattr(self, section.name)
            if hasattr(value, "check"):
                value.check()
        # After the sections' own rules, whose messages say more where they apply.
        check_magnitudes(self)
