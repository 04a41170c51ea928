"""The requests and answers of asking memory: a recall, by text or by vector, and a
context bundle, the memories for a task packed into a token budget. Both rank by
relevance under the same filters (which the timeline takes too), and both may record the
decision they inform for an outcome to credit.

The HTTP routes, and any other transport, validate with these and answer with them;
field descriptions become the OpenAPI description.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.model_fields import (
    LABEL_CHARS,
    MAX_TEXT_CHARS,
    MAX_TIME_MS,
    MAX_TOP_K,
    MAX_VECTOR_LENGTH,
    Integer,
    Kind,
    ListedNumber,
    Number,
    Strict,
    bounds_named,
)
from dreamcycle.daemon.api.refusals import NOT_BLANK
from dreamcycle.pulses.context import MIN_BUDGET

# ---- recall ------------------------------------------------------------------------------


class RecallFilters(Strict):
    project: str | None = None
    scope: str | None = None
    session_id: str | None = None
    kind: Kind | None = None
    topic_key_prefix: str | None = Field(default=None, min_length=1, max_length=LABEL_CHARS)
    created_after_ms: Integer | None = Field(
        default=None,
        ge=0,
        le=MAX_TIME_MS,
        description="only chunks stored at or after (ms since the epoch)",
    )
    created_before_ms: Integer | None = Field(
        default=None,
        ge=0,
        le=MAX_TIME_MS,
        description="only chunks stored before (ms since the epoch)",
    )

    @model_validator(mode="after")
    def _a_time_range_that_holds_something(self) -> RecallFilters:
        after, before = self.created_after_ms, self.created_before_ms
        if after is not None and before is not None and after >= before:
            # Nothing is stored both at or after one time and before an earlier one: the
            # bounds were swapped, and an empty answer would hide it.
            raise ValueError(
                f"created_after_ms ({after}) must be before created_before_ms ({before})"
            )
        return self

    def active(self) -> bool:
        return any(value is not None for value in self.model_dump().values())


def _one_way_to_recall_stated(schema: dict[str, Any]) -> None:
    """A recall's schema, saying that it takes exactly one of query and vector (the other
    left out or null)."""
    bounds_named(schema)
    schema["oneOf"] = [
        {
            "required": [given],
            "properties": {given: {"not": {"type": "null"}}, other: {"type": "null"}},
        }
        for given, other in (("query", "vector"), ("vector", "query"))
    ]


class RecallRequest(Strict):
    model_config = ConfigDict(
        **{**Strict.model_config, "json_schema_extra": _one_way_to_recall_stated}
    )

    query: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        pattern=NOT_BLANK,
        description="text to recall by",
    )
    vector: list[ListedNumber] | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_VECTOR_LENGTH,
        description="an embedding to recall by instead of text (normalised here)",
    )
    top_k: Integer | None = Field(default=None, ge=1, le=MAX_TOP_K)
    filters: RecallFilters = Field(default_factory=RecallFilters)
    min_relevance: Number = Field(
        default=0.0, ge=0.0, description="drop results whose fused relevance is below this"
    )
    min_confidence: Number = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="rank only memories at least this certain (confidence 0-1)",
    )
    explain: bool = Field(default=False, description="return each result's ranking factors")
    record: bool = Field(
        default=True,
        description="store an attribution, so an outcome can credit what was returned",
    )
    decision: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        pattern=NOT_BLANK,
        description="the decision these results inform (default: the query)",
    )

    @model_validator(mode="after")
    def _one_way_to_recall(self) -> RecallRequest:
        if (self.query is None) == (self.vector is None):
            raise ValueError("give exactly one of query and vector")
        return self


class RankingFactors(BaseModel):
    relevance: float
    similarity: float
    salience: float
    cold: bool
    vector_rank: int
    lexical_rank: int | None
    learned_rank: int | None
    key_similarity: float | None
    confidence: float


class RecallHit(BaseModel):
    content_hash: str
    title: str
    content: str
    score: float
    similarity: float
    salience: float
    cold: bool
    confidence: float = Field(description="how sure the store is that it is accurate (0-1)")
    stability: float = Field(description="how resistant it is to change (0-1): slows decay")
    factors: RankingFactors | None = None


class RecallResponse(BaseModel):
    decision_hash: str | None = Field(
        description="name it in an outcome; null when nothing was recorded"
    )
    hits: list[RecallHit]


# ---- context bundle -----------------------------------------------------------------------------


class ContextRequest(Strict):
    task: str = Field(
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        pattern=NOT_BLANK,
        description="the task at hand, in plain words",
    )
    filters: RecallFilters = Field(
        default_factory=RecallFilters, description="applied to every tier"
    )
    budget_tokens: Integer = Field(
        default=defaults.CONTEXT_BUDGET_TOKENS,
        ge=MIN_BUDGET,
        le=defaults.CONTEXT_MAX_BUDGET_TOKENS,
        description="tokens of memory the bundle holds at most (estimated: words, or "
        "characters / 4, whichever is more)",
    )
    record: bool = Field(
        default=True,
        description="store an attribution of exactly the memories in the bundle, so an "
        "outcome credits them",
    )
    decision: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        pattern=NOT_BLANK,
        description="the decision the bundle informs (default: the task)",
    )


class ContextMemory(BaseModel):
    content_hash: str
    title: str
    content: str
    salience: float
    rank_salience: float = Field(
        description="what the budget was spent by: the salience, or the pinned floor"
    )
    tokens: int
    truncated: bool = Field(description="cut to fit a budget smaller than the memory")
    cold: bool


class ContextTiers(BaseModel):
    pinned: list[ContextMemory] = Field(description="pinned, or deletion policy never")
    outcomes: list[ContextMemory] = Field(
        description="cited by recent successful decisions about a similar task"
    )
    relevant: list[ContextMemory] = Field(description="hybrid recall for the task, best first")


class ContextTokens(BaseModel):
    pinned: int
    outcomes: int
    relevant: int
    total: int
    budget: int


class Reference(BaseModel):
    content_hash: str
    title: str


class ContextResponse(BaseModel):
    decision_hash: str | None = Field(
        description="name it in an outcome; null when nothing was recorded"
    )
    tiers: ContextTiers
    tokens: ContextTokens
    overflow: list[Reference] = Field(
        description=f"memories that did not fit, best first (at most "
        f"{defaults.CONTEXT_MAX_OVERFLOW})"
    )
    dropped: int = Field(description="how many did not fit, listed or not")
    text: str = Field(description="the bundle rendered to read")
    latency_ms: float
