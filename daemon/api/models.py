"""Requests and responses of every API operation, in one place (pydantic v2).

The HTTP routes, and any other transport, validate with these and answer with
them; field descriptions become the OpenAPI description.

One module of about 700 lines: the API's whole schema, which the routes, the clients and
the MCP tools all import; split by route, one model would be looked for in three places.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator
from pydantic_core import PydanticKnownError

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.refusals import NOT_BLANK
from dreamcycle.daemon.memory.limits import FIELD_MAX_CHARS
from dreamcycle.pulses.constants import (
    K_MAX,
    MAX_HOPS_MAX,
    QUERY_MAX_CHARS,
    REASON_MAX_CHARS,
    SIGMA_MAX,
    STRENGTH_MAX,
    TTL_MAX_S,
)
from dreamcycle.pulses.context import MIN_BUDGET
from dreamcycle.pulses.pulse import PulseKind, validate_parameters
from dreamcycle.store.database import CHUNK_KINDS, DELETION_POLICIES


def _refuse_boolean(kind: Literal["int_type", "float_type"]) -> BeforeValidator:
    """A number's validator that refuses true and false, which pydantic would read as 1 and
    0: JSON tells a boolean from a number, and so does the schema."""

    def refused(value: Any) -> Any:
        if isinstance(value, bool):
            raise PydanticKnownError(kind)
        return value

    return BeforeValidator(refused)


#: A request's numbers: a JSON boolean is refused where one is expected (the schema's
#: "number" and "integer" do not take one either).
Number = Annotated[float, _refuse_boolean("float_type")]
Integer = Annotated[int, _refuse_boolean("int_type")]
#: A number in a long list (a recall's vector): strict, which refuses booleans (and text)
#: as Number does, checked without a call back into Python per item.
ListedNumber = Annotated[float, Field(strict=True)]

ChunkHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="blake3 content hash")]
#: Wherever a hash is taken: the whole hash, or a prefix of at least 8 digits that only one
#: known hash starts (an ambiguous one is refused, listing the hashes it starts).
HASH_OR_UNIQUE_PREFIX = r"^[0-9a-f]{8,64}$"
DecisionRef = Annotated[
    str,
    Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a decision hash, or a prefix of at least 8 digits only one decision has",
    ),
]
ChunkRef = Annotated[
    str,
    Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a chunk hash, or a prefix of at least 8 digits only one chunk has",
    ),
]
HashOrPrefix = Annotated[
    str,
    Field(
        pattern=r"^[0-9a-f]{8,64}$",
        description="a chunk hash, or a unique prefix of at least 8 digits among the "
        "decision's recalled chunks",
    ),
]
Kind = Literal["fact", "preference", "insight", "summary", "note"]
DeletionPolicy = Literal["auto_prune", "manual_only", "never"]
# Bounded so that nothing a client sends can make one request unreasonably expensive; the
# same limits every other surface applies (daemon/memory/limits.py, pulses/constants.py).
MAX_TEXT_CHARS = QUERY_MAX_CHARS
#: A memory's fields: the protocol's limits, which every peer must be able to publish.
CONTENT_CHARS = FIELD_MAX_CHARS["content"]
TITLE_CHARS = FIELD_MAX_CHARS["title"]
LABEL_CHARS = FIELD_MAX_CHARS["type"]
MAX_TOP_K = defaults.RECALL_MAX_TOP_K
MAX_CITED = 100
#: An embedding is given as this many floats (the model's width is checked at run time).
MAX_VECTOR_LENGTH = 4096
#: The last millisecond of year 9999: times past it cannot be written as ISO dates.
MAX_TIME_MS = 253_402_300_799_999
#: SQLite's integers are 64-bit: a page offset beyond that cannot be asked of it.
MAX_OFFSET = (1 << 63) - 1

assert Kind.__args__ == CHUNK_KINDS  # type: ignore[attr-defined]
assert DeletionPolicy.__args__ == DELETION_POLICIES  # type: ignore[attr-defined]


class Strict(BaseModel):
    """Unknown fields are refused: a misspelt filter must not silently match everything.
    So are non-finite numbers (JSON has none, but parsers read Infinity, NaN and 1e400):
    no bound holds against them, and an answer quoting one would not be JSON. Numbers are
    `Number` and `Integer`, which refuse booleans; text that must say something has the
    pattern NOT_BLANK, so that empty and white space only are refused alike, as the schema
    says."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False, json_schema_extra=lambda schema: bounds_named(schema)
    )


#: Bounds as pydantic leaves them on an optional `Number` or `Integer`, and as JSON Schema
#: names them (else a schema-driven client reads such a number as unbounded).
_BOUND_NAMES: Final = {
    "ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"
}  # fmt: skip


def bounds_named(schema: Any) -> None:
    """Rename, throughout `schema`, the bounds of optional numbers to JSON Schema's words."""
    if isinstance(schema, dict):
        if schema.get("type") in ("integer", "number"):
            for ours, theirs in _BOUND_NAMES.items():
                if ours in schema:
                    schema[theirs] = schema.pop(ours)
        for value in schema.values():
            bounds_named(value)
    elif isinstance(schema, list):
        for item in schema:
            bounds_named(item)


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


# ---- save ----------------------------------------------------------------------------------


class SaveRequest(Strict):
    content: str = Field(min_length=1, max_length=CONTENT_CHARS, pattern=NOT_BLANK)
    title: str = Field(default="", max_length=TITLE_CHARS)
    type: str = Field(default="manual", min_length=1, max_length=LABEL_CHARS)
    kind: Kind = "note"
    project: str | None = Field(default=None, max_length=LABEL_CHARS)
    scope: str = Field(default="project", min_length=1, max_length=LABEL_CHARS)
    topic_key: str | None = Field(default=None, max_length=LABEL_CHARS)
    session_id: str | None = Field(default=None, max_length=LABEL_CHARS)
    tool_name: str | None = Field(default=None, max_length=LABEL_CHARS)
    pin_floor: Number = Field(default=0.0, ge=0.0, le=1.0)
    importance: Integer = Field(default=5, ge=0, le=10)
    deletion_policy: DeletionPolicy = "auto_prune"
    confidence: Number | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="how sure it is (0-1); default by type and kind, e.g. 0.9 for manual",
    )
    stability: Number | None = Field(
        default=None,
        ge=0.0,
        le=1.0,
        description="how resistant to change (0-1, slows decay); default by kind",
    )


class SaveResponse(BaseModel):
    content_hash: str
    created: bool = Field(description="false: this content was already stored")
    indexed: bool = Field(description="true: recall finds it from now on")
    confidence: float = Field(description="after this save: saving again raises it")


# ---- outcome, pulse, tombstone ----------------------------------------------------------------


class OutcomeRequest(Strict):
    decision_hash: DecisionRef
    reward: Number = Field(ge=-1.0, le=1.0)
    reason: str = Field(min_length=1, max_length=REASON_MAX_CHARS, pattern=NOT_BLANK)
    cited: list[HashOrPrefix] = Field(default_factory=list, max_length=MAX_CITED)


class PulseRequest(Strict):
    text: str = Field(min_length=1, max_length=MAX_TEXT_CHARS, pattern=NOT_BLANK)
    kind: Literal["reward", "decay"] = "reward"
    strength: Number = Field(default=defaults.PULSE_STRENGTH, gt=0.0, le=STRENGTH_MAX)
    sigma: Number = Field(default=defaults.PULSE_SIGMA, gt=0.0, le=SIGMA_MAX)
    k: Integer = Field(default=defaults.PULSE_K, ge=1, le=K_MAX)
    max_hops: Integer = Field(default=defaults.PULSE_MAX_HOPS, ge=0, le=MAX_HOPS_MAX)
    decay_per_hop: Number = Field(default=defaults.PULSE_DECAY_PER_HOP, ge=0.0, le=1.0)
    ttl_s: Number = Field(default=defaults.PULSE_TTL_S, gt=0.0, le=TTL_MAX_S)
    reason: str | None = Field(
        default=None,
        min_length=1,
        max_length=REASON_MAX_CHARS,
        pattern=NOT_BLANK,
        description="why, for the audit trail: left out, the pulse has none",
    )
    nonce: str = Field(default="", max_length=200, description="makes a deliberate repeat")

    @model_validator(mode="after")
    def _a_pulse_every_peer_accepts(self) -> PulseRequest:
        """The fields together: convergence, and the salience one pulse may move
        (pulses/pulse.py)."""
        validate_parameters(
            kind=PulseKind(self.kind),
            strength=self.strength,
            sigma=self.sigma,
            max_hops=self.max_hops,
            k=self.k,
            decay_per_hop=self.decay_per_hop,
            ttl_s=self.ttl_s,
            reason=self.reason or "",
        )
        return self


class TombstoneRequest(Strict):
    content_hash: ChunkRef
    reason: str = Field(min_length=1, max_length=REASON_MAX_CHARS, pattern=NOT_BLANK)
    ttl_s: Number = Field(default=defaults.PULSE_TTL_S, gt=0.0, le=TTL_MAX_S)


class Queued(BaseModel):
    entry_id: str
    new: bool = Field(description="false: an identical request was already queued")


# ---- one chunk, the cold tier, supersede -------------------------------------------------------

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


class SupersedeRequest(Strict):
    old_hash: ChunkRef
    memory: SaveRequest = Field(description="the chunk that replaces it")
    reason: str = Field(min_length=1, max_length=REASON_MAX_CHARS, pattern=NOT_BLANK)


class SupersedeResponse(BaseModel):
    saved: SaveResponse
    queued: Queued = Field(
        description="the supersede entry: the next cycle moves the old chunk's salience to the "
        "new one and tombstones the old, here and on every peer"
    )


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


# ---- pin, reinforce, penalize, update ---------------------------------------------------------


class PinBody(Strict):
    pin_floor: Number = Field(
        default=defaults.PIN_FLOOR,
        gt=0.0,
        le=1.0,
        description="salience never decays below it; a pinned memory is never swept",
    )


class RefRequest(Strict):
    ref: str = Field(
        pattern=HASH_OR_UNIQUE_PREFIX,
        description="a chunk hash, or a prefix of at least 8 digits that only one chunk has",
    )


class PinRequest(PinBody, RefRequest):
    pass


class FeedbackBody(Strict):
    reason: str = Field(
        min_length=1,
        max_length=REASON_MAX_CHARS,
        pattern=NOT_BLANK,
        description="why: kept with the pulse",
    )
    strength: Number = Field(default=defaults.FEEDBACK_STRENGTH, gt=0.0, le=STRENGTH_MAX)
    nonce: str = Field(default="", max_length=200, description="makes a deliberate repeat")


class FeedbackRequest(FeedbackBody, RefRequest):
    pass


class ChunkQueued(Queued):
    content_hash: str
    confidence: float | None = Field(
        default=None, description="after a reinforce or penalize: its confidence now"
    )


class Revival(BaseModel):
    content_hash: str
    requested_ms: int = Field(
        description="when revival was requested: the next dream cycle brings the memory back "
        "to the live tier and index"
    )


class UpdateBody(Strict):
    content: str | None = Field(
        default=None, min_length=1, max_length=CONTENT_CHARS, pattern=NOT_BLANK
    )
    title: str | None = Field(default=None, max_length=TITLE_CHARS)
    type: str | None = Field(default=None, min_length=1, max_length=LABEL_CHARS)
    kind: Kind | None = None
    project: str | None = Field(default=None, max_length=LABEL_CHARS)
    scope: str | None = Field(default=None, min_length=1, max_length=LABEL_CHARS)
    topic_key: str | None = Field(default=None, max_length=LABEL_CHARS)
    importance: Integer | None = Field(default=None, ge=0, le=10)
    reason: str = Field(
        default="updated", min_length=1, max_length=REASON_MAX_CHARS, pattern=NOT_BLANK
    )


class UpdateRequest(UpdateBody, RefRequest):
    pass


class UpdateResponse(BaseModel):
    content_hash: str = Field(description="the memory as updated (new when content changed)")
    superseded: SupersedeResponse | None = Field(
        description="when the content changed: the new chunk and its supersede entry"
    )
    revised: Queued | None = Field(
        description="when only title, topic_key or importance changed: the revision entry, "
        "applied at the next cycle"
    )


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


class FieldError(BaseModel):
    """One field of a request that does not validate, and the rule it breaks."""

    loc: list[str | int] = Field(
        description='where: "body", "query" or "path" over HTTP, then the field'
    )
    msg: str = Field(description="the rule it breaks, in words")
    type: str = Field(description="the rule's name, e.g. less_than_equal, missing")
    input: Any = Field(
        default=None, description="what was given (a number JSON cannot hold, as a string)"
    )
    ctx: dict[str, Any] | None = Field(
        default=None, description="the rule's terms, e.g. its bound or pattern"
    )


class Problem(BaseModel):
    """The body of every error answer: a problem detail (RFC 9457,
    application/problem+json)."""

    type: str = Field(
        default="about:blank",
        description="about:blank: the status says what kind of problem it is",
    )
    title: str = Field(description="the status's name, e.g. Not Found")
    status: int
    detail: str = Field(
        description="why, in words; for a request that does not validate, each field "
        "named with the rule it breaks"
    )
    errors: list[FieldError] | None = Field(
        default=None, description="for a request that does not validate: each field's reason"
    )
