"""The requests and answers of the operations that change memory: save, outcome, pulse,
tombstone and supersede, and those aimed at one memory (pin, unpin, reinforce, penalize,
revive, update). What the next cycle applies is answered with the entry queued for it
(`Queued`), so that a repeat can be told from a new request.

The HTTP routes, and any other transport, validate with these and answer with them;
field descriptions become the OpenAPI description.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api.model_fields import (
    CONTENT_CHARS,
    LABEL_CHARS,
    MAX_CITED,
    MAX_TEXT_CHARS,
    TITLE_CHARS,
    ChunkRef,
    DecisionRef,
    DeletionPolicy,
    HashOrPrefix,
    Integer,
    Kind,
    Number,
    RefRequest,
    Strict,
)
from dreamcycle.daemon.api.refusals import NOT_BLANK
from dreamcycle.pulses.constants import (
    K_MAX,
    MAX_HOPS_MAX,
    REASON_MAX_CHARS,
    SIGMA_MAX,
    STRENGTH_MAX,
    TTL_MAX_S,
)
from dreamcycle.pulses.pulse import PulseKind, validate_parameters

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


# ---- supersede --------------------------------------------------------------------------------


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


# ---- pin, reinforce, penalize, update ---------------------------------------------------------


class PinBody(Strict):
    pin_floor: Number = Field(
        default=defaults.PIN_FLOOR,
        gt=0.0,
        le=1.0,
        description="salience never decays below it; a pinned memory is never swept",
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
