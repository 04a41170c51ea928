"""Refusals in the API's own words: each field named with the rule it breaks, the same over
HTTP (a problem detail, RFC 9457), from an MCP tool (a tool result with isError), from the
Python client and on a command's error line; never pydantic's text, which points to its
own web site. And what the request models refuse: a boolean where a number is expected,
and text that says nothing, empty or white space alike, as the schema states.

In process, over ASGI and the MCP SDK's in-memory client, on a real store and embedder.
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from collections.abc import Iterator
from typing import Annotated, Any, Final

import httpx
import pydantic
import pytest
import trio
from mcp import Client
from mcp_types import TextContent

from dreamcycle.daemon.api import (
    contract,
    edit_models,
    http_problems,
    model_fields,
    recall_models,
    refusals,
    report_models,
)
from dreamcycle.daemon.api.client_errors import BadRequest
from dreamcycle.daemon.api.client_requests import request_model
from dreamcycle.daemon.api.hot_path import hot_path
from dreamcycle.daemon.api.http import create_app
from dreamcycle.daemon.api.mcp_server import InProcess, build_server
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.cli.common import EXIT_USAGE, run_guarded
from dreamcycle.daemon.runtime import Runtime
from tests.api_helpers import attached_operations, opened_runtime

NOW_MS: Final = 1_700_000_000_000
#: What pydantic's own messages carry, and no refusal may.
ELSEWHERE: Final = re.compile(r"pydantic|https?://")
PROBLEM_JSON: Final = "application/problem+json"
#: Every request model: what a client sends, or an MCP tool builds.
REQUEST_MODELS: Final = tuple(
    model
    for module in (model_fields, recall_models, edit_models, report_models)
    for model in vars(module).values()
    if isinstance(model, type)
    and issubclass(model, model_fields.Strict)
    and model is not model_fields.Strict
    and model.__module__ == module.__name__
)
#: The text fields that must say something (their operation trims them): empty and blank are
#: refused alike, by the model.
SAID: Final[tuple[tuple[type[pydantic.BaseModel], str, dict[str, Any]], ...]] = (
    (recall_models.RecallRequest, "query", {}),
    (recall_models.RecallRequest, "decision", {"query": "q"}),
    (edit_models.SaveRequest, "content", {}),
    (edit_models.OutcomeRequest, "reason", {"decision_hash": "a" * 64, "reward": 1.0}),
    (edit_models.PulseRequest, "text", {}),
    (edit_models.PulseRequest, "reason", {"text": "t"}),
    (edit_models.TombstoneRequest, "reason", {"content_hash": "a" * 64}),
    (edit_models.SupersedeRequest, "reason", {"old_hash": "a" * 64, "memory": {"content": "c"}}),
    (recall_models.ContextRequest, "task", {}),
    (recall_models.ContextRequest, "decision", {"task": "t"}),
    (edit_models.FeedbackBody, "reason", {}),
    (edit_models.UpdateBody, "content", {}),
    (edit_models.UpdateBody, "reason", {}),
)


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    with opened_runtime(tmp_path_factory.mktemp("refusals"), "refusing", NOW_MS) as opened:
        yield opened


@pytest.fixture(scope="module")
def ops(rt: Runtime) -> Iterator[Operations]:
    with attached_operations(rt) as (_, operations):
        yield operations


@pytest.fixture(scope="module")
def stored(ops: Operations) -> str:
    """A memory the requests below name."""
    saved = ops.save(edit_models.SaveRequest(content="Deploys go out on Tuesdays.", project="p"))
    return saved.content_hash


def _http(ops: Operations, *requests: tuple[str, str, Any]) -> list[httpx.Response]:
    """Each (method, path, JSON body or None) sent to the app the server runs (the hot
    path before FastAPI)."""

    async def run() -> list[httpx.Response]:
        limiter = trio.CapacityLimiter(2)
        app = hot_path(create_app(ops, limiter), ops, limiter, 1 << 20)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dc") as client:
            return [
                await client.request(method, path, json=body)
                if body is not None
                else await client.request(method, path)
                for method, path, body in requests
            ]

    return trio.run(run)


def _tool_calls(ops: Operations, *calls: tuple[str, dict[str, Any]]) -> list[tuple[bool, str]]:
    """Each (tool, arguments) called through the MCP SDK's client: (isError, its text)."""

    async def run() -> list[tuple[bool, str]]:
        async with Client(build_server(InProcess(ops, trio.CapacityLimiter(2)))) as client:
            results = [await client.call_tool(name, arguments) for name, arguments in calls]
        return [
            (
                bool(result.is_error),
                "".join(c.text for c in result.content if isinstance(c, TextContent)),
            )
            for result in results
        ]

    return trio.run(run)


def _schema_kinds(schema: dict[str, Any]) -> set[str]:
    """The JSON types a property's schema allows (an anyOf's members' too)."""
    kinds = {schema["type"]} if "type" in schema else set()
    for member in schema.get("anyOf", ()):
        kinds |= _schema_kinds(member)
    return kinds


def _numeric_fields(model: type[pydantic.BaseModel]) -> list[tuple[str, Any]]:
    """Each field of `model` that takes a number, with a boolean where the number goes."""
    found: list[tuple[str, Any]] = []
    for name, schema in model.model_json_schema()["properties"].items():
        kinds = _schema_kinds(schema)
        if kinds & {"number", "integer"}:
            found.append((name, True))
        elif "array" in kinds:
            items = [s.get("items", {}) for s in (schema, *schema.get("anyOf", ()))]
            if any(_schema_kinds(item) & {"number", "integer"} for item in items):
                found.append((name, [False]))
    return found


# ---- the words ------------------------------------------------------------------------------


def test_the_not_blank_pattern_is_pythons_white_space_exactly() -> None:
    """The operations trim with str.strip(): the pattern the schema states refuses exactly
    the texts that leaves empty, in pydantic's engine and in Python's alike."""
    blank = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
    pattern = re.compile(refusals.NOT_BLANK)
    assert not [c for c in blank if pattern.search(c)]
    assert all(pattern.search(c) for c in ("a", "\x00", "\ufeff", "\u200b", "é"))
    said = pydantic.TypeAdapter(Annotated[str, pydantic.Field(pattern=refusals.NOT_BLANK)])
    for text in blank:
        with pytest.raises(pydantic.ValidationError):
            said.validate_python(f"{text}{text}")
    assert said.validate_python("\u3000x ") == "\u3000x "


def test_each_rule_is_said_in_words_naming_the_field() -> None:
    def refused(model: type[pydantic.BaseModel], **fields: Any) -> str:
        with pytest.raises(pydantic.ValidationError) as caught:
            model.model_validate(fields)
        return refusals.text_of(caught.value)

    assert refused(edit_models.OutcomeRequest, decision_hash="a" * 64, reward=2, reason="r") == (
        "reward: must be at most 1"
    )
    assert refused(recall_models.RecallRequest, query="q", top_k=0) == "top_k: must be at least 1"
    assert refused(recall_models.RecallRequest, query="q", filters={"projekt": "x"}) == (
        "filters.projekt: is not a field of this request (misspelt?)"
    )
    assert refused(recall_models.RecallRequest, vector=[1.0, "x"]) == "vector[1]: must be a number"
    assert refused(edit_models.SaveRequest, content="c", kind="gossip") == (
        "kind: must be one of 'fact', 'preference', 'insight', 'summary' or 'note'"
    )
    assert refused(edit_models.SaveRequest) == "content: is required"
    assert refused(recall_models.RecallRequest, query="q", vector=[1.0]) == (
        "request: give exactly one of query and vector"
    )
    assert refused(edit_models.TombstoneRequest, content_hash="xyz", reason="r") == (
        "content_hash: must be a hash of 64 hex digits (0-9, a-f), or a prefix of one of at least 8"
    )
    assert refused(edit_models.PulseRequest, text="t", reason="r" * 1001) == (
        "reason: must be at most 1000 characters long"
    )


# ---- what the models refuse --------------------------------------------------------------------


def test_every_request_model_refuses_a_boolean_where_a_number_goes() -> None:
    checked = set()
    for model in REQUEST_MODELS:
        for name, boolean in _numeric_fields(model):
            with pytest.raises(pydantic.ValidationError) as caught:
                model.model_validate({name: boolean})
            mine = [e for e in caught.value.errors() if e["loc"][:1] == (name,)]
            assert [e["type"] for e in mine] in (["float_type"], ["int_type"]), (model, name, mine)
            assert "not true or false" in refusals.text_of(caught.value), (model, name)
            checked.add((model.__name__, name))
    assert {
        ("PulseRequest", "decay_per_hop"),
        ("SaveRequest", "stability"),
        ("RecallRequest", "vector"),
        ("RecallFilters", "created_after_ms"),
        ("TimelineRequest", "limit"),
        ("OutcomeRequest", "reward"),
        ("PinBody", "pin_floor"),
    } <= checked
    # Numbers as numbers still, and as text in a query string (the timeline's, say).
    assert edit_models.PulseRequest(text="t", decay_per_hop=0, k=2).decay_per_hop == 0.0
    assert report_models.TimelineRequest.model_validate({"limit": "5", "span_s": "60"}).limit == 5


@pytest.mark.parametrize(("model", "field", "given"), SAID)
def test_empty_and_blank_text_are_refused_alike_as_the_schema_says(
    model: type[pydantic.BaseModel], field: str, given: dict[str, Any]
) -> None:
    for text in ("", " ", "\t\n", "\u3000"):
        with pytest.raises(pydantic.ValidationError) as caught:
            model.model_validate({**given, field: text})
        assert [e["loc"] for e in caught.value.errors()] == [(field,)], (text, caught.value)
    model.model_validate({**given, field: " says something "})
    schema = model.model_json_schema()["properties"][field]
    stated = [s for s in (schema, *schema.get("anyOf", ())) if s.get("type") == "string"]
    assert stated == [{**stated[0], "minLength": 1, "pattern": refusals.NOT_BLANK}]


# ---- over HTTP -----------------------------------------------------------------------------------


def test_every_refusal_is_a_problem_detail_in_words(ops: Operations, stored: str) -> None:
    requests: list[tuple[str, str, Any]] = [
        ("POST", "/v1/pulses", {"text": "t", "decay_per_hop": False}),
        ("POST", "/v1/pulses", {"text": "t", "stability": False}),
        ("POST", "/v1/pulses", {"text": "t", "reason": ""}),
        ("POST", "/v1/pulses", {"text": "t", "reason": "  "}),
        ("POST", "/v1/memories", {"content": "c", "stability": False}),
        ("POST", "/v1/memories", {"content": "c", "importance": True}),
        ("POST", "/v1/recall", {"query": "q", "top_k": True, "filters": {"projekt": "x"}}),
        ("POST", "/v1/recall", {"vector": [1.0, 2.0, 3.0], "record": False}),
        ("POST", "/v1/outcomes", {"decision_hash": "ab" * 32, "reward": 1, "reason": "r"}),
        ("POST", f"/v1/memories/{stored}/reinforce", {"reason": " "}),
        ("POST", f"/v1/memories/{stored}/update", {}),
        ("GET", "/v1/memories/nohash", None),
        ("GET", "/v1/timeline?limit=true", None),
        ("GET", "/v1/nowhere", None),
        ("PUT", "/v1/memories", {"content": "c"}),
    ]
    answers = _http(ops, *requests)
    for (method, path, body), answer in zip(requests, answers, strict=True):
        where = (method, path, body, answer.text)
        assert 400 <= answer.status_code < 500, where
        assert answer.headers["content-type"] == PROBLEM_JSON, where
        assert not ELSEWHERE.search(answer.text), where
        problem = http_problems.Problem.model_validate_json(answer.content)
        assert (problem.type, problem.status) == ("about:blank", answer.status_code), where
        assert problem.title and problem.detail, where
        if problem.errors is not None:
            assert problem.detail == "; ".join(
                f"{refusals.field_name(e.loc, part_first=True)}: {e.msg}"
                for e in problem.errors
                if e.type != "json_invalid"
            ), where
    details = [answer.json()["detail"] for answer in answers]
    assert details[:7] == [
        "decay_per_hop: must be a number, not true or false",
        "stability: is not a field of this request (misspelt?)",
        "reason: must not be empty",
        "reason: must not be blank",
        "stability: must be a number, not true or false",
        "importance: must be an integer, not true or false",
        "top_k: must be an integer, not true or false; "
        "filters.projekt: is not a field of this request (misspelt?)",
    ]
    assert answers[8].status_code == 404 and "is not recorded here" in details[8]
    assert [answer.status_code for answer in answers[-2:]] == [404, 405]
    assert answers[-1].headers["allow"]


def test_the_openapi_document_states_the_rules_and_the_problem_media_type(
    ops: Operations,
) -> None:
    [answer] = _http(ops, ("GET", "/openapi.json", None))
    document = answer.json()
    schemas = document["components"]["schemas"]
    reason = schemas["PulseRequest"]["properties"]["reason"]["anyOf"][0]
    assert (reason["minLength"], reason["pattern"]) == (1, refusals.NOT_BLANK)
    assert schemas["Problem"]["required"] == ["title", "status", "detail"]
    refusal = document["paths"]["/v1/pulses"]["post"]["responses"]["422"]["content"]
    assert refusal == {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}


# ---- from MCP tools, the client, a command ------------------------------------------------------


def test_a_tools_refusal_is_the_text_http_answers_with(ops: Operations, stored: str) -> None:
    pairs: tuple[tuple[tuple[str, dict[str, Any]], tuple[str, str, Any]], ...] = (
        (("mem_save", {"content": "c", "importance": True}),
         ("POST", "/v1/memories", {"content": "c", "importance": True})),
        (("mem_save", {"content": "  "}), ("POST", "/v1/memories", {"content": "  "})),
        (("mem_reinforce", {"id": stored, "reason": " "}),
         ("POST", f"/v1/memories/{stored}/reinforce", {"reason": " "})),
        (("mem_outcome", {"decision_hash": "ab" * 32, "reward": 1, "reason": "r"}),
         ("POST", "/v1/outcomes", {"decision_hash": "ab" * 32, "reward": 1, "reason": "r"})),
        (("mem_update", {"id": stored}), ("POST", f"/v1/memories/{stored}/update", {})),
    )  # fmt: skip
    told = _tool_calls(ops, *(call for call, _ in pairs))
    answered = _http(ops, *(request for _, request in pairs))
    for (is_error, text), answer in zip(told, answered, strict=True):
        assert is_error, text
        assert not ELSEWHERE.search(text) and "Error executing tool" not in text, text
        assert text == answer.json()["detail"], (text, answer.text)
    [(is_error, text)] = _tool_calls(ops, ("mem_get_observation", {"id": "nohash"}))
    assert is_error and text.startswith("id: must be a hash of 64 hex digits"), text
    [(is_error, text)] = _tool_calls(ops, ("mem_search", {"query": "q", "projet": "p"}))
    assert is_error and text == "projet: is not a field of this request (misspelt?)", text


def test_every_tool_refuses_a_boolean_where_a_number_goes(ops: Operations) -> None:
    async def schemas() -> dict[str, dict[str, Any]]:
        async with Client(build_server(InProcess(ops, trio.CapacityLimiter(2)))) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}

    calls = [
        (name, {argument: True})
        for name, schema in trio.run(schemas).items()
        for argument, spec in schema["properties"].items()
        if _schema_kinds(spec) & {"number", "integer"}
    ]
    assert len(calls) >= 10
    for (name, arguments), (is_error, text) in zip(calls, _tool_calls(ops, *calls), strict=True):
        [argument] = arguments
        assert is_error and f"{argument}: must be" in text and "not true or false" in text, (
            name,
            text,
        )


def test_the_client_refuses_in_the_same_words_before_sending() -> None:
    with pytest.raises(BadRequest) as caught:
        request_model(edit_models.PulseRequest, text="t", decay_per_hop=False, reason="")
    assert str(caught.value) == (
        "decay_per_hop: must be a number, not true or false; reason: must not be empty"
    )


def test_a_command_prints_a_validation_failure_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    def refused() -> int:
        edit_models.SaveRequest(content="c", importance=11, colour="red")  # type: ignore[call-arg]
        return 0

    assert run_guarded(refused) == EXIT_USAGE
    error = capsys.readouterr().err
    assert error == (
        "error: importance: must be at most 10; "
        "colour: is not a field of this request (misspelt?)\n"
    )


# ---- what MCP clients are told about the server and its tools ----------------------------------


def test_the_server_reports_the_package_version_and_each_tools_effects(
    ops: Operations, rt: Runtime, stored: str
) -> None:
    async def listed() -> tuple[Any, list[Any]]:
        async with Client(build_server(InProcess(ops, trio.CapacityLimiter(2)))) as client:
            return client.server_info, (await client.list_tools()).tools

    info, tools = trio.run(listed)
    assert info.name == "dreamcycle"
    assert info.version == importlib.metadata.version("dreamcycle") != ""
    assert [tool.name for tool in tools] == list(contract.tool_names()) == [
        "mem_save", "mem_search", "mem_context", "mem_get_observation", "mem_stats",
        "mem_outcome", "mem_session_summary", "mem_pulse", "mem_delete", "mem_forgotten",
        "mem_supersede", "mem_explain", "mem_pin", "mem_unpin", "mem_reinforce",
        "mem_penalize", "mem_revive", "mem_update", "mem_timeline",
    ]  # fmt: skip
    for tool in tools:
        hints = tool.annotations
        assert hints is not None, tool.name
        assert None not in (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint)
        if hints.read_only_hint:
            assert (hints.destructive_hint, hints.idempotent_hint) == (False, True), tool.name
    read_only = {
        tool.name for tool in tools if tool.annotations and tool.annotations.read_only_hint
    }
    destructive = {
        tool.name for tool in tools if tool.annotations and tool.annotations.destructive_hint
    }
    assert destructive == {"mem_delete", "mem_update", "mem_supersede"}

    def state() -> tuple[Any, ...]:
        return tuple(
            rt.db.fetch_one(
                "SELECT (SELECT count(*) FROM attributions), (SELECT count(*) FROM outbox), "
                "(SELECT count(*) FROM journal), (SELECT count(*) FROM observations), "
                "(SELECT total(confidence) FROM observations)"
            )
        )

    readers = {
        "mem_get_observation": {"id": stored},
        "mem_stats": {},
        "mem_forgotten": {},
        "mem_explain": {"id": stored},
        "mem_timeline": {},
    }
    assert set(readers) == read_only
    before = state()
    assert not any(error for error, _ in _tool_calls(ops, *readers.items()))
    assert state() == before, "a tool said to be read only wrote"
    # A search records the decision it informs: not read only, and not idempotent.
    _tool_calls(ops, ("mem_search", {"query": "when do deploys go out"}))
    searched = state()
    assert searched != before
    _tool_calls(ops, ("mem_search", {"query": "when do deploys go out"}))
    assert state() != searched
    # A reinforce repeated is the pulse already queued, its confidence raised once.
    reinforce = ("mem_reinforce", {"id": stored, "reason": "it held"})
    _tool_calls(ops, reinforce)
    once = state()
    _tool_calls(ops, reinforce)
    assert state() == once
