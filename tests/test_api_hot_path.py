"""The per-turn operations answered beside FastAPI (daemon/api/hot_path.py): the same
answers as FastAPI's routes give, without FastAPI for a well-formed request, and FastAPI's
own refusals for anything else. In process over ASGI, on a real store and embedder."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import httpx
import pytest
import trio

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import edit_models, http, http_problems, recall_models, report_models
from dreamcycle.daemon.api.hot_path import HOT_ROUTES, Asgi, Receive, Scope, Send, hot_path
from dreamcycle.daemon.api.http import create_app
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.runtime import Runtime
from tests.api_helpers import attached_operations, opened_runtime

NOW_MS = 1_700_000_000_000
MAX_BODY_BYTES = 1 << 16
JSON = {"content-type": "application/json"}
MEMORIES = (
    "Deployments go out on Tuesdays after the integration suite passes on staging.",
    "S3 writes are retried with exponential backoff, at most five times.",
    "The coffee machine is descaled every second Friday.",
)


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    with opened_runtime(tmp_path_factory.mktemp("hot_path"), "hot", NOW_MS) as opened:
        yield opened


@pytest.fixture(scope="module")
def ops(rt: Runtime) -> Iterator[Operations]:
    with attached_operations(rt) as (_, operations):
        for content in MEMORIES:
            operations.save(edit_models.SaveRequest(content=content, project="ops"))
        yield operations


class Counted:
    """An ASGI app, counting the HTTP requests that reach it."""

    def __init__(self, app: Asgi) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.requests += scope["type"] == "http"
        await self.app(scope, receive, send)


Exchange = Callable[[httpx.AsyncClient], Awaitable[httpx.Response]]


def _both(ops: Operations, exchange: Exchange) -> tuple[httpx.Response, httpx.Response, int]:
    """`exchange` with FastAPI alone, then through the hot path; and how many of the
    latter's requests reached FastAPI."""

    async def run() -> tuple[httpx.Response, httpx.Response, int]:
        limiter = trio.CapacityLimiter(2)
        fastapi = Counted(create_app(ops, limiter))
        hot = hot_path(fastapi, ops, limiter, MAX_BODY_BYTES)
        answers = []
        for app in (fastapi, hot):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://dc") as client:
                answers.append(await exchange(client))
            if app is fastapi:
                fastapi.requests = 0
        return answers[0], answers[1], fastapi.requests

    return trio.run(run)


def _posting(path: str, body: dict[str, Any]) -> Exchange:
    async def exchange(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post(path, json=body)

    return exchange


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/recall", {"query": "when do deployments go out", "record": False}),
        ("/v1/recall", {"query": "retries", "record": False, "explain": True, "top_k": 2}),
        ("/v1/context", {"task": "ship the deploy on Tuesday", "record": False}),
    ],
)
def test_a_well_formed_request_is_answered_as_fastapi_answers_it_without_fastapi(
    ops: Operations, path: str, body: dict[str, Any]
) -> None:
    alone, hot, reached = _both(ops, _posting(path, body))
    assert alone.status_code == hot.status_code == 200, (alone.text, hot.text)
    assert hot.headers["content-type"] == alone.headers["content-type"]
    if path == "/v1/context":
        # The bundle reports how long it took: everything else must match.
        alone_body, hot_body = alone.json(), hot.json()
        assert alone_body.pop("latency_ms") >= 0 and hot_body.pop("latency_ms") >= 0
        assert hot_body == alone_body
    else:
        assert hot.json() == alone.json() and hot.json()["hits"]
    assert reached == 0


def test_recall_by_vector_and_a_save_are_answered_without_fastapi(
    rt: Runtime, ops: Operations
) -> None:
    vector = rt.embedder.embed_one("retry policy for object storage writes").tolist()
    alone, hot, reached = _both(ops, _posting("/v1/recall", {"vector": vector, "record": False}))
    assert hot.status_code == 200 and hot.json() == alone.json()
    assert reached == 0

    async def save_twice(client: httpx.AsyncClient) -> httpx.Response:
        return await client.post("/v1/memories", json={"content": "Standups are at 9:30."})

    first, again, reached = _both(ops, save_twice)
    assert first.status_code == again.status_code == 200
    assert first.json()["content_hash"] == again.json()["content_hash"]
    assert first.json()["created"] and not again.json()["created"]
    assert reached == 0


def test_an_operations_error_gets_the_status_and_reason_fastapi_gives(ops: Operations) -> None:
    unknown = {"decision_hash": "ab" * 32, "reward": 1.0, "reason": "worked"}
    alone, hot, reached = _both(ops, _posting("/v1/outcomes", unknown))
    assert alone.status_code == hot.status_code == 404
    assert hot.json() == alone.json() and "decision" in hot.json()["detail"]
    assert reached == 0
    # The model accepts it; the operation refuses it (a ValueError): 422 either way.
    wrong_length = {"vector": [1.0, 2.0, 3.0], "record": False}
    alone, hot, reached = _both(ops, _posting("/v1/recall", wrong_length))
    assert alone.status_code == hot.status_code == 422
    assert hot.json() == alone.json() and "components" in hot.json()["detail"]
    assert reached == 0


@pytest.mark.parametrize(
    ("method", "path", "content", "headers"),
    [
        ("POST", "/v1/recall", b'{"query": "a", "vector": [1.0]}', JSON),
        ("POST", "/v1/recall", b'{"query": "a", "topk": 3}', JSON),
        ("POST", "/v1/context", b"{not json", JSON),
        ("POST", "/v1/memories", b"", JSON),
        ("POST", "/v1/outcomes", b"[]", {"content-type": "application/problem+json"}),
        ("POST", "/v1/recall", b'{"query": "deployments"}', {"content-type": "text/plain"}),
        ("POST", "/v1/memories", b'{"content": "typed as text"}', {"content-type": "text/json"}),
        # An integer too long for a float: FastAPI refuses it; read as JSON alone, it is inf.
        ("POST", "/v1/recall", b'{"query": "a", "min_relevance": 1' + b"0" * 400 + b"}", JSON),
        ("POST", "/v1/recall", b'{"vector": [1' + b"0" * 400 + b"]}", JSON),
        # JSON allows a lone surrogate; the reasons quote it, escaped.
        ("POST", "/v1/recall", b'{"query": "\\ud800"}', JSON),
        ("POST", "/v1/memories", b'{"content": "caf\xc3\xa9", "kind": "\\udfff"}', JSON),
        ("POST", "/v1/recall", b'{"query": "deployments"}', {}),
        ("GET", "/v1/recall", b"", {}),
        ("PUT", "/v1/memories", b'{"content": "x"}', JSON),
    ],
)
def test_anything_else_gets_fastapis_own_answer(
    ops: Operations, method: str, path: str, content: bytes, headers: dict[str, str]
) -> None:
    async def exchange(client: httpx.AsyncClient) -> httpx.Response:
        return await client.request(method, path, content=content, headers=headers)

    alone, hot, reached = _both(ops, exchange)
    assert 400 <= alone.status_code < 500
    assert (hot.status_code, hot.json()) == (alone.status_code, alone.json())
    assert reached == 1


def test_a_body_without_a_declared_length_is_bounded(ops: Operations) -> None:
    async def chunked(client: httpx.AsyncClient) -> httpx.Response:
        async def parts() -> Any:
            for _ in range(4):
                yield b" " * MAX_BODY_BYTES

        return await client.post("/v1/recall", content=parts(), headers=JSON)

    _, hot, reached = _both(ops, chunked)
    assert hot.status_code == 413 and str(MAX_BODY_BYTES) in hot.json()["detail"]
    assert reached == 0


def test_fastapi_bounds_a_body_without_a_declared_length_too(ops: Operations) -> None:
    async def chunked(client: httpx.AsyncClient) -> httpx.Response:
        async def parts() -> Any:
            for _ in range(3):
                yield b" " * defaults.API_MAX_BODY_BYTES

        return await client.post("/v1/pulses", content=parts(), headers=JSON)

    alone, hot, reached = _both(ops, chunked)
    assert alone.status_code == hot.status_code == 413
    assert reached == 1


def test_the_server_runs_the_guard_then_the_hot_path_then_fastapi(
    rt: Runtime, ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What `serve` hands Hypercorn: TCP requests without the token never reach the hot
    path; with it, a recall is answered there and a status by FastAPI."""
    reaching_fastapi: list[Counted] = []

    def counted_app(*args: Any, **kwargs: Any) -> Counted:
        reaching_fastapi.append(Counted(create_app(*args, **kwargs)))
        return reaching_fastapi[-1]

    monkeypatch.setattr(http, "create_app", counted_app)
    config = dataclasses.replace(rt.config, api=dataclasses.replace(rt.config.api, token="t"))

    async def exchanges() -> list[int]:
        app = http.served_app(ops, config)
        # The transport names a server address, as Hypercorn does for TCP connections.
        transport = httpx.ASGITransport(app=app)
        statuses = []
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for token in ("", "Bearer t"):
                recall = await client.post(
                    "/v1/recall",
                    json={"query": "deployments", "record": False},
                    headers={"authorization": token},
                )
                statuses.append(recall.status_code)
            status = await client.get("/v1/status", headers={"authorization": "Bearer t"})
            statuses.append(status.status_code)
        return statuses

    assert trio.run(exchanges) == [401, 200, 200]
    assert reaching_fastapi[0].requests == 1  # the status alone


def test_without_a_token_tcp_answers_only_requests_naming_this_server(
    rt: Runtime, ops: Operations
) -> None:
    """No token is set by default: the Host header alone keeps a page that reached the
    loopback port through a name of its own (DNS rebinding) from reading or saving."""
    assert rt.config.api.bearer_token() == ""
    config = dataclasses.replace(rt.config, api=dataclasses.replace(rt.config.api, host="10.1.2.3"))

    async def exchanges() -> list[tuple[str, int]]:
        transport = httpx.ASGITransport(app=http.served_app(ops, config))
        statuses = []
        async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
            for host in ("attacker.example:9465", "attacker.example", "10.1.2.4", "::1", ""):
                for method, path, body in (
                    ("GET", "/v1/timeline", None),
                    ("POST", "/v1/memories", {"content": "planted by a web page"}),
                    ("POST", "/v1/recall", {"query": "deployments", "record": False}),
                ):
                    answer = await client.request(method, path, json=body, headers={"host": host})
                    assert (
                        "Host" in http_problems.Problem.model_validate_json(answer.content).detail
                    )
                    statuses.append((host, answer.status_code))
            for host in ("localhost:9465", "127.0.0.1", "127.0.0.1:9465", "[::1]:9465", "10.1.2.3"):
                answer = await client.get("/v1/status", headers={"host": host})
                statuses.append((host, answer.status_code))
        return statuses

    answered = trio.run(exchanges)
    assert {status for _, status in answered[:15]} == {421}
    assert {status for _, status in answered[15:]} == {200}, answered
    planted = ops.timeline(report_models.TimelineRequest()).memories
    assert "planted by a web page" not in [memory.preview for memory in planted]


def test_every_hot_route_is_declared_with_its_body_model(ops: Operations) -> None:
    """The OpenAPI description comes from FastAPI's routes: each hot route must be one,
    taking the body the hot path validates."""

    async def document() -> dict[str, Any]:
        return create_app(ops, trio.CapacityLimiter(1)).openapi()

    paths = trio.run(document)["paths"]
    for path, route in HOT_ROUTES.items():
        body = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["$ref"].rsplit("/", 1)[-1] == route.body.__name__, path


class RolledBack(Exception):
    pass


def _recalled(
    ops: Operations, monkeypatch: pytest.MonkeyPatch, body: dict[str, Any]
) -> tuple[int, bool]:
    """A recall through the hot path: its status, and whether it read in the event loop's
    thread."""
    readers: list[int] = []
    reading = ops._reading

    @contextlib.contextmanager
    def noted() -> Iterator[Runtime]:
        readers.append(threading.get_ident())
        with reading() as view:
            yield view

    async def run() -> int:
        limiter = trio.CapacityLimiter(2)
        app = hot_path(create_app(ops, limiter), ops, limiter, MAX_BODY_BYTES)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dc") as client:
            return (await client.post("/v1/recall", json=body)).status_code

    with monkeypatch.context() as patched:
        patched.setattr(ops, "_reading", noted)
        status = trio.run(run)
    assert len(readers) == 1
    return status, readers[0] == threading.get_ident()


def test_a_recall_by_vector_recording_nothing_is_answered_on_the_event_loop(
    rt: Runtime, ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    vector = rt.embedder.embed_one("retry policy for object storage writes").tolist()
    quick = {"vector": vector, "record": False}
    _recalled(ops, monkeypatch, quick)  # the first search finds how the cold tier is searched
    assert _recalled(ops, monkeypatch, quick) == (200, True)
    taken = []  # every read connection busy: a new one is opened in a worker, not here
    while not ops._readers.empty():
        taken.append(ops._readers.get_nowait())
    try:
        assert not ops.recall_at_once(recall_models.RecallRequest(vector=vector, record=False))
    finally:
        for view in taken:
            ops._readers.put(view)
    for elsewhere in (
        {"vector": vector},  # recorded: it writes
        {"query": "retry policy", "record": False},  # embedded
        {"vector": vector, "record": False, "filters": {"project": "ops"}},
    ):
        assert _recalled(ops, monkeypatch, elsewhere) == (200, False), elsewhere


def test_after_the_database_changes_state_the_next_such_recall_reads_in_a_worker(
    rt: Runtime, ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a recall reads once per state (tier sets, learned keys, a small cold tier's
    embeddings) is read again after a change: in a worker, not on the event loop."""
    vector = rt.embedder.embed_one("which bucket holds the nightly backups").tolist()
    quick = {"vector": vector, "record": False}
    _recalled(ops, monkeypatch, quick)
    assert _recalled(ops, monkeypatch, quick) == (200, True)
    ops.save(
        edit_models.SaveRequest(content="Nightly backups go to the archive bucket.", project="ops")
    )
    assert _recalled(ops, monkeypatch, quick) == (200, False)
    assert _recalled(ops, monkeypatch, quick) == (200, True)
    # A recall by text reads at the new state too: the next by vector needs no trip.
    ops.save(edit_models.SaveRequest(content="Restores are tested every quarter.", project="ops"))
    ops.recall(recall_models.RecallRequest(query="restore tests", record=False))
    assert _recalled(ops, monkeypatch, quick) == (200, True)


def test_after_a_rollback_empties_what_recall_keeps_the_next_such_recall_reads_in_a_worker(
    rt: Runtime, ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rollback leaves the database's state as it was but empties the caches; read again
    on the event loop, a large cold tier's sets would hold every other request up."""
    vector = rt.embedder.embed_one("which bucket holds the nightly backups").tolist()
    quick = {"vector": vector, "record": False}
    _recalled(ops, monkeypatch, quick)
    assert _recalled(ops, monkeypatch, quick) == (200, True)
    with ops._writing() as writer, pytest.raises(RolledBack), writer.db.transaction():
        writer.db.set_meta("rolled back", "yes")
        raise RolledBack
    assert _recalled(ops, monkeypatch, quick) == (200, False)
    assert _recalled(ops, monkeypatch, quick) == (200, True)


def test_a_context_bundle_reads_at_the_new_state_for_the_next_such_recall(
    rt: Runtime, ops: Operations, monkeypatch: pytest.MonkeyPatch
) -> None:
    vector = rt.embedder.embed_one("which bucket holds the nightly backups").tolist()
    quick = {"vector": vector, "record": False}
    _recalled(ops, monkeypatch, quick)
    ops.save(edit_models.SaveRequest(content="Restores are tested every quarter.", project="ops"))
    ops.context(recall_models.ContextRequest(task="restore tests", record=False))
    assert _recalled(ops, monkeypatch, quick) == (200, True)


def test_while_the_index_is_written_that_recall_waits_in_a_worker_and_the_loop_serves_on(
    rt: Runtime, ops: Operations
) -> None:
    """Answered on the loop, a recall waiting for the index's writer would hold every other
    request up until the writer let go (here after 10 s)."""
    vector = rt.embedder.embed_one("retry policy for object storage writes").tolist()
    ops.recall(
        recall_models.RecallRequest(vector=vector, record=False)
    )  # the cold tier known quick
    assert ops.recall_at_once(recall_models.RecallRequest(vector=vector, record=False))
    index = ops._require_peer().index
    holding, release = threading.Event(), threading.Event()
    answered: list[tuple[str, int]] = []

    def write() -> None:
        with index._lock.writing():
            holding.set()
            release.wait(10)

    async def run() -> None:
        limiter = trio.CapacityLimiter(2)
        app = hot_path(create_app(ops, limiter), ops, limiter, MAX_BODY_BYTES)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://dc") as client:

            async def recall() -> None:
                response = await client.post("/v1/recall", json={"vector": vector, "record": False})
                answered.append(("recall", response.status_code))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(recall)
                await trio.sleep(0.2)  # the recall waits for the writer meanwhile
                answered.append(("healthz", (await client.get("/healthz")).status_code))
                release.set()

    writer = threading.Thread(target=write)
    writer.start()
    try:
        assert holding.wait(10)
        assert ops.recall_at_once(recall_models.RecallRequest(vector=vector, record=False)) is False
        trio.run(run)
    finally:
        release.set()
        writer.join()
    assert answered == [("healthz", 200), ("recall", 200)]
