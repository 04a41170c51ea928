"""The MCP tools, driven by the `mcp` SDK's own clients: `dreamcycle mcp` over stdio, and the
daemon's /mcp endpoint over streamable HTTP (Unix socket, and TCP with the token).

The store is prepared the way a user would: chunks ingested, admitted by one cycle, and
half of them swept into the cold tier (so mem_forgotten has something to show); then a
daemon with the API on serves the module.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import signal
import subprocess
import time
import tomllib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import httpx
import httpx2
import pytest
import trio
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent

from dreamcycle.daemon.api import contract, mcp_server
from dreamcycle.daemon.cli.common import EXIT_UNAVAILABLE
from dreamcycle.daemon.defaults import MCP_PATH
from tests.api_helpers import TOKEN, ApiDaemon, running_api
from tests.daemon_helpers import DREAMCYCLE, Peer, documentation_chunks, write_jsonl
from tests.test_contract import openapi_fields

#: A whole MCP conversation (process start included) takes a few seconds.
SESSION_TIMEOUT_S: Final = 60.0
SWEPT_PROJECT: Final = "archive"
#: Enough chunks of one kind for the sweep to rank them (it skips smaller kinds).
ARCHIVE_CHUNKS: Final = 12


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("mcp")
    peer = Peer(root / "data", "mcp_peer", root / "zeitgeist")
    archive = documentation_chunks(["for", "while", "try", "with"], limit=ARCHIVE_CHUNKS)
    chunks = write_jsonl(
        root / "archive.jsonl", [{**chunk, "project": SWEPT_PROJECT} for chunk in archive]
    )
    peer.dreamcycle("ingest", str(chunks))
    peer.dreamcycle("run", "--once")
    peer.dreamcycle(
        "sweep",
        "--percentile", "50", "--min-population", "1",
        settings={"DREAMCYCLE_SWEEP_GRACE_S": "0"},
    )  # fmt: skip
    with running_api(peer) as api:
        yield api


def cold_hashes(peer: Peer) -> set[str]:
    return {str(r[0]) for r in peer.query("SELECT content_hash FROM observations WHERE cold_at")}


@asynccontextmanager
async def stdio_session(peer: Peer, errlog: Path) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(
        command=DREAMCYCLE, args=["mcp", *peer.options()], env=peer.environment()
    )
    with errlog.open("w") as log:
        async with (
            stdio_client(server, errlog=log) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@asynccontextmanager
async def http_session(socket_path: str) -> AsyncIterator[ClientSession]:
    """An MCP session with the daemon's /mcp endpoint, over its Unix socket. The callers
    bound the whole conversation; a single call may take more than httpx's default five
    seconds on a busy machine."""
    http = httpx2.AsyncClient(
        transport=httpx2.AsyncHTTPTransport(uds=socket_path),
        timeout=httpx2.Timeout(SESSION_TIMEOUT_S),
    )
    async with (
        http,
        streamable_http_client(f"http://localhost{MCP_PATH}", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def answer(result: CallToolResult) -> Any:
    """A successful call's structured answer (a text tool's text)."""
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    assert not result.is_error, text
    if result.structured_content is None:
        return json.loads(text)
    content = result.structured_content
    return content.get("result", content) if set(content) == {"result"} else content


def refusal(result: CallToolResult) -> str:
    text = "".join(c.text for c in result.content if isinstance(c, TextContent))
    assert result.is_error, f"expected a tool error, got {text}"
    return text


async def within_timeout(conversation: Callable[[], Awaitable[None]]) -> None:
    with trio.fail_after(SESSION_TIMEOUT_S):
        await conversation()


async def call(session: ClientSession, tool: str, **arguments: Any) -> Any:
    return answer(await session.call_tool(tool, arguments))


def test_stdio_tools_save_search_cite_and_curate(served: ApiDaemon, tmp_path: Path) -> None:
    peer = served.peer

    async def conversation() -> None:
        async with stdio_session(peer, tmp_path / "mcp.log") as session:
            assert len(cold_hashes(peer)) >= 1  # the sweep before the daemon started
            listed = await session.list_tools()
            assert [t.name for t in listed.tools] == list(contract.tool_names())
            assert all(t.description and t.input_schema["type"] == "object" for t in listed.tools)

            content = "Staging deploys need the VPN; production deploys go through the bastion."
            saved = await call(
                session,
                "mem_save",
                content=content,
                title="deploy access",
                project="ops",
                topic_key="deploy/access",
            )
            assert saved["created"] and saved["indexed"]
            digest = saved["content_hash"]

            found = await call(
                session, "mem_search", query="how do I reach staging to deploy", project="ops"
            )
            assert [h["content_hash"] for h in found["hits"]] == [digest]
            decision = found["decision_hash"]
            queued = await call(
                session,
                "mem_outcome",
                decision_hash=decision,
                reward=1.0,
                reason="deployed",
                cited=[digest[:10]],
            )
            assert queued["new"]

            observed = await call(session, "mem_get_observation", id=digest[:12])
            assert (observed["content"], observed["state"]) == (content, "live")
            context = await call(
                session, "mem_context", query="deploying to staging", project="ops"
            )
            assert context.startswith("decision ") and content in context
            assert f"[{digest[:12]}]" in context

            forgotten = await call(session, "mem_forgotten")
            assert forgotten["cold"] == len(cold_hashes(peer))
            assert {c["content_hash"] for c in forgotten["chunks"]} == cold_hashes(peer)
            stats = await call(session, "mem_stats")
            assert stats["counts"]["cold"] == forgotten["cold"]

            updated = await call(
                session,
                "mem_update",
                id=digest[:16],
                reason="new bastion",
                content=content.replace("the bastion", "bastion-2"),
            )
            new_hash = updated["content_hash"]
            assert updated["superseded"]["saved"]["content_hash"] == new_hash
            new = await call(session, "mem_get_observation", id=new_hash)
            assert (new["project"], new["topic_key"], new["title"]) == (
                "ops",
                "deploy/access",
                "deploy access",
            )
            summary = await call(
                session,
                "mem_session_summary",
                content="Moved deploys to bastion-2.",
                session_id="s-42",
                project="ops",
            )
            stored = await call(session, "mem_get_observation", id=summary["content_hash"])
            assert (stored["kind"], stored["topic_key"]) == ("summary", "session/s-42")
            deleted = await call(session, "mem_delete", id=summary["content_hash"], reason="dup")
            assert deleted["new"]

            unknown = "0" * 64
            assert "is not recorded here" in refusal(
                await session.call_tool(
                    "mem_outcome",
                    {"decision_hash": unknown, "reward": 0.5, "reason": "never recalled"},
                )
            )
            assert "no chunk stored here has a hash starting 0123456789abcdef" in refusal(
                await session.call_tool("mem_get_observation", {"id": "0123456789abcdef"})
            )
            assert "the new content is the old content" in refusal(
                await session.call_tool("mem_update", {"id": new_hash})
            )
            malformed = refusal(await session.call_tool("mem_get_observation", {"id": "nohash"}))
            assert malformed.startswith("id: must be a hash of 64 hex digits"), malformed
            assert "pydantic" not in malformed

    trio.run(within_timeout, conversation)
    # At the default level, `dreamcycle mcp` logs nothing per call: not httpx's line for each
    # request it sent the daemon, nor the SDK's for each tool call.
    assert (tmp_path / "mcp.log").read_text() == ""


def test_mcp_told_not_to_start_a_daemon_exits_3_and_says_why(tmp_path: Path) -> None:
    lonely = Peer(tmp_path / "data", "lonely", tmp_path / "zeitgeist")
    result = lonely.dreamcycle("mcp", "--no-start", expect=EXIT_UNAVAILABLE)
    assert "no dreamcycle daemon answers" in result.stderr
    assert result.stdout == ""  # stdout belongs to the protocol
    assert not (tmp_path / "data" / "dreamcycle.db").exists()


def printed_entry(client: str, env: dict[str, str], data_dir: Path) -> str:
    printed = subprocess.run(
        [DREAMCYCLE, "mcp", "--print-config", client, "--data-dir", str(data_dir)],
        capture_output=True, text=True, env=env, check=True, timeout=SESSION_TIMEOUT_S,
    )  # fmt: skip
    return printed.stdout


def test_a_printed_entry_starts_memory_for_a_new_user(tmp_path: Path) -> None:
    """What a new user does: print the entry for their client, put it in its config, and
    let the client start the server. No daemon runs and the data directory is empty: the
    server makes the peer's key, starts the daemon, and serves memory through it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    env["DREAMCYCLE_ZEITGEIST_DIR"] = str(tmp_path / "zeitgeist")
    data_dir = tmp_path / "data"
    entries = {
        "claude-desktop": json.loads(printed_entry("claude-desktop", env, data_dir))["mcpServers"],
        "cursor": json.loads(printed_entry("cursor", env, data_dir))["mcpServers"],
        "claude-code": json.loads(printed_entry("claude-code", env, data_dir))["mcpServers"],
        "vscode": json.loads(printed_entry("vscode", env, data_dir))["servers"],
        "codex": tomllib.loads(printed_entry("codex", env, data_dir))["mcp_servers"],
    }
    commands = {
        (e["dreamcycle"]["command"], tuple(e["dreamcycle"]["args"])) for e in entries.values()
    }
    assert len(commands) == 1  # every client starts the same server
    entry = entries["claude-desktop"]["dreamcycle"]
    assert Path(entry["command"]).is_absolute()
    assert entry["env"]["DREAMCYCLE_PEER_DATA_DIR"] == str(data_dir.resolve())

    async def conversation() -> None:
        server = StdioServerParameters(
            command=entry["command"], args=entry["args"], env={**env, **entry["env"]}
        )
        with (tmp_path / "mcp.log").open("w") as log:
            async with (
                stdio_client(server, errlog=log) as (read, write),
                ClientSession(read, write) as session,
            ):
                started = await session.initialize()
                assert started.server_info.version == importlib.metadata.version("dreamcycle")
                text = "The release branch is cut every Tuesday."
                saved = await call(session, "mem_save", content=text)
                found = await call(session, "mem_search", query="when is the release branch cut")
                assert found["hits"][0]["content_hash"] == saved["content_hash"]

    try:
        trio.run(within_timeout, conversation)
        # The daemon outlives the agent's session, as it would under systemd.
        assert daemon_alive(data_dir)
        assert (data_dir / "peer.key").exists()
        assert "started a daemon" in (tmp_path / "mcp.log").read_text()
    finally:
        stop_daemon(data_dir)


def daemon_pid(data_dir: Path) -> int | None:
    lock = data_dir / "daemon.lock"
    text = lock.read_text().split() if lock.exists() else []
    return int(text[1]) if len(text) == 2 and text[0] == "pid" else None


def daemon_alive(data_dir: Path) -> bool:
    pid = daemon_pid(data_dir)
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def stop_daemon(data_dir: Path) -> None:
    pid = daemon_pid(data_dir)
    if pid is None or not daemon_alive(data_dir):
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + SESSION_TIMEOUT_S
    while daemon_alive(data_dir) and time.monotonic() < deadline:
        time.sleep(0.1)
    if daemon_alive(data_dir):
        os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("over", ["unix", "tcp"])
def test_streamable_http_endpoint(served: ApiDaemon, over: str) -> None:
    # The whole conversation is bounded (within_timeout); a call alone may take seconds on a
    # busy machine (the first builds the tools), past httpx's default of 5.
    timeout = httpx2.Timeout(SESSION_TIMEOUT_S)
    if over == "unix":
        transport = httpx2.AsyncHTTPTransport(uds=served.socket_path)
        http = httpx2.AsyncClient(transport=transport, timeout=timeout)
        url = f"http://localhost{MCP_PATH}"
    else:
        headers = {"authorization": f"Bearer {TOKEN}"}
        http = httpx2.AsyncClient(headers=headers, timeout=timeout)
        url = f"{served.url}{MCP_PATH}"

    async def conversation() -> None:
        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            assert [t.name for t in (await session.list_tools()).tools] == list(
                contract.tool_names()
            )
            text = f"Over {over}, the MCP endpoint answers inside the daemon process."
            saved = await call(session, "mem_save", content=text, project=f"http-{over}")
            found = await call(
                session,
                "mem_search",
                query="where does the MCP endpoint answer",
                project=f"http-{over}",
            )
            assert [h["content_hash"] for h in found["hits"]] == [saved["content_hash"]]
            assert "is not recorded here" in refusal(
                await session.call_tool(
                    "mem_outcome", {"decision_hash": "1" * 64, "reward": 1, "reason": "x"}
                )
            )

    logged_before = len(served.daemon.log().splitlines())
    trio.run(within_timeout, conversation)
    # At the default level the daemon logs nothing per call (the SDK's "Terminating
    # session" ended each): only what its cycles log.
    lines = served.daemon.log().splitlines()[logged_before:]
    assert not [line for line in lines if "Terminating session" in line], lines
    logged = [json.loads(line) for line in lines if line.startswith("{")]
    assert not [line for line in logged if not line["logger"].startswith("dreamcycle.")], logged


def test_streamable_http_over_tcp_needs_the_token(served: ApiDaemon) -> None:
    response = httpx2.post(
        f"{served.url}{MCP_PATH}",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"accept": "application/json, text/event-stream"},
    )
    assert response.status_code == 401


def test_unknown_arguments_are_refused_naming_them(served: ApiDaemon, tmp_path: Path) -> None:
    """As the HTTP API refuses unknown fields: a misspelt filter must not match everything,
    a misspelt reason must not be dropped. Over stdio and the daemon's /mcp alike."""

    async def refused_in(session: ClientSession, over: str) -> None:
        project = f"misspelt-{over}"
        listed = (await session.list_tools()).tools
        assert all(tool.input_schema.get("additionalProperties") is False for tool in listed)
        content = f"Over {over}, a misspelt argument is refused, not ignored."
        digest = (await call(session, "mem_save", content=content, project=project))["content_hash"]
        for tool, arguments, unknown in (
            ("mem_search", {"query": "misspelt argument", "projet": project}, "projet"),
            ("mem_delete", {"id": digest, "reasn": "wrong"}, "reasn"),
            ("mem_save", {"content": f"{content} Again.", "colour": "red"}, "colour"),
            ("mem_stats", {"verbose": True}, "verbose"),
        ):
            reason = refusal(await session.call_tool(tool, arguments))
            assert reason == f"{unknown}: is not a field of this request (misspelt?)", reason
        assert (await call(session, "mem_get_observation", id=digest))["state"] == "live"
        found = await call(session, "mem_search", query="misspelt argument", project=project)
        assert [hit["content_hash"] for hit in found["hits"]] == [digest]

    async def conversation() -> None:
        async with stdio_session(served.peer, tmp_path / "mcp.log") as session:
            await refused_in(session, "stdio")
        async with http_session(served.socket_path) as session:
            await refused_in(session, "http")

    trio.run(within_timeout, conversation)


def test_tools_listed_to_a_client_state_what_openapi_states(served: ApiDaemon) -> None:
    """Through the SDK's client: each listed tool's arguments carry the limits of the
    request field they fill in the daemon's own /openapi.json, and its annotations say
    what its operation does (daemon/api/contract.py)."""
    listed: list[Any] = []

    async def conversation() -> None:
        async with http_session(served.socket_path) as session:
            listed.extend((await session.list_tools()).tools)

    trio.run(within_timeout, conversation)
    with httpx.Client(transport=httpx.HTTPTransport(uds=served.socket_path)) as http:
        document = http.get("http://localhost/openapi.json").json()
    compared = 0
    for tool in listed:
        op = contract.operation_of_tool(tool.name)
        effects = op.effects
        hints = tool.annotations
        assert hints is not None
        assert (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint) == (
            effects.read_only,
            effects.destructive,
            effects.idempotent,
        ), tool.name
        fields = openapi_fields(document, op)
        for name, argument in tool.input_schema["properties"].items():
            field = name if name in fields else mcp_server.RENAMED.get(name, name)
            if field in fields:
                stated = {k: v for k, v in argument.items() if k in mcp_server.BOUNDS}
                expected = {k: v for k, v in fields[field].items() if k in mcp_server.BOUNDS}
                assert stated == expected, f"{tool.name}.{name}"
                compared += 1
    assert len(listed) == len(contract.tool_names()) and compared > 50
