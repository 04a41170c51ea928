"""One limit per field, the same on every surface.

A memory's fields have the protocol's limits (daemon/memory/limits.py: what every peer can
publish and decode), and a query, a task, a decision's text or a pulse's text one limit
(pulses/constants.py QUERY_MAX_CHARS), reasons another (REASON_MAX_CHARS). The API's
models, and so the OpenAPI document and the MCP tools' schemas, state exactly these; the
commands, which check before anything reaches the API, refuse beyond them alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from dreamcycle.daemon.api import contract, edit_models, mcp_server, recall_models
from dreamcycle.daemon.memory.limits import FIELD_MAX_CHARS, check_fields
from dreamcycle.pulses.constants import QUERY_MAX_CHARS, REASON_MAX_CHARS
from dreamcycle.store.database import InvalidObservation
from dreamcycle.zeitgeist.entries import CONTENT_MAX_CHARS, LABEL_MAX_CHARS, TITLE_MAX_CHARS


def max_length(model: type[BaseModel], field: str) -> Any:
    schema = model.model_json_schema()["properties"][field]
    for alternative in schema.get("anyOf", ()):
        if "maxLength" in alternative:
            return alternative["maxLength"]
    return schema.get("maxLength")


def test_the_memory_limits_are_the_protocols() -> None:
    assert FIELD_MAX_CHARS["content"] == CONTENT_MAX_CHARS
    assert FIELD_MAX_CHARS["title"] == TITLE_MAX_CHARS
    assert {FIELD_MAX_CHARS[f] for f in ("type", "project", "scope", "topic_key")} == {
        LABEL_MAX_CHARS
    }


@pytest.mark.parametrize("model", [edit_models.SaveRequest, edit_models.UpdateBody])
def test_the_api_saves_and_updates_within_the_same_limits(model: type[BaseModel]) -> None:
    for field, limit in FIELD_MAX_CHARS.items():
        # `kind` is one of five names, each far shorter than any limit.
        if field in model.model_fields and field != "kind":
            assert max_length(model, field) == limit, (model.__name__, field)


@pytest.mark.parametrize(
    ("model", "field"),
    [
        (recall_models.RecallRequest, "query"),
        (recall_models.RecallRequest, "decision"),
        (recall_models.ContextRequest, "task"),
        (recall_models.ContextRequest, "decision"),
        (edit_models.PulseRequest, "text"),
    ],
)
def test_texts_recall_embeds_share_one_limit(model: type[BaseModel], field: str) -> None:
    assert max_length(model, field) == QUERY_MAX_CHARS


def test_every_reason_shares_one_limit() -> None:
    reasons = [
        op.request
        for op in contract.OPERATIONS
        if op.request is not None and "reason" in op.request.model_fields
    ]
    assert len(reasons) >= 5
    for model in reasons:
        assert max_length(model, "reason") == REASON_MAX_CHARS, model.__name__


def test_the_mcp_tools_state_the_same_limits() -> None:
    server = mcp_server.build_server(None)  # type: ignore[arg-type]
    tools = {tool.name: tool.parameters["properties"] for tool in server._tool_manager.list_tools()}
    assert tools["mem_save"]["content"]["maxLength"] == FIELD_MAX_CHARS["content"]
    assert tools["mem_save"]["title"]["maxLength"] == FIELD_MAX_CHARS["title"]
    assert tools["mem_search"]["query"]["maxLength"] == QUERY_MAX_CHARS
    assert tools["mem_outcome"]["reason"]["maxLength"] == REASON_MAX_CHARS


@pytest.mark.parametrize("field", sorted(FIELD_MAX_CHARS))
def test_ingest_refuses_one_character_more_and_takes_the_limit(field: str) -> None:
    limit = FIELD_MAX_CHARS[field]
    check_fields({field: "x" * limit})
    with pytest.raises(InvalidObservation, match=f"limit of {limit}"):
        check_fields({field: "x" * (limit + 1)})
