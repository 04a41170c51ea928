"""The sections about how memories rise, fall and are found: pulses, decay (downscale),
the sweep to the cold tier, recall's ranking, what outcomes teach (learning), the efficacy
metrics and the journal's audit trail; each with the rules its values must keep together,
and the library objects (ranking weights, the sweep's mix) they make. Fields take their
defaults from the table (settings.py), and values with choices are checked against it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config.checks import ConfigError, finite_non_negative, positive
from dreamcycle.daemon.config.settings import default
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, validate_parameters
from dreamcycle.pulses.ranking import InvalidRanking, RankingWeights
from dreamcycle.pulses.sweep import SweepMix
from dreamcycle.store.database import CHUNK_KINDS


@dataclass
class PulsesConfig:
    update_rule: str = default("pulses.update_rule")
    strength: float = default("pulses.strength")
    sigma: float = default("pulses.sigma")
    max_hops: int = default("pulses.max_hops")
    k: int = default("pulses.k")
    decay_per_hop: float = default("pulses.decay_per_hop")
    ttl_s: float = default("pulses.ttl_s")
    outcome_wait_s: float = default("pulses.outcome_wait_s")
    origin_budget: float = default("pulses.origin_budget")

    def check(self) -> None:
        positive("pulses.ttl_s", self.ttl_s)
        positive("pulses.outcome_wait_s", self.outcome_wait_s)
        positive("pulses.origin_budget", self.origin_budget)
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
    enabled: bool = default("downscale.enabled")
    fact_half_life_s: float = default("downscale.fact_half_life_s")
    preference_half_life_s: float = default("downscale.preference_half_life_s")
    insight_half_life_s: float = default("downscale.insight_half_life_s")
    summary_half_life_s: float = default("downscale.summary_half_life_s")
    note_half_life_s: float = default("downscale.note_half_life_s")
    stability_gain: float = default("downscale.stability_gain")
    min_step_s: float = default("downscale.min_step_s")
    max_chunks_per_cycle: int = default("downscale.max_chunks_per_cycle")

    def check(self) -> None:
        for kind in CHUNK_KINDS:
            positive(f"downscale.{kind}_half_life_s", self.half_life(kind))
        finite_non_negative("downscale.min_step_s", self.min_step_s)
        positive("downscale.max_chunks_per_cycle", self.max_chunks_per_cycle)
        finite_non_negative("downscale.stability_gain", self.stability_gain)

    def half_life(self, kind: str) -> float:
        return float(getattr(self, f"{kind}_half_life_s"))


@dataclass
class SweepConfig:
    enabled: bool = default("sweep.enabled")
    percentile: float = default("sweep.percentile")
    min_population: int = default("sweep.min_population")
    interval_s: float = default("sweep.interval_s")
    dry_run: bool = default("sweep.dry_run")
    grace_s: float = default("sweep.grace_s")
    cold_retention_s: float = default("sweep.cold_retention_s")
    salience_share: float = default("sweep.salience_share")
    information_share: float = default("sweep.information_share")
    importance_share: float = default("sweep.importance_share")
    prune_gate: bool = default("sweep.prune_gate")
    gate_decisions: int = default("sweep.gate_decisions")
    gate_window_s: float = default("sweep.gate_window_s")

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
        positive("sweep.cold_retention_s", self.cold_retention_s)
        positive("sweep.gate_window_s", self.gate_window_s)
        if self.gate_decisions < 0:
            raise ConfigError(f"sweep.gate_decisions must be >= 0, got {self.gate_decisions}")

    def mix(self) -> SweepMix:
        return SweepMix(self.salience_share, self.information_share, self.importance_share)


@dataclass
class RecallConfig:
    top_k: int = default("recall.top_k")
    candidates: int = default("recall.candidates")
    exact_filter_scale: float = default("recall.exact_filter_scale")
    cold_graph_from: int = default("recall.cold_graph_from")
    embeddings_held_mib: int = default("recall.embeddings_held_mib")
    rrf_k: float = default("recall.rrf_k")
    salience_bound: float = default("recall.salience_bound")
    confidence_bound: float = default("recall.confidence_bound")
    key_weight: float = default("recall.key_weight")
    cold_factor: float = default("recall.cold_factor")
    key_min_similarity: float = default("recall.key_min_similarity")
    lexical_weight: float = default("recall.lexical_weight")
    vector_weight: float = default("recall.vector_weight")
    learned_weight: float = default("recall.learned_weight")

    def check(self) -> None:
        positive("recall.top_k", self.top_k)
        if self.top_k > defaults.RECALL_MAX_TOP_K:
            raise ConfigError(
                f"recall.top_k must be <= {defaults.RECALL_MAX_TOP_K}, got {self.top_k}"
            )
        positive("recall.candidates", self.candidates)
        if not self.exact_filter_scale >= 0:
            raise ConfigError(
                f"recall.exact_filter_scale must be >= 0, got {self.exact_filter_scale}"
            )
        if self.cold_graph_from < 0:
            raise ConfigError(
                f"recall.cold_graph_from must be >= 0 (0: always exact), got {self.cold_graph_from}"
            )
        finite_non_negative("recall.embeddings_held_mib", self.embeddings_held_mib)
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
    credit_rule: str = default("learning.credit_rule")
    keys: bool = default("learning.keys")
    share_key_text: bool = default("learning.share_key_text")
    miss_factor: float = default("learning.miss_factor")
    key_half_life_s: float = default("learning.key_half_life_s")
    max_keys_per_chunk: int = default("learning.max_keys_per_chunk")
    fusion: bool = default("learning.fusion")
    key_gate: bool = default("learning.key_gate")
    intrinsic_prior: bool = default("learning.intrinsic_prior")
    cold_weight: bool = default("learning.cold_weight")
    implicit_saved: float = default("learning.implicit_saved")
    implicit_summary: float = default("learning.implicit_summary")
    implicit_asked_again: float = default("learning.implicit_asked_again")
    implicit_session: float = default("learning.implicit_session")
    implicit_window_s: float = default("learning.implicit_window_s")
    session_window_s: float = default("learning.session_window_s")
    asked_again_similarity: float = default("learning.asked_again_similarity")

    def check(self) -> None:
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
        positive("learning.implicit_window_s", self.implicit_window_s)
        positive("learning.session_window_s", self.session_window_s)
        if not -1 <= self.asked_again_similarity <= 1:
            raise ConfigError(
                "learning.asked_again_similarity must be in [-1, 1], "
                f"got {self.asked_again_similarity}"
            )
        finite_non_negative("learning.key_half_life_s", self.key_half_life_s)
        positive("learning.max_keys_per_chunk", self.max_keys_per_chunk)


@dataclass
class EfficacyConfig:
    enabled: bool = default("efficacy.enabled")
    interval_s: float = default("efficacy.interval_s")
    window_s: float = default("efficacy.window_s")

    def check(self) -> None:
        positive("efficacy.interval_s", self.interval_s)
        positive("efficacy.window_s", self.window_s)


@dataclass
class AuditConfig:
    enabled: bool = default("audit.enabled")
    checkpoint_interval_s: float = default("audit.checkpoint_interval_s")
    retention_s: float = default("audit.retention_s")

    def check(self) -> None:
        positive("audit.checkpoint_interval_s", self.checkpoint_interval_s)
        positive("audit.retention_s", self.retention_s)
