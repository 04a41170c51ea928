"""The request models both clients send, made from their methods' arguments and checked
before anything leaves: arguments the models refuse (a misspelt field, a number out of
range, infinite or NaN, a recall's query that is neither a text nor a sequence of
numbers) raise `BadRequest` naming the field, in the words the daemon would use, and
nothing is sent. The commands and the MCP tools build their requests here too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ValidationError

from dreamcycle.daemon.api import edit_models, model_fields, recall_models, refusals, report_models
from dreamcycle.daemon.api.client_errors import BadRequest

Model = TypeVar("Model", bound=BaseModel)


def request_model(model: type[Model], **fields: Any) -> Model:
    """The request model, or BadRequest naming each bad field with the rule it breaks, as
    the daemon would (nothing is sent)."""
    try:
        return model(**fields)
    except ValidationError as exc:
        raise BadRequest(refusals.text_of(exc)) from None


class SaveFields(TypedDict, total=False):
    title: str
    type: str
    kind: model_fields.Kind
    project: str | None
    scope: str
    topic_key: str | None
    session_id: str | None
    tool_name: str | None
    pin_floor: float
    importance: int
    deletion_policy: model_fields.DeletionPolicy
    confidence: float | None
    stability: float | None


class UpdateFields(TypedDict, total=False):
    content: str
    title: str
    type: str
    kind: model_fields.Kind
    project: str
    scope: str
    topic_key: str
    importance: int
    reason: str


class TimelineFields(TypedDict, total=False):
    project: str
    scope: str
    session_id: str
    kind: model_fields.Kind
    topic_key_prefix: str
    created_after_ms: int
    created_before_ms: int
    around_ms: int
    span_s: float
    limit: int
    offset: int


class PulseFields(TypedDict, total=False):
    kind: Literal["reward", "decay"]
    strength: float
    sigma: float
    k: int
    max_hops: int
    decay_per_hop: float
    ttl_s: float
    reason: str
    nonce: str


def recall_request(
    query: str | Sequence[float],
    filters: recall_models.RecallFilters | Mapping[str, Any] | None,
    top_k: int | None,
    record: bool,
    decision: str | None,
    min_relevance: float,
    explain: bool,
    min_confidence: float = 0.0,
) -> recall_models.RecallRequest:
    by_text = isinstance(query, str)
    if isinstance(filters, Mapping):
        filters = request_model(recall_models.RecallFilters, **filters)
    return request_model(
        recall_models.RecallRequest,
        query=query if by_text else None,
        vector=None if by_text else _vector(query),
        filters=filters or recall_models.RecallFilters(),
        top_k=top_k,
        record=record,
        decision=decision,
        min_relevance=min_relevance,
        min_confidence=min_confidence,
        explain=explain,
    )


def _vector(query: object) -> list[Any]:
    """A recall's query that is not a text, as the embedding it must be; its items are
    the request model's to check (numbers, finite), which names the bad one."""
    if isinstance(query, Iterable) and not isinstance(query, bytes | bytearray | Mapping):
        try:
            return list(query)
        except TypeError:  # iterable in type only, as a 0-d numpy array is
            pass
    raise BadRequest(
        f"query: give a text, or an embedding as a sequence of numbers; not {type(query).__name__}"
    )


def tombstone_request(
    content_hash: str, reason: str, ttl_s: float | None
) -> edit_models.TombstoneRequest:
    extra = {} if ttl_s is None else {"ttl_s": ttl_s}
    return request_model(
        edit_models.TombstoneRequest, content_hash=content_hash, reason=reason, **extra
    )


def forgotten_request(limit: int | None, offset: int) -> report_models.ForgottenRequest:
    extra = {} if limit is None else {"limit": limit}
    return request_model(report_models.ForgottenRequest, offset=offset, **extra)


def outcome_request(
    decision: str, reward: float, reason: str, cited: Sequence[str]
) -> edit_models.OutcomeRequest:
    return request_model(
        edit_models.OutcomeRequest,
        decision_hash=decision,
        reward=reward,
        reason=reason,
        cited=cited,
    )


def context_request(
    task: str,
    filters: recall_models.RecallFilters | Mapping[str, Any] | None,
    budget_tokens: int | None,
    record: bool,
    decision: str | None,
) -> recall_models.ContextRequest:
    if isinstance(filters, Mapping):
        filters = request_model(recall_models.RecallFilters, **filters)
    extra = {} if budget_tokens is None else {"budget_tokens": budget_tokens}
    return request_model(
        recall_models.ContextRequest,
        task=task,
        filters=filters or recall_models.RecallFilters(),
        record=record,
        decision=decision,
        **extra,
    )


def pin_request(ref: str, pin_floor: float | None) -> edit_models.PinRequest:
    extra = {} if pin_floor is None else {"pin_floor": pin_floor}
    return request_model(edit_models.PinRequest, ref=ref, **extra)


def feedback_request(
    ref: str, reason: str, strength: float | None, nonce: str
) -> edit_models.FeedbackRequest:
    extra = {} if strength is None else {"strength": strength}
    return request_model(edit_models.FeedbackRequest, ref=ref, reason=reason, nonce=nonce, **extra)


def supersede_request(
    old_hash: str, content: str, reason: str, fields: SaveFields
) -> edit_models.SupersedeRequest:
    memory = request_model(edit_models.SaveRequest, content=content, **fields)
    return request_model(
        edit_models.SupersedeRequest, old_hash=old_hash, memory=memory, reason=reason
    )
