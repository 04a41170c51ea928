"""daemon/api/client.py against a real `dreamcycle run` daemon, over its Unix socket and TCP.

One daemon serves the module; each test works on its own memories (told apart by
project), so the order tests run in does not matter.
"""

from __future__ import annotations

import asyncio
import math
import re
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import httpx
import pytest
import trio

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import edit_models
from dreamcycle.daemon.api.async_client import AsyncMemoryClient
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import (
    BadRequest,
    Conflict,
    NotFound,
    Unavailable,
    error_for,
)
from tests.api_helpers import TOKEN, ApiDaemon, free_port, running_api
from tests.daemon_helpers import Peer, wait_until


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("client")
    with running_api(Peer(root / "data", "client_peer", root / "zeitgeist")) as api:
        yield api


@pytest.fixture
def memory(served: ApiDaemon) -> Iterator[MemoryClient]:
    with MemoryClient(served.socket_path) as client:
        yield client


def _project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def test_save_recall_and_an_outcome_citing_a_prefix_over_the_socket(memory: MemoryClient) -> None:
    project = _project()
    saved = memory.save(
        f"The {project} ledger service closes the books at 02:00 UTC and locks late entries.",
        project=project,
        kind="fact",
        title="ledger close",
    )
    assert saved.created and saved.indexed and len(saved.content_hash) == 64
    resaved = memory.save(
        f"The {project} ledger service closes the books at 02:00 UTC and locks late entries.",
        project=project,
        kind="fact",
        title="ledger close",
    )
    # The same content saved again verifies it: only its confidence changes.
    assert resaved == saved.model_copy(update={"created": False, "confidence": resaved.confidence})
    assert resaved.confidence > saved.confidence

    found = memory.recall("when are the books closed", filters={"project": project})
    assert [hit.content_hash for hit in found.hits] == [saved.content_hash]
    assert found.decision_hash is not None

    cited = saved.content_hash[:10]
    queued = memory.outcome(found.decision_hash, 0.9, "closed on time", cited=[cited])
    assert queued.new and len(queued.entry_id) > 0
    again = memory.outcome(found.decision_hash, 0.9, "closed on time", cited=[saved.content_hash])
    assert again == edit_models.Queued(entry_id=queued.entry_id, new=False)  # the prefix resolved

    stored = memory.memory(saved.content_hash[:12])
    assert (stored.content_hash, stored.project, stored.kind, stored.state) == (
        saved.content_hash,
        project,
        "fact",
        "live",
    )
    assert memory.status().counts["live"] >= 1


def test_recall_by_vector_and_a_wrong_width_refused(
    served: ApiDaemon, memory: MemoryClient
) -> None:
    project = _project()
    saved = memory.save(
        f"{project}: the staging cluster runs three Redis replicas.", project=project
    )
    vector = served.peer.embeddings()[saved.content_hash]
    found = memory.recall(vector.tolist(), filters={"project": project}, explain=True)
    assert [hit.content_hash for hit in found.hits] == [saved.content_hash]
    assert found.hits[0].similarity == pytest.approx(1.0, abs=1e-4)
    assert found.hits[0].factors is not None
    with pytest.raises(BadRequest, match="vector has 3 components"):
        memory.recall([0.1, 0.2, 0.3])


def test_a_hash_is_taken_whole_or_by_a_prefix_only_it_has(memory: MemoryClient) -> None:
    project = _project()
    kept = memory.save(f"Builds of {project} are cached for a week.", project=project)
    wrong = memory.save(f"Builds of {project} are never cached.", project=project)
    decision = memory.recall(f"how long are builds of {project} cached").decision_hash
    assert decision is not None
    # A decision, a cited chunk and a chunk to retract, each by eight digits.
    queued = memory.outcome(decision[:8], 1.0, "cache hit", cited=[kept.content_hash[:8]])
    assert queued.new
    assert memory.tombstone(wrong.content_hash[:8], "wrong").new
    with pytest.raises(BadRequest, match="decision_hash"):
        memory.outcome(decision[:7], 1.0, "too short a prefix")


def test_errors_become_exceptions_with_the_reason(memory: MemoryClient) -> None:
    project = _project()
    unknown = "0" * 64
    with pytest.raises(NotFound, match=f"decision {unknown} is not recorded"):
        memory.outcome(unknown, 0.5, "never recalled")
    with pytest.raises(NotFound, match=f"chunk {unknown} is not stored"):
        memory.tombstone(unknown, "no such chunk")
    with pytest.raises(NotFound, match="no chunk stored here has a hash starting 00000000"):
        memory.memory("00000000")
    # Refused before it is sent, naming the field.
    with pytest.raises(BadRequest, match="reward"):
        memory.outcome(unknown, 2.0, "too good")
    with pytest.raises(BadRequest, match="topic_key_prefix"):
        memory.recall("anything", filters={"topic_key_prefix": ""})
    with pytest.raises(BadRequest, match=r"colour: is not a field of this request \(misspelt\?\)"):
        memory.recall("anything", filters={"colour": "blue"})

    content = f"{project}: the old VPN endpoint is vpn1.example.org."
    saved = memory.save(content, project=project)
    memory.tombstone(saved.content_hash, "decommissioned")
    wait_until(
        lambda: memory.memory(saved.content_hash).state == "tombstoned",
        what="the next cycle to apply the tombstone",
    )
    with pytest.raises(Conflict, match="retracted"):
        memory.save(content, project=project)


def test_supersede_saves_now_and_retracts_the_old_at_the_next_cycle(
    memory: MemoryClient,
) -> None:
    project = _project()
    old = memory.save(f"{project}: builds use Python 3.10.", project=project, topic_key="ci/python")
    replaced = memory.supersede(
        old.content_hash, f"{project}: builds use Python 3.11.", "upgraded", project=project
    )
    assert replaced.saved.created and replaced.queued.new
    assert memory.memory(replaced.saved.content_hash).state == "live"
    wait_until(
        lambda: memory.memory(old.content_hash).state == "tombstoned",
        what="the supersede to apply",
    )
    with pytest.raises(Conflict, match="retracted"):
        memory.supersede(old.content_hash, f"{project}: builds use Python 3.12.", "again")
    forgotten = memory.forgotten(limit=5)
    assert forgotten.cold == len(forgotten.chunks) == 0  # nothing swept in a fresh store


def test_tcp_needs_the_token(served: ApiDaemon) -> None:
    with MemoryClient(url=served.url, token=TOKEN) as memory:
        project = _project()
        saved = memory.save(f"{project}: on-call rotates every Monday at 09:00.", project=project)
        found = memory.recall("when does on-call rotate", filters={"project": project})
        assert found.hits[0].content_hash == saved.content_hash
    with MemoryClient(url=served.url) as anonymous, pytest.raises(BadRequest, match="bearer"):
        anonymous.status()


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_async_client_under_trio_and_asyncio(served: ApiDaemon, backend: str) -> None:
    project = _project()

    async def save_and_recall() -> tuple[str, list[str]]:
        async with AsyncMemoryClient(served.socket_path) as memory:
            saved = await memory.save(
                f"{project}: the {backend} worker drains its queue before shutdown.",
                project=project,
            )
            found = await memory.recall(
                "what happens to the queue at shutdown", filters={"project": project}, record=False
            )
            with pytest.raises(NotFound):
                await memory.memory("f" * 64)
            return saved.content_hash, [hit.content_hash for hit in found.hits]

    digest, hits = (
        trio.run(save_and_recall) if backend == "trio" else asyncio.run(save_and_recall())
    )
    assert hits == [digest]


def test_unavailable_when_no_daemon_answers(tmp_path: Path) -> None:
    with (
        MemoryClient(tmp_path / "api.sock") as memory,
        pytest.raises(Unavailable, match="no dreamcycle daemon answers"),
    ):
        memory.status()
    with (
        MemoryClient(url=f"http://127.0.0.1:{free_port()}") as memory,
        pytest.raises(Unavailable),
    ):
        memory.ping()

    async def ping() -> None:
        async with AsyncMemoryClient(tmp_path / "api.sock") as memory:
            await memory.ping()

    with pytest.raises(Unavailable):
        trio.run(ping)


def test_one_client_shared_by_threads(served: ApiDaemon, memory: MemoryClient) -> None:
    # More threads than the client keeps connections: the rest wait for one.
    project = _project()
    saved = memory.save(
        f"{project}: the nightly export lands in bucket exports-eu.", project=project
    )

    def recalled(_: int) -> list[str]:
        found = memory.recall("where does the export land", filters={"project": project})
        return [hit.content_hash for hit in found.hits]

    with ThreadPoolExecutor(max_workers=3 * defaults.CLIENT_CONNECTIONS) as pool:
        answers = list(pool.map(recalled, range(40)))
    assert answers == [[saved.content_hash]] * 40


#: Hypercorn closes a connection idle this long unless told otherwise (its default).
SERVER_DEFAULT_KEEP_ALIVE_S: Final = 5.0


def test_a_connection_idle_past_the_servers_default_is_kept_open(served: ApiDaemon) -> None:
    """A request sent on a kept connection as the server closes it is reset unanswered: the
    daemon keeps idle connections open for API_KEEP_ALIVE_S, not the few seconds an agent
    leaves between two calls all the time."""
    with MemoryClient(served.socket_path) as memory:
        memory.recall("where does the export land")
        first = open_sockets(memory)
        time.sleep(SERVER_DEFAULT_KEEP_ALIVE_S + 1.0)
        memory.recall("where does the export land")
        # The same socket served both: none was found closed and opened again.
        assert len(first) == 1 and open_sockets(memory) == first


def open_sockets(memory: MemoryClient) -> set[int]:
    """The sockets of the client's kept connections (urllib3 pool internals)."""
    kept = list(memory._pool.pool.queue)  # type: ignore[union-attr]
    return {id(conn.sock) for conn in kept if conn is not None and conn.sock is not None}


def test_a_client_outlives_a_daemon_restart(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "restarted_peer", tmp_path / "zeitgeist")
    with running_api(peer) as served:
        memory = MemoryClient(served.socket_path)
        saved = memory.save("The build farm's cache is pruned every Sunday.")
    # The connection it kept alive was closed with the daemon: it is not reused.
    with running_api(peer), memory:
        assert memory.memory(saved.content_hash).state == "live"


@pytest.fixture
def silent_socket(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that accepts connections and never answers."""
    path = tmp_path / "silent.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join()
    for connection in accepted:
        connection.close()
    listener.close()


def test_a_daemon_that_does_not_answer_times_out(silent_socket: Path) -> None:
    with (
        MemoryClient(silent_socket, timeout_s=0.2) as memory,
        pytest.raises(Unavailable, match="did not answer in time"),
    ):
        memory.status()

    async def status() -> None:
        async with AsyncMemoryClient(silent_socket, timeout_s=0.2) as memory:
            await memory.status()

    with pytest.raises(Unavailable, match="did not answer in time"):
        trio.run(status)


def test_the_blocking_client_leaves_httpx_unimported() -> None:
    # A command that reaches the daemon starts a tenth of a second sooner without it.
    imported = subprocess.run(
        [sys.executable, "-c",
         "import sys, dreamcycle.daemon.api.client; print('httpx' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert imported.stdout.strip() == "False"


#: Arguments the request models refuse, and the reason's start: BadRequest before sending.
REFUSED_LOCALLY: Final = (
    (lambda m: m.recall(None), "query: give a text, or an embedding"),
    (lambda m: m.recall(5), "query: give a text, or an embedding"),
    (lambda m: m.recall(b"bytes"), "query: give a text, or an embedding"),
    (lambda m: m.recall(["a"]), "vector[0]: must be a number"),
    (lambda m: m.recall([True]), "vector[0]: must be a number, not true or false"),
    (lambda m: m.recall([0.5, math.inf]), "vector[1]: must be a finite number"),
    (lambda m: m.recall("x", min_relevance=math.inf), "min_relevance: must be a finite number"),
    (lambda m: m.recall("x", min_confidence=math.nan), "min_confidence: must be a finite"),
    (lambda m: m.save("x", confidence=math.nan), "confidence: must be a finite number"),
    (lambda m: m.save("x", stability=False), "stability: must be a number, not true or false"),
    (lambda m: m.save(" \t"), "content: must not be blank"),
    (lambda m: m.outcome("a" * 64, -math.inf, "r"), "reward: must be a finite number"),
    (lambda m: m.outcome("a" * 64, 2.0, "r"), "reward: must be at most 1"),
    (lambda m: m.pulse("t", ttl_s=math.inf), "ttl_s: must be a finite number"),
    (lambda m: m.pulse("t", reason=""), "reason: must not be empty"),
    (lambda m: m.pulse("t", reason="  "), "reason: must not be blank"),
    (lambda m: m.pin("a" * 64, math.nan), "pin_floor: must be a finite number"),
    (lambda m: m.timeline(span_s=math.inf), "span_s: must be a finite number"),
)


def test_what_the_models_refuse_raises_bad_request_and_nothing_is_sent(tmp_path: Path) -> None:
    """No daemon answers at the socket: a request sent would raise Unavailable."""
    with MemoryClient(tmp_path / "absent.sock") as memory:
        for call, reason in REFUSED_LOCALLY:
            with pytest.raises(BadRequest, match=re.escape(reason)) as caught:
                call(memory)
            assert "pydantic" not in str(caught.value)
        with pytest.raises(Unavailable):
            memory.status()

    async def refused() -> None:
        async with AsyncMemoryClient(tmp_path / "absent.sock") as memory:
            for query in (None, 5, ["a"], [math.nan]):
                with pytest.raises(BadRequest, match=r"^(query|vector)"):
                    await memory.recall(query)  # type: ignore[arg-type]
            with pytest.raises(BadRequest, match="min_relevance"):
                await memory.recall("x", min_relevance=math.inf)

    trio.run(refused)


def test_a_host_the_daemon_does_not_answer_for_is_a_bad_request(served: ApiDaemon) -> None:
    """The daemon answers 421 to a request naming a host other than its own over TCP: the
    caller's URL is wrong, not the daemon."""
    port = served.url.rsplit(":", 1)[1]
    answer = httpx.get(f"{served.url}/v1/status", headers={"Host": f"elsewhere.example:{port}"})
    assert answer.status_code == 421
    assert error_for(answer.status_code) is BadRequest
