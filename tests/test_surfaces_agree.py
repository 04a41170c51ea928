"""Every surface gives the same answer to the same operation on the same store.

One store (chunks ingested, one cycle run, some swept to the cold tier) is served by a
real daemon whose clock is a file that never moves, so nothing changes between two
asks. Each read operation of the table is asked over HTTP, through both clients, as an
MCP tool (the daemon's /mcp endpoint, through the SDK's client) and as a command, and
the answers compared as JSON; a queued write (a pin) is asked on every surface in turn,
and each answers with the same entry, the first as new and the rest as the repeat.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import trio

from dreamcycle.daemon.api import contract, edit_models, model_fields, report_models
from dreamcycle.daemon.api.async_client import AsyncMemoryClient
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_wire import Endpoint
from dreamcycle.daemon.cli.access.protocol import DAEMON_ONLY_STATUS
from tests.api_helpers import ApiDaemon, running_api
from tests.daemon_helpers import Peer, documentation_chunks, wait_until, write_jsonl
from tests.test_mcp import answer, http_session

FROZEN_MS: Final = 1_750_000_000_000
IDLE_INTERVAL_S: Final = "3600"
TIMEOUT_S: Final = 60.0


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("surfaces")
    clock = root / "clock"
    clock.write_text(str(FROZEN_MS), encoding="utf-8")
    settings = {
        "DREAMCYCLE_CLOCK_SOURCE": "file",
        "DREAMCYCLE_CLOCK_FILE": str(clock),
        "DREAMCYCLE_SWEEP_ENABLED": "false",
        "DREAMCYCLE_SWEEP_GRACE_S": "0",
    }
    peer = Peer(root / "data", "surfaces", root / "zeitgeist", settings)
    rows = documentation_chunks(("for", "while", "try", "with"), 20)
    chunks = [{**row, "importance": number % 11} for number, row in enumerate(rows)]
    peer.dreamcycle("ingest", str(write_jsonl(root / "chunks.jsonl", chunks)))
    peer.dreamcycle("run", "--once")
    peer.dreamcycle("sweep", "--percentile", "30", "--min-population", "5")
    with running_api(peer, interval_s=IDLE_INTERVAL_S) as api:
        # The daemon's own first cycle (after `run --once`'s) ended: with the interval an
        # hour, no other runs while the surfaces are asked.
        wait_until(lambda: peer.cycles_done() >= 2, what="the daemon's first cycle")
        yield api


def a_chunk(served: ApiDaemon, cold: bool) -> str:
    rows = served.peer.query(
        "SELECT content_hash FROM observations WHERE type != 'efficacy' AND "
        f"cold_at IS {'NOT ' if cold else ''}NULL ORDER BY content_hash LIMIT 1"
    )
    assert rows, f"no {'cold' if cold else 'live'} chunk"
    return str(rows[0][0])


def over_http(served: ApiDaemon, op: contract.Operation[Any, Any], request: Any) -> Any:
    fields = {} if request is None else request.model_dump(mode="json", exclude_defaults=True)
    path = op.path.format(**{name: fields.pop(name) for name in op.path_fields})
    with httpx.Client(transport=httpx.HTTPTransport(uds=served.socket_path)) as http:
        if op.method == "GET":
            answered = http.get(f"http://localhost{path}", params=fields)
        else:
            answered = http.post(f"http://localhost{path}", json=fields)
    assert answered.status_code == 200, answered.text
    return answered.json()


def through_clients(served: ApiDaemon, op: contract.Operation[Any, Any], request: Any) -> Any:
    endpoint = Endpoint(socket_path=Path(served.socket_path))
    with MemoryClient(endpoint=endpoint) as blocking:
        first = blocking.send(op, request).model_dump(mode="json")

    async def asynchronously() -> Any:
        async with AsyncMemoryClient(endpoint=endpoint) as client:
            return (await client.send(op, request)).model_dump(mode="json")

    second = trio.run(asynchronously)
    assert first == second, op.name
    return first


def as_tool(served: ApiDaemon, tool: str, arguments: dict[str, Any]) -> Any:
    async def conversation() -> Any:
        with trio.fail_after(TIMEOUT_S):
            async with http_session(served.socket_path) as session:
                return answer(await session.call_tool(tool, arguments))

    return trio.run(conversation)


def as_command(served: ApiDaemon, words: list[str]) -> Any:
    done: subprocess.CompletedProcess[str] = served.peer.dreamcycle(*words, "--json")
    return json.loads(done.stdout)


Ask = Callable[
    [ApiDaemon], tuple[contract.Operation[Any, Any], Any, str, dict[str, Any], list[str]]
]

#: Each read: the operation and its request, the tool and its arguments, the command.
READS: Final[dict[str, Ask]] = {
    "status": lambda s: (contract.STATUS, None, "mem_stats", {}, ["status"]),
    "memory": lambda s: (
        contract.MEMORY, report_models.MemoryRequest(ref=a_chunk(s, cold=False)[:10]),
        "mem_get_observation", {"id": a_chunk(s, cold=False)[:10]},
        ["show", a_chunk(s, cold=False)[:10]],
    ),
    "explain": lambda s: (
        contract.EXPLAIN, model_fields.RefRequest(ref=a_chunk(s, cold=True)),
        "mem_explain", {"id": a_chunk(s, cold=True)}, ["explain", a_chunk(s, cold=True)],
    ),
    "timeline": lambda s: (
        contract.TIMELINE, report_models.TimelineRequest(limit=5, offset=1),
        "mem_timeline", {"limit": 5, "offset": 1}, ["timeline", "--limit", "5", "--offset", "1"],
    ),
    "forgotten": lambda s: (
        contract.FORGOTTEN, report_models.ForgottenRequest(limit=3),
        "mem_forgotten", {"limit": 3}, ["forgotten", "--limit", "3"],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(READS))
def test_every_surface_reads_the_same(served: ApiDaemon, name: str) -> None:
    op, request, tool, arguments, words = READS[name](served)
    http = over_http(served, op, request)
    assert through_clients(served, op, request) == http
    assert as_tool(served, tool, arguments) == http
    if name != "forgotten":  # `forgotten --json` prints its own shape (a page, not the answer)
        # `status` leaves out what only a daemon knows, so that its direct way prints alike.
        expected = {k: v for k, v in http.items() if k not in DAEMON_ONLY_STATUS}
        assert as_command(served, words) == (expected if name == "status" else http)


def test_a_pin_asked_on_every_surface_is_one_entry(served: ApiDaemon) -> None:
    ref = a_chunk(served, cold=False)
    request = edit_models.PinRequest(ref=ref, pin_floor=0.4)
    asks: list[Callable[[], Any]] = [
        lambda: over_http(served, contract.PIN, request),
        lambda: through_clients(served, contract.PIN, request),
        lambda: as_tool(served, "mem_pin", {"id": ref, "pin_floor": 0.4}),
        lambda: as_command(served, ["pin", ref, "--pin-floor", "0.4"]),
    ]
    answers = [ask() for ask in asks]
    assert answers[0]["new"] is True
    assert all(a == {**answers[0], "new": False} for a in answers[1:]), answers
