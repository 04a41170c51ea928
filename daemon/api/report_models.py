"""The requests and answers of the reads that report on memory rather than rank it: one
memory, the cold tier, why a memory stands where it does (explain), the timeline, and the
peer's status.

The HTTP routes, and any other transport, validate with these and answer with them;
field descriptions become the OpenAPI description.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.model_fields import (
    HASH_OR_UNIQUE_PREFIX,
    MAX_OFFSET,
    MAX_TIME_MS,
    Integer,
    Number,
    Strict,
)
from dreamcycle.daemon.api.recall_models import RecallFilters

# ---- one chunk, the cold tier ------------------------------------------------------------------

FORGOTTEN_PAGE = defaults.FORGOTTEN_PAGE
MAX_FORGOTTEN_PAGE = defaults.FORGOTTEN_MAX_PAGE


class MemoryRequest(Strict):
    ref: str = Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a chunk hash, or a prefix of at least 8 digits that only one chunk has",
    )


class Memory(BaseModel):
    content_hash: str
    title: str
    content: str
    type: str
    kind: str
    project: str | None
    scope: str
    topic_key: str | None
    session_id: str | None
    importance: int
    pin_floor: float
    deletion_policy: str
    salience: float
    confidence: float
    stability: float
    created_at: str
    state: Literal["live", "cold", "tombstoned"] = Field(
        description="cold: swept out of the live index, still recalled as a fallback"
    )
    cold_reason: str | None


class ForgottenRequest(Strict):
    limit: Integer = Field(default=FORGOTTEN_PAGE, ge=1, le=MAX_FORGOTTEN_PAGE)
    offset: Integer = Field(default=0, ge=0, le=MAX_OFFSET)


class ColdMemory(BaseModel):
    content_hash: str
    cold_at: str
    reason: str
    salience: float
    text: str = Field(description="the title, or the content when there is none")


class ForgottenResponse(BaseModel):
    cold: int = Field(description="chunks in the cold tier")
    chunks: list[ColdMemory] = Field(description="most recently swept first")


# ---- explain ------------------------------------------------------------------------------------


class SalienceStep(BaseModel):
    """One journaled step that changed this memory's salience or tier, with its cause."""

    seq: int
    at_ms: int
    step: Literal[
        "chunk", "pulse", "tombstone", "supersede", "reconsolidate", "sweep", "revive", "confidence"
    ]
    cause: str
    pulse_id: str | None = None
    pulse_kind: str | None = None
    strength: float | None = None
    origin_peer: str | None = None
    reason: str | None = None
    outcome_id: str | None = Field(
        default=None, description="the outcome this pulse came from, when known here"
    )
    decision_hash: str | None = None
    salience: float | None = Field(
        default=None, description="the salience the step set, where the journal says"
    )
    pin_floor: float | None = None
    confidence: float | None = Field(
        default=None, description="the confidence a confidence step set"
    )


class DownscaleSummary(BaseModel):
    steps: int = Field(
        description="downscale steps run since the memory was admitted (each decays the "
        "memories last decayed downscale.min_step_s or more before, a bounded number)"
    )
    last_at_ms: int | None = Field(
        description="when the memory's decay counts from: its last decay, else its creation"
    )
    half_life_s: float | None = Field(
        description="of the memory, at the last step: its kind's, scaled by its stability"
    )


class OutcomeSummary(BaseModel):
    outcome_id: str
    reward: float
    reason: str
    status: str
    cited: bool = Field(description="the outcome cited this memory")


class DecisionSummary(BaseModel):
    decision_hash: str
    at: str
    peer: str
    rank: int | None = Field(description="1-based place among what it returned, when known")
    query: str | None
    outcomes: list[OutcomeSummary]


class LearnedKeySummary(BaseModel):
    weight: float
    updated_ms: int
    text: str | None = Field(description="the question's words, when they are kept here")


class ExplainResponse(BaseModel):
    memory: Memory
    tombstone_reason: str | None
    history: list[SalienceStep] = Field(description="most recent first")
    history_total: int = Field(description="journal steps about it, listed or not")
    history_since_ms: int | None = Field(
        default=None,
        description="the journal holds steps from this time on (older ones were deleted "
        "after audit.retention_s, kept in a checkpoint of salience only); null: every step "
        "since the memory was admitted is held",
    )
    downscale: DownscaleSummary
    decisions: list[DecisionSummary] = Field(description="most recent first")
    decisions_total: int
    learned_keys: list[LearnedKeySummary]


# ---- timeline -----------------------------------------------------------------------------------


class TimelineRequest(RecallFilters):
    """The recall filters, and where in time to look."""

    around_ms: Integer | None = Field(
        default=None,
        ge=0,
        le=MAX_TIME_MS,
        description="only memories stored within span_s of this time",
    )
    span_s: Number = Field(default=defaults.TIMELINE_SPAN_S, gt=0.0, le=10 * 365 * 86_400.0)
    limit: Integer = Field(default=defaults.TIMELINE_PAGE, ge=1, le=defaults.TIMELINE_MAX_PAGE)
    offset: Integer = Field(default=0, ge=0, le=MAX_OFFSET)

    def filters(self) -> RecallFilters:
        return RecallFilters(**self.model_dump(include=set(RecallFilters.model_fields)))


class TimelineMemory(BaseModel):
    content_hash: str
    title: str
    preview: str = Field(
        description=f"the content's first {defaults.TIMELINE_PREVIEW_CHARS} characters"
    )
    kind: str
    project: str | None
    session_id: str | None
    topic_key: str | None
    created_at: str
    salience: float
    state: Literal["live", "cold"]


class TimelineResponse(BaseModel):
    total: int = Field(description="memories matching, on every page")
    next_offset: int | None = Field(description="the next page's offset; null on the last")
    memories: list[TimelineMemory] = Field(description="newest first")


# ---- status -----------------------------------------------------------------------------------


class SalienceBin(BaseModel):
    """Live memories whose salience is in [from, to) (the last bin holds 1 too)."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    from_: float = Field(alias="from")
    to: float
    chunks: int


class StatusResponse(BaseModel):
    peer: str
    counts: dict[str, int]
    salience_histogram: list[SalienceBin] = Field(
        description="the memories `counts.live` counts, by salience"
    )
    tombstones_by_reason: dict[str, int]
    index_live: int
    index_capacity: int
    last_cycle: dict[str, Any] | None
