"""Every surface states each operation as daemon/api/contract.py declares it.

The OpenAPI document (made by FastAPI from the routes), the MCP tools (their input
schemas and annotations), both clients and the commands are each compared with the
table: an operation a surface lacks, or states otherwise (another path, summary,
refusal, annotation, or a limit an MCP argument leaves out), fails here.
"""

from __future__ import annotations

import argparse
from typing import Any, cast

import pytest
import trio

from dreamcycle.daemon.api import contract, mcp_server, mcp_tool_base
from dreamcycle.daemon.api.async_client import AsyncMemoryClient
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.http import create_app
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.cli.main import build_parser as dreamcycle_parser
from dreamcycle.daemon.cli.pulse_emit import build_parser as pulse_emit_parser

#: What the guard answers before any route, and every operation while the index loads.
GUARDED = {"401", "413", "421", "503"}
#: What a route with a body answers for one it cannot read or that breaks a rule.
BODY = {"400", "422"}
#: Tool arguments that fill no request field of their operation: mem_delete finds the
#: memory by reference first, and tombstones it by its whole hash.
NO_FIELD = {("mem_delete", "id")}


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    # The document is made from the routes alone: no operation runs.
    app = create_app(cast(Operations, None), trio.CapacityLimiter(1))
    return app.openapi()


def _schema(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        schema = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    for alternative in schema.get("anyOf", ()):
        if alternative.get("type") != "null":
            return {**schema, **_schema(document, alternative)}
    return schema


def openapi_fields(document: dict[str, Any], op: contract.Operation[Any, Any]) -> dict[str, Any]:
    """Every field the HTTP operation takes, by name: path and query parameters, the body's
    properties, and a recall's filters beside them."""
    described = document["paths"][op.path][op.method.lower()]
    fields = {p["name"]: _schema(document, p["schema"]) for p in described.get("parameters", [])}
    body = described.get("requestBody", {}).get("content", {}).get("application/json")
    if body is not None:
        properties = _schema(document, body["schema"]).get("properties", {})
        for name, schema in properties.items():
            fields[name] = _schema(document, schema)
        if "filters" in fields:
            fields = {**fields["filters"].get("properties", {}), **fields}
    return {name: _schema(document, schema) for name, schema in fields.items()}


def test_every_operation_is_served_over_http_as_declared(openapi: dict[str, Any]) -> None:
    served = {
        (path, method.upper())
        for path, methods in openapi["paths"].items()
        if path.startswith("/v1/")
        for method in methods
    }
    assert served == {(op.path, op.method) for op in contract.OPERATIONS}
    for op in contract.OPERATIONS:
        described = openapi["paths"][op.path][op.method.lower()]
        assert described["summary"] == op.summary, op.name
        assert described.get("description") == (op.rules or None), op.name
        refusals = GUARDED | (BODY if op.takes_body else set()) | {str(s) for s in op.refusals}
        assert set(described["responses"]) == {"200"} | refusals, op.name
        answer = described["responses"]["200"]["content"]["application/json"]["schema"]
        assert answer["$ref"].endswith(f"/{op.response.__name__}"), op.name


def test_every_tool_reaches_an_operation_and_says_what_it_does() -> None:
    declared = [tool for op in contract.OPERATIONS for tool in op.tool_names]
    assert len(set(declared)) == len(declared)
    server = mcp_server.build_server(cast(mcp_tool_base.Transport, None))
    served = server._tool_manager.list_tools()
    # Every operation is reached by a tool the server lists, and every tool it lists by one.
    assert sorted(tool.name for tool in served) == sorted(declared)
    assert {op.name for op in contract.OPERATIONS if not op.tools} == {"pulse", "supersede"}
    for tool in served:
        effects = contract.operation_of_tool(tool.name).effects
        hints = tool.annotations
        assert hints is not None
        said = (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint)
        assert said == (effects.read_only, effects.destructive, effects.idempotent), tool.name


def test_every_tool_argument_states_the_limits_of_the_field_it_fills(
    openapi: dict[str, Any],
) -> None:
    server = mcp_server.build_server(cast(mcp_tool_base.Transport, None))
    unmatched = set()
    compared = 0
    for tool in server._tool_manager.list_tools():
        op = contract.operation_of_tool(tool.name)
        fields = openapi_fields(openapi, op)
        for name, argument in tool.parameters["properties"].items():
            field = name if name in fields else mcp_server.RENAMED.get(name, name)
            if field not in fields:
                unmatched.add((tool.name, name))
                continue
            stated = {k: v for k, v in argument.items() if k in mcp_server.BOUNDS}
            expected = {k: v for k, v in fields[field].items() if k in mcp_server.BOUNDS}
            assert stated == expected, f"{tool.name}.{name} against {op.path} {field}"
            compared += 1
    assert unmatched == NO_FIELD
    assert compared > 50


@pytest.mark.parametrize("client", [MemoryClient, AsyncMemoryClient])
def test_both_clients_have_a_method_per_operation(client: type) -> None:
    assert [
        op.name for op in contract.OPERATIONS if not callable(getattr(client, op.name, None))
    ] == []


def _parser_of(words: list[str]) -> argparse.ArgumentParser | None:
    programs = {"dreamcycle": dreamcycle_parser(), "pulse-emit": pulse_emit_parser()}
    if words[0] in programs:
        parser, rest = programs[words[0]], words[1:]
    else:
        parser, rest = programs["dreamcycle"], words
    for word in rest:
        choices = next(
            (a.choices for a in parser._actions if isinstance(a, argparse._SubParsersAction)), {}
        )
        if word not in choices:
            return None
        parser = choices[word]
    return parser


def test_every_operation_has_a_command() -> None:
    missing = [
        op.name
        for op in contract.OPERATIONS
        if not op.command or _parser_of(op.command.split()) is None
    ]
    assert missing == []
