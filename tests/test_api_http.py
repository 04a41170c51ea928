"""The local HTTP API of a real `dreamcycle run` daemon, over its Unix socket and loopback TCP.

One daemon (short cycle interval, token set) serves the whole module; each test
works on its own memories, told apart by project, so the order tests run in
does not matter.
"""

from __future__ import annotations

import socket
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.core.result import Ok

from dreamcycle.daemon.api import models
from dreamcycle.daemon.api.operations import Operations
from tests.daemon_helpers import Daemon, Peer, wait_until

TOKEN: Final = "token-for-tests"
SOCKET_NAME: Final = "api.sock"
#: Cycles run every second, so the learning test waits seconds, not the default 30.
INTERVAL_S: Final = "1"
#: Generated requests per operation in the schema run (seven operations).
FUZZ_EXAMPLES: Final = 40

MEMORIES: Final = {
    "retry": "S3 writes are retried with exponential backoff and jitter, at most five times, "
    "and a conditional put that fails with 412 is never retried.",
    "deploy": "Deployments go out on Tuesdays after the integration suite passes on the "
    "staging cluster; a failed canary rolls back automatically.",
    "tests": "The integration tests are flaky when the local Redis server is started without "
    "a fixed port; pin it in the test configuration.",
    "coffee": "The office coffee machine is descaled every second Friday by whoever arrives first.",
}


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Api:
    """The running daemon, reached over both transports."""

    def __init__(self, peer: Peer, daemon: Daemon, port: int) -> None:
        self.peer = peer
        self.daemon = daemon
        self.socket_path = peer.data_dir / SOCKET_NAME
        self.tcp_url = f"http://127.0.0.1:{port}"
        self.unix = httpx.Client(
            transport=httpx.HTTPTransport(uds=str(self.socket_path)),
            base_url="http://dreamcycle",
            timeout=30.0,
        )

    def post(self, path: str, body: dict[str, Any], expect: int = 200) -> Any:
        response = self.unix.post(path, json=body)
        assert response.status_code == expect, f"{path} {body}: {response.text}"
        return response.json()

    def save(self, content: str, **fields: Any) -> str:
        return str(self.post("/v1/memories", {"content": content, **fields})["content_hash"])

    def recall(self, query: str, **fields: Any) -> dict[str, Any]:
        return dict(self.post("/v1/recall", {"query": query, **fields}))


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("api")
    port = _free_port()
    peer = Peer(
        root / "data",
        "api_peer",
        root / "zeitgeist",
        settings={
            "DREAMCYCLE_API_ENABLED": "true",
            "DREAMCYCLE_API_PORT": str(port),
            "DREAMCYCLE_API_TOKEN": TOKEN,
        },
    )
    with peer.start("--interval", INTERVAL_S) as daemon:
        daemon.wait_ready()
        client = Api(peer, daemon, port)
        wait_until(
            lambda: client.socket_path.exists() and client.unix.get("/readyz").status_code == 200,
            what="the API to become ready",
            context=daemon.log_tail,
        )
        yield client
        client.unix.close()
        assert daemon.terminate() == 0, daemon.log_tail()


def _project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def _hashes(result: dict[str, Any]) -> list[str]:
    return [hit["content_hash"] for hit in result["hits"]]


def test_a_saved_memory_is_recalled_at_once_and_a_repeat_is_a_duplicate(api: Api) -> None:
    project = _project()
    content = f"The {project} billing service rounds invoice totals half-even to the cent."
    saved = api.post("/v1/memories", {"content": content, "project": project})
    assert saved["created"] and saved["indexed"]
    found = api.recall("how are invoice totals rounded in billing", record=False)
    assert _hashes(found)[0] == saved["content_hash"]
    assert found["decision_hash"] is None
    again = api.post("/v1/memories", {"content": content, "project": project})
    # Saved again: a verification, so only its confidence changes (up).
    assert again == {**saved, "created": False, "confidence": again["confidence"]}
    assert again["confidence"] > saved["confidence"]


def test_recall_filters_by_project_kind_topic_and_time(api: Api) -> None:
    alpha, beta = _project(), _project()
    text = "Cache entries for {} expire after ten minutes of inactivity."
    in_alpha = api.save(text.format("alpha"), project=alpha, kind="fact", topic_key="cache/ttl")
    in_beta = api.save(text.format("beta"), project=beta, kind="note", topic_key="cache/size")
    query = "when do cache entries expire"
    both = set(_hashes(api.recall(query, top_k=20, record=False)))
    assert {in_alpha, in_beta} <= both
    only_alpha = api.recall(query, filters={"project": alpha}, record=False)
    assert _hashes(only_alpha) == [in_alpha]
    by_kind = api.recall(query, filters={"project": beta, "kind": "note"}, record=False)
    assert _hashes(by_kind) == [in_beta]
    by_topic = api.recall(query, filters={"topic_key_prefix": "cache/si"}, record=False)
    assert in_beta in _hashes(by_topic) and in_alpha not in _hashes(by_topic)
    before_epoch = api.recall(query, filters={"created_before_ms": 1}, record=False)
    assert before_epoch["hits"] == []
    none_match = api.recall(query, filters={"project": alpha, "kind": "note"}, record=False)
    assert none_match == {"decision_hash": None, "hits": []}


def test_recall_by_vector_with_explanations(api: Api) -> None:
    project = _project()
    digest = api.save(f"{project}: the nightly backup job writes to the cold storage bucket.")
    by_text = api.recall("nightly backup to cold storage", explain=True, record=False)
    assert _hashes(by_text)[0] == digest
    factors = by_text["hits"][0]["factors"]
    assert factors["vector_rank"] >= 1 and factors["relevance"] > 0
    width = len(api.peer.embeddings()[digest])
    vector = [float(x) for x in api.peer.embeddings()[digest]]
    by_vector = api.post("/v1/recall", {"vector": vector, "record": False})
    assert _hashes(by_vector)[0] == digest and by_vector["hits"][0]["factors"] is None
    wrong = api.post("/v1/recall", {"vector": [1.0] * (width - 1)}, expect=422)
    assert str(width) in wrong["detail"]
    strict = api.recall("nightly backup to cold storage", min_relevance=1.0, record=False)
    assert strict["hits"] == []


def test_an_outcome_cites_a_recalled_chunk_by_prefix(api: Api) -> None:
    project = _project()
    digest = api.save(
        f"{project}: feature flags are read once per request, never cached.", project=project
    )
    result = api.recall("are feature flags cached per request", filters={"project": project})
    decision = result["decision_hash"]
    assert decision and _hashes(result) == [digest]
    attributed = api.peer.scalar(
        "SELECT chunk_hashes_json FROM attributions WHERE decision_hash = ?", (decision,)
    )
    assert digest in attributed
    body = {"decision_hash": decision, "reward": 0.9, "reason": "it worked", "cited": [digest[:10]]}
    queued = api.post("/v1/outcomes", body)
    assert queued["new"]
    assert api.post("/v1/outcomes", body) == {**queued, "new": False}
    stored = api.peer.scalar("SELECT body FROM outbox WHERE entry_id = ?", (queued["entry_id"],))
    assert digest in stored
    unknown = api.post("/v1/outcomes", {**body, "decision_hash": "0" * 64}, expect=404)
    assert "0" * 64 in unknown["detail"]
    not_recalled = api.post("/v1/outcomes", {**body, "cited": ["f" * 12]}, expect=422)
    assert "ffffffffffff" in not_recalled["detail"]


def test_pulses_tombstones_and_status(api: Api) -> None:
    project = _project()
    digest = api.save(f"{project}: the old VPN endpoint is vpn1.example.org.")
    pulse = api.post("/v1/pulses", {"text": "vpn endpoints", "kind": "decay", "strength": 0.2})
    assert pulse["new"]
    retract = {"content_hash": digest, "reason": "superseded by vpn2"}
    assert api.post("/v1/tombstones", retract)["new"]
    missing = api.post("/v1/tombstones", {**retract, "content_hash": "e" * 64}, expect=404)
    assert "e" * 64 in missing["detail"]
    status = api.unix.get("/v1/status").json()
    assert status["peer"] == "api_peer" and status["index_live"] >= 1
    assert status["counts"]["live"] >= status["index_live"] - 1
    wait_until(
        lambda: api.peer.query("SELECT 1 FROM tombstones WHERE hash = ?", (digest,)),
        what="the tombstone to apply in a cycle",
        context=api.daemon.log_tail,
    )
    assert digest not in _hashes(api.recall("old VPN endpoint", record=False))
    refused = api.post("/v1/memories", {"content": f"{project}: the old VPN endpoint is "
                                         "vpn1.example.org."}, expect=409)  # fmt: skip
    assert "tombstoned" in refused["detail"]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/memories", {"title": "no content"}, "content"),
        ("/v1/memories", {"content": "x", "kind": "gossip"}, "kind"),
        ("/v1/memories", {"content": "x", "importance": 11}, "importance"),
        ("/v1/memories", {"content": "x", "colour": "red"}, "colour"),
        ("/v1/recall", {"query": "a", "top_k": 0}, "top_k"),
        ("/v1/recall", {"query": "a", "filters": {"projekt": "x"}}, "projekt"),
        ("/v1/outcomes", {"decision_hash": "xyz", "reward": 1, "reason": "r"}, "decision_hash"),
        ("/v1/outcomes", {"decision_hash": "a" * 64, "reward": 2, "reason": "r"}, "reward"),
        ("/v1/pulses", {"text": "t", "kind": "forget"}, "kind"),
    ],
)
def test_malformed_bodies_are_refused_naming_the_field(
    api: Api, path: str, body: dict[str, Any], field: str
) -> None:
    detail = api.post(path, body, expect=422)["detail"]
    assert any(field in [str(part) for part in error["loc"]] for error in detail), detail


def test_bodies_that_are_not_requests_are_refused(api: Api) -> None:
    both = api.post("/v1/recall", {"query": "a", "vector": [1.0]}, expect=422)
    assert "exactly one" in str(both["detail"])
    blank = api.post("/v1/memories", {"content": "   "}, expect=422)
    assert "empty" in blank["detail"]
    broken = api.unix.post(
        "/v1/recall", content=b"{not json", headers={"content-type": "application/json"}
    )
    # json.loads's error, as FastAPI reports it (pydantic's parser reads bodies first).
    assert broken.status_code == 422 and broken.json()["detail"][0]["type"] == "json_invalid"
    huge = api.unix.post("/v1/memories", content=b"x" * (2 << 20))
    assert huge.status_code == 413


def test_tcp_requires_the_bearer_token_and_the_socket_is_private(api: Api) -> None:
    with httpx.Client(base_url=api.tcp_url, timeout=30.0) as tcp:
        assert tcp.get("/v1/status").status_code == 401
        # The per-turn calls are answered before FastAPI (daemon/api/hot_path.py): after
        # the guard.
        assert tcp.post("/v1/recall", json={"query": "deployments"}).status_code == 401
        wrong = tcp.get("/v1/status", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        right = tcp.get("/v1/status", headers={"Authorization": f"Bearer {TOKEN}"})
        assert right.status_code == 200 and right.json()["peer"] == "api_peer"
        assert tcp.get("/healthz").status_code == 200
    assert api.unix.get("/v1/status").status_code == 200
    mode = api.socket_path.stat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600


def test_openapi_lists_every_route_and_docs_are_served(api: Api) -> None:
    document = api.unix.get("/openapi.json").json()
    assert {
        "/v1/recall",
        "/v1/memories",
        "/v1/outcomes",
        "/v1/pulses",
        "/v1/tombstones",
        "/v1/status",
        "/healthz",
        "/readyz",
    } <= set(document["paths"])
    assert "RecallRequest" in document["components"]["schemas"]
    # Answers are serialized in the worker thread; the schema still names their model.
    answer = document["paths"]["/v1/recall"]["post"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/RecallResponse"
    }
    docs = api.unix.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_a_cited_outcome_teaches_recall_and_leaves_unrelated_queries_alone(api: Api) -> None:
    project = _project()
    digests = {name: api.save(text, project=project) for name, text in MEMORIES.items()}
    scope = {"filters": {"project": project}, "explain": True}
    unrelated_before = api.recall("descaling the coffee machine", record=False, **scope)
    result = api.recall("how should S3 write failures be retried", **scope)
    assert _hashes(result)[0] == digests["retry"]
    outcome = {
        "decision_hash": result["decision_hash"],
        "reward": 1.0,
        "reason": "the retry advice fixed the upload",
        "cited": [digests["retry"][:12]],
    }
    api.post("/v1/outcomes", outcome)
    paraphrase = "how to retry failed S3 writes"
    before = api.recall(paraphrase, record=False, **scope)["hits"]
    assert before[0]["factors"]["key_similarity"] is None
    wait_until(
        lambda: api.peer.scalar(
            "SELECT count(*) FROM learned_keys k JOIN observations o ON o.id = k.chunk_id "
            "WHERE o.content_hash = ?",
            (digests["retry"],),
        ),
        what="the outcome to teach the cited chunk a key",
        context=api.daemon.log_tail,
    )
    after = api.recall(paraphrase, record=False, **scope)["hits"]
    assert after[0]["content_hash"] == digests["retry"]
    assert after[0]["factors"]["key_similarity"] is not None
    assert after[0]["score"] > before[0]["score"]
    unrelated_after = api.recall("descaling the coffee machine", record=False, **scope)
    assert _hashes(unrelated_after) == _hashes(unrelated_before)


def test_generated_requests_never_break_the_daemon(api: Api) -> None:
    """Requests generated from the OpenAPI description: none is answered with a 5xx."""
    document = api.unix.get("/openapi.json").json()
    schema = schemathesis.openapi.from_dict(document)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    served = 0
    for found in schema.get_all_operations():
        assert isinstance(found, Ok), f"the API's own OpenAPI description is invalid: {found}"
        operation = found.ok()

        @settings(
            max_examples=FUZZ_EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        @given(case=operation.as_strategy())
        def answered_without_a_server_error(case: Any) -> None:
            nonlocal served
            response = case.call(base_url=api.tcp_url, headers=headers)
            served += 1
            assert response.status_code < 500, (case.path, case.body, response.text)

        answered_without_a_server_error()
    assert served >= 200
    assert api.daemon.returncode() is None
    assert api.unix.get("/readyz").status_code == 200


def test_socket_path_is_in_the_data_directory(api: Api) -> None:
    assert Path(api.socket_path).parent == api.peer.data_dir


def test_a_chunk_saved_after_the_cycle_loaded_salience_is_decayed_not_missed(
    tmp_path: Path,
) -> None:
    """A save commits between a cycle's refresh and its downscale: the phase must meet the
    new chunk, not fail on it."""
    from dreamcycle.daemon.config import load_config
    from dreamcycle.daemon.cycle import CycleState, downscale
    from dreamcycle.daemon.runtime import Runtime

    config = load_config(
        None,
        environ={},
        overrides={"peer.data_dir": str(tmp_path / "data"), "peer.id": "p", "metrics.listen": ""},
    )
    rt = Runtime.open(config)
    peer = rt.open_peer()
    ops = Operations(rt, embedder=rt.embedder)
    ops.attach(peer)
    try:
        saved = ops.save(models.SaveRequest(content="a chunk saved between two phases"))
        assert saved.created and saved.indexed
        stats = downscale.run(peer, CycleState(now_ms=rt.clock.now_ms() + 86_400_000))
        assert stats["decayed"] == 1 and stats["changed"] == 1
    finally:
        ops.close()
        peer.close()
        rt.close()
