"""Adding an operation is one entry in daemon/api/contract.py and one `Operations` method:
an operation the code has never seen, added that way here, is served by every surface
(the HTTP route and its OpenAPI description, an MCP tool with its schema and
annotations, a method of both clients, a command), each refusing what its request model
refuses.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from typing import Any, cast

import httpx
import pytest
import trio
from mcp import Client
from mcp_types import TextContent
from pydantic import BaseModel, Field

from dreamcycle.daemon.api import contract, model_fields
from dreamcycle.daemon.api.async_client import AsyncMemoryClient
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import BadRequest
from dreamcycle.daemon.api.client_wire import with_every_operation
from dreamcycle.daemon.api.http import create_app
from dreamcycle.daemon.api.mcp_server import InProcess, build_server
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.cli import operation_verbs
from dreamcycle.daemon.cli.main import build_parser
from dreamcycle.daemon.scheduling.requests_first import RequestsFirst

REF = "0123abcd"


class EchoRequest(model_fields.Strict):
    ref: str = Field(pattern=model_fields.HASH_OR_UNIQUE_PREFIX)
    words: str = Field(min_length=1, max_length=20, description="what to say back")
    times: model_fields.Integer = Field(default=1, ge=1, le=3)


class Echo(BaseModel):
    ref: str
    said: str


#: The new operation: its path carries the chunk, its body the rest.
ECHO: contract.Operation[EchoRequest, Echo] = contract.Operation(
    "echo", "POST", "/v1/memories/{ref}/echo", EchoRequest, Echo,
    "say the words back", contract.READS, (contract.NOT_FOUND,), command="echo",
    rules="a ref of all zeros is not known (404)",
)  # fmt: skip


class CountRequest(model_fields.Strict):
    words: str = Field(min_length=1, max_length=20)
    times: model_fields.Integer = Field(default=1, ge=1, le=3)


#: A second one, read by a GET's query.
COUNT: contract.Operation[CountRequest, Echo] = contract.Operation(
    "count", "GET", "/v1/counts", CountRequest, Echo, "count the words", contract.READS,
    command="count",
)  # fmt: skip


class EchoOperations:
    """What the HTTP routes and the MCP tools call: `Operations`' own, plus `echo`."""

    def __init__(self) -> None:
        self.requests_first = RequestsFirst(0.0)
        self.requests: list[EchoRequest] = []

    def echo(self, request: EchoRequest) -> Echo:
        from dreamcycle.daemon.api.errors import NotFound

        if set(request.ref) == {"0"}:
            raise NotFound(f"no chunk {request.ref}")
        self.requests.append(request)
        return Echo(ref=request.ref, said=" ".join([request.words] * request.times))

    def count(self, request: CountRequest) -> Echo:
        return Echo(ref="", said=str(len(request.words.split()) * request.times))


@pytest.fixture
def added(monkeypatch: pytest.MonkeyPatch) -> Iterator[EchoOperations]:
    monkeypatch.setattr(contract, "OPERATIONS", (*contract.OPERATIONS, ECHO, COUNT))
    yield EchoOperations()


def test_the_http_api_serves_and_describes_it(added: EchoOperations) -> None:
    ops = cast(Operations, added)

    async def run() -> tuple[dict[str, Any], list[httpx.Response]]:
        app = create_app(ops, trio.CapacityLimiter(2))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dc") as client:
            sent = [
                await client.post(f"/v1/memories/{REF}/echo", json={"words": "hi", "times": 2}),
                await client.post(f"/v1/memories/{REF}/echo", json={"words": "hi", "times": 4}),
                await client.post(f"/v1/memories/{REF}/echo", json={"words": "hi", "loud": 1}),
                await client.post("/v1/memories/nothex/echo", json={"words": "hi"}),
                await client.post("/v1/memories/00000000/echo", json={"words": "hi"}),
                await client.get("/v1/counts", params={"words": "a b c", "times": 2}),
                await client.get("/v1/counts", params={"words": "a", "times": 9}),
            ]
            return app.openapi(), sent

    document, (ok, too_many, unknown, bad_ref, unknown_ref, counted, over) = trio.run(run)
    assert counted.status_code == 200 and counted.json()["said"] == "6"
    assert over.status_code == 422 and "times" in over.text
    query = {p["name"]: p for p in document["paths"][COUNT.path]["get"]["parameters"]}
    assert query["words"]["in"] == "query" and query["times"]["schema"]["maximum"] == 3
    assert ok.status_code == 200 and ok.json() == {"ref": REF, "said": "hi hi"}
    assert added.requests == [EchoRequest(ref=REF, words="hi", times=2)]
    assert too_many.status_code == unknown.status_code == bad_ref.status_code == 422
    assert "times" in too_many.text and "loud" in unknown.text
    assert unknown_ref.status_code == 404 and "no chunk" in unknown_ref.text
    described = document["paths"][ECHO.path]["post"]
    assert described["summary"] == ECHO.summary and described["description"] == ECHO.rules
    assert {"200", "404", "422"} <= set(described["responses"])
    (ref,) = described["parameters"]
    assert ref["schema"]["pattern"] == model_fields.HASH_OR_UNIQUE_PREFIX
    body = document["components"]["schemas"]["EchoRequestBody"]
    assert body["properties"]["words"]["maxLength"] == 20
    assert body["properties"]["times"]["maximum"] == 3
    assert body["additionalProperties"] is False


def test_an_mcp_tool_serves_it_with_the_same_limits(added: EchoOperations) -> None:
    ops = cast(Operations, added)

    async def run() -> tuple[Any, list[tuple[bool, str]]]:
        async with Client(build_server(InProcess(ops, trio.CapacityLimiter(2)))) as client:
            listed = (await client.list_tools()).tools
            calls: list[dict[str, Any]] = [
                {"ref": REF, "words": "yo", "times": 3},
                {"ref": REF, "words": "yo", "times": True},
                {"ref": REF, "words": "x" * 21},
                {"ref": "00000000", "words": "yo"},
            ]
            results = [await client.call_tool("mem_echo", arguments) for arguments in calls]
            results.append(await client.call_tool("mem_count", {"words": "a b", "times": 3}))
        said = [
            (
                bool(result.is_error),
                "".join(c.text for c in result.content if isinstance(c, TextContent)),
            )
            for result in results
        ]
        return next(tool for tool in listed if tool.name == "mem_echo"), said

    tool, said = trio.run(run)
    (failed, text), (boolean, _), (too_long, _), (missing, reason), (_, counted) = said
    assert json.loads(counted)["said"] == "6"
    assert not failed and json.loads(text) == {"ref": REF, "said": "yo yo yo"}
    assert boolean and too_long and missing and "no chunk" in reason
    assert tool.description.startswith("Say the words back.") and ECHO.rules in tool.description
    properties = tool.input_schema["properties"]
    assert properties["words"]["maxLength"] == 20 and properties["times"]["maximum"] == 3
    assert properties["ref"]["pattern"] == model_fields.HASH_OR_UNIQUE_PREFIX
    assert tool.input_schema["required"] == ["ref", "words"]
    hints = tool.annotations
    assert hints is not None and hints.read_only_hint and hints.idempotent_hint


@pytest.mark.parametrize("client", [MemoryClient, AsyncMemoryClient])
def test_both_clients_have_a_method_for_it(added: EchoOperations, client: type) -> None:
    sent: list[tuple[contract.Operation[Any, Any], Any]] = []

    def record(self: Any, route: contract.Operation[Any, Any], request: Any) -> Echo:
        sent.append((route, request))
        return Echo(ref=getattr(request, "ref", ""), said=request.words)

    async def record_async(self: Any, route: contract.Operation[Any, Any], request: Any) -> Echo:
        return record(self, route, request)

    asynchronous = client is AsyncMemoryClient
    completed = with_every_operation(
        type("Completed", (client,), {"send": record_async if asynchronous else record})
    )
    memory = completed(url="http://127.0.0.1:9")

    def called(operation: str, **fields: Any) -> Any:
        answer = getattr(memory, operation)(**fields)
        return trio.run(lambda: answer) if asynchronous else answer

    assert called("echo", ref=REF, words="hello") == Echo(ref=REF, said="hello")
    assert called("count", words="a b") == Echo(ref="", said="a b")
    assert sent == [(ECHO, EchoRequest(ref=REF, words="hello")), (COUNT, CountRequest(words="a b"))]
    sent.clear()
    with pytest.raises(BadRequest, match="times"):
        called("echo", ref=REF, words="hello", times=7)
    assert sent == []  # refused before anything was sent


def test_a_command_runs_it(added: EchoOperations) -> None:
    assert ECHO in operation_verbs.served() and COUNT in operation_verbs.served()
    parser = build_parser()
    subcommands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    echo = subcommands.choices["echo"]
    assert "Say the words back." in echo.description and ECHO.rules in echo.description
    reader = argparse.ArgumentParser()
    arguments = operation_verbs._arguments(reader, ECHO)
    request = operation_verbs._request(
        reader.parse_args([REF, "hey", "--times", "2"]), ECHO, arguments
    )
    assert request == EchoRequest(ref=REF, words="hey", times=2)
    with pytest.raises(BadRequest, match="times"):
        operation_verbs._request(reader.parse_args([REF, "hey", "--times", "5"]), ECHO, arguments)
