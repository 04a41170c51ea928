"""The local HTTP API of a real `dreamcycle run` daemon, over its Unix socket and loopback TCP.

One daemon (short cycle interval, token set) serves the whole module; each test
works on its own memories, told apart by project, so the order tests run in
does not matter.
"""

from __future__ import annotations

import json
import re
import socket
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, edit_models, http_problems
from dreamcycle.daemon.api.operations import Operations
from tests.daemon_helpers import Daemon, Peer, wait_until

TOKEN: Final = "token-for-tests"
SOCKET_NAME: Final = "api.sock"
#: Cycles run every second, so the learning test waits seconds, not the default 30.
INTERVAL_S: Final = "1"
#: Generated requests per operation in the schema run (seven operations).

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


def _declared_too_large(url: str) -> httpx.Response:
    """A POST whose declared length is over the limit, its body never sent: sent, the body
    could meet the connection the server closed after answering, and the answer be lost."""
    port = int(url.rsplit(":", 1)[1])
    head = (
        "POST /v1/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {defaults.API_MAX_BODY_BYTES + 1}\r\nConnection: close\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=30.0) as conn:
        conn.sendall(head.encode())
        received = b""
        while chunk := conn.recv(65536):
            received += chunk
    status_line, _, rest = received.partition(b"\r\n")
    fields, _, body = rest.partition(b"\r\n\r\n")
    headers = [line.split(b":", 1) for line in fields.split(b"\r\n") if b":" in line]
    return httpx.Response(
        int(status_line.split()[1]),
        headers=[(name.strip(), value.strip()) for name, value in headers],
        content=body,
    )


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
    refused = api.post(path, body, expect=422)
    errors = refused["errors"]
    assert any(field in [str(part) for part in error["loc"]] for error in errors), refused
    assert re.search(rf"(^|; |\.){field}: ", refused["detail"]), refused


def test_bodies_that_are_not_requests_are_refused(api: Api) -> None:
    both = api.post("/v1/recall", {"query": "a", "vector": [1.0]}, expect=422)
    assert "exactly one" in str(both["detail"])
    # Swapped bounds would match nothing, an answer that hides the mistake.
    swapped = {"created_after_ms": 2_000, "created_before_ms": 1_000}
    for path, body in (
        ("/v1/recall", {"query": "a", "filters": swapped}),
        ("/v1/context", {"task": "a", "filters": swapped}),
    ):
        refused = api.post(path, body, expect=422)
        assert "must be before created_before_ms" in str(refused["detail"]), refused
    timeline = api.unix.get("/v1/timeline", params=swapped)
    assert timeline.status_code == 422 and "must be before" in timeline.text
    no_decision = api.post("/v1/recall", {"query": "a", "decision": "  "}, expect=422)
    assert no_decision["detail"] == "decision: must not be blank"
    blank = api.post("/v1/memories", {"content": "   "}, expect=422)
    assert blank["detail"] == "content: must not be blank"
    broken = api.unix.post(
        "/v1/recall", content=b"{not json", headers={"content-type": "application/json"}
    )
    # json.loads's error, as FastAPI reports it (pydantic's parser reads bodies first).
    assert broken.status_code == 422 and broken.json()["errors"][0]["type"] == "json_invalid"
    assert broken.json()["detail"].startswith("body: is not JSON")
    huge = api.unix.post("/v1/memories", content=b"x" * (defaults.API_MAX_BODY_BYTES + 1))
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
    # The question asked again in other words: a key serves a question this close to the
    # one it was learned from (a merely related question is judged by the store first).
    paraphrase = "how should failed S3 writes be retried"
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


#: Examples per operation and phase of the schemathesis run: bounded to fit the suite.
CONTRACT_EXAMPLES: Final = "10"


def schemathesis_config(path: Path) -> Path:
    """What the run is told beyond the OpenAPI document: an operation whose rules JSON
    Schema cannot state (daemon/api/contract.py `rules`, said in its description) may
    refuse a request the schema allows, with the 422 its description names."""
    blocks = [
        f'[[operations]]\ninclude-path = "{op.path}"\ninclude-method = "{op.method}"\n'
        "checks.positive_data_acceptance.expected-statuses = "
        '["2xx", "401", "403", "404", "409", "422"]\n'
        for op in contract.OPERATIONS
        if "(422)" in op.rules
    ]
    path.write_text("\n".join(blocks), encoding="utf-8")
    return path


def test_schemathesis_finds_no_contract_failure(api: Api, tmp_path: Path) -> None:
    """Every check schemathesis has, in its coverage, fuzzing and stateful phases, against
    the daemon's own OpenAPI document: positive and negative requests alike."""
    done = subprocess.run(
        [
            str(Path(sys.executable).with_name("st")),
            "--config-file", str(schemathesis_config(tmp_path / "schemathesis.toml")),
            "run", f"{api.tcp_url}/openapi.json",
            "--checks", "all",
            "--header", f"Authorization: Bearer {TOKEN}",
            "--max-examples", CONTRACT_EXAMPLES,
            "--generation-deterministic",
            "--no-color",
        ],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-6000:]
    assert " passed" in done.stdout and "failures" not in done.stdout
    assert api.daemon.returncode() is None


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
        saved = ops.save(edit_models.SaveRequest(content="a chunk saved between two phases"))
        assert saved.created and saved.indexed
        stats = downscale.run(peer, CycleState(now_ms=rt.clock.now_ms() + 86_400_000))
        assert stats["decayed"] == 1 and stats["changed"] == 1
    finally:
        ops.close()
        peer.close()
        rt.close()


# ---- bad requests: refused with a reason, in valid JSON, harming nothing stored ----------

FOREIGN_HOST: Final = "attacker.example"


def _strict_json(text: str) -> Any:
    """`text` read as JSON proper: Infinity and NaN are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_tcp_refuses_a_host_header_naming_another_server(api: Api) -> None:
    """A web page whose name its owner points at 127.0.0.1 (DNS rebinding) reaches the
    port naming its own host: every route refuses it, the token notwithstanding."""
    project = _project()
    token = {"Authorization": f"Bearer {TOKEN}"}
    port = api.tcp_url.rsplit(":", 1)[1]
    with httpx.Client(base_url=api.tcp_url, timeout=30.0) as tcp:
        for host in (f"{FOREIGN_HOST}:{port}", FOREIGN_HOST, f"localhost.{FOREIGN_HOST}"):
            foreign = {**token, "Host": host}
            for method, path, body in (
                ("GET", "/v1/timeline", None),
                ("POST", "/v1/memories", {"content": f"{project}: planted", "project": project}),
                ("POST", "/v1/recall", {"query": "planted", "record": False}),
                ("GET", "/healthz", None),
                ("GET", "/openapi.json", None),
                ("POST", "/mcp", {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            ):
                refused = tcp.request(method, path, json=body, headers=foreign)
                assert refused.status_code == 421, (host, path, refused.text)
                assert "Host" in http_problems.Problem.model_validate_json(refused.content).detail
        for host in (f"localhost:{port}", "LOCALHOST", "127.0.0.1", f"[::1]:{port}"):
            assert tcp.get("/v1/status", headers={**token, "Host": host}).status_code == 200
    assert api.peer.query("SELECT 1 FROM observations WHERE project = ?", (project,)) == []
    # The Unix socket's requests name whatever host their client likes.
    assert api.unix.get("/v1/status", headers={"Host": FOREIGN_HOST}).status_code == 200


def test_the_bearer_scheme_is_case_insensitive(api: Api) -> None:
    with httpx.Client(base_url=api.tcp_url, timeout=30.0) as tcp:
        for scheme in ("bearer", "BEARER", "Bearer "):
            answer = tcp.get("/v1/status", headers={"Authorization": f"{scheme} {TOKEN}"})
            assert answer.status_code == 200, (scheme, answer.text)
        for given in (f"Basic {TOKEN}", TOKEN, f"Bearer{TOKEN}", f"bearer {TOKEN}x"):
            assert tcp.get("/v1/status", headers={"Authorization": given}).status_code == 401


NON_FINITE: Final = ("Infinity", "-Infinity", "NaN", "1e400")
#: Where a test's body holds the number it sends (JSON writes no non-finite number).
NUMBER: Final = "<number>"
DECISION: Final = "a" * 64


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/v1/recall", {"query": "a", "min_relevance": NUMBER}, "min_relevance"),
        ("/v1/recall", {"query": "a", "min_confidence": NUMBER}, "min_confidence"),
        ("/v1/recall", {"vector": [0.5, NUMBER], "record": False}, "vector"),
        ("/v1/memories", {"content": "x", "confidence": NUMBER}, "confidence"),
        ("/v1/memories", {"content": "x", "stability": NUMBER}, "stability"),
        ("/v1/memories", {"content": "x", "pin_floor": NUMBER}, "pin_floor"),
        ("/v1/outcomes", {"decision_hash": DECISION, "reward": NUMBER, "reason": "r"}, "reward"),
        ("/v1/pulses", {"text": "t", "strength": NUMBER}, "strength"),
        ("/v1/pulses", {"text": "t", "sigma": NUMBER}, "sigma"),
        ("/v1/pulses", {"text": "t", "decay_per_hop": NUMBER}, "decay_per_hop"),
        ("/v1/pulses", {"text": "t", "ttl_s": NUMBER}, "ttl_s"),
        ("/v1/tombstones", {"content_hash": DECISION, "reason": "r", "ttl_s": NUMBER}, "ttl_s"),
    ],
)
def test_non_finite_numbers_are_refused_naming_the_field_in_json(
    api: Api, path: str, body: dict[str, Any], field: str
) -> None:
    """JSON has no infinity or NaN, but parsers read them (and 1e400 as infinity): no bound
    holds against one, and a reason quoting it must still be JSON."""
    for number in NON_FINITE:
        sent = json.dumps(body).replace(f'"{NUMBER}"', number)
        answer = api.unix.post(path, content=sent, headers={"content-type": "application/json"})
        assert answer.status_code == 422, (sent, answer.text)
        errors = _strict_json(answer.text)["errors"]
        finite = [error for error in errors if error["type"] == "finite_number"]
        assert [error["loc"][1] for error in finite] == [field], (sent, errors)


def test_a_non_finite_number_in_a_query_is_refused_too(api: Api) -> None:
    for number in ("inf", "-inf", "nan"):
        answer = api.unix.get("/v1/timeline", params={"span_s": number})
        assert answer.status_code == 422
        [error] = _strict_json(answer.text)["errors"]
        assert (error["loc"], error["type"]) == (["query", "span_s"], "finite_number")


def test_a_refusal_quoting_a_non_finite_number_is_json(api: Api) -> None:
    """The reasons quote the request: its infinity is quoted as a string."""
    body = b'{"query": "x", "min_confidence": Infinity, "colour": [NaN, -Infinity]}'
    answer = api.unix.post("/v1/recall", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422
    quoted = {tuple(e["loc"][1:]): e["input"] for e in _strict_json(answer.text)["errors"]}
    assert quoted == {("min_confidence",): "Infinity", ("colour",): ["NaN", "-Infinity"]}


def test_the_timeline_preview_holds_what_follows_a_nul(api: Api) -> None:
    project = _project()
    nul = api.save("nul \u0000 inside, and after it", project=project, topic_key="nul/\u0000/x")
    wide = api.save("\U0001f600" * 400, project=project)  # 4 bytes each in UTF-8
    listed = api.unix.get("/v1/timeline", params={"project": project}).json()["memories"]
    previews = {memory["content_hash"]: memory["preview"] for memory in listed}
    assert previews == {
        nul: "nul \u0000 inside, and after it",
        wide: "\U0001f600" * defaults.TIMELINE_PREVIEW_CHARS,
    }
    by_prefix = api.unix.get(
        "/v1/timeline", params={"project": project, "topic_key_prefix": "nul/\u0000"}
    ).json()
    assert [memory["content_hash"] for memory in by_prefix["memories"]] == [nul]
    recalled = api.recall(
        "inside", filters={"project": project, "topic_key_prefix": "nul/\u0000/"}, record=False
    )
    assert _hashes(recalled) == [nul]


#: The statuses every operation's route may answer: the guard's, and the index loading.
GUARDED: Final = {"401", "413", "421", "503"}


def test_the_openapi_document_lists_the_errors_each_route_answers(api: Api) -> None:
    document = api.unix.get("/openapi.json").json()
    schemas = document["components"]["schemas"]
    responses = {
        (method.upper(), path): {status for status in operation["responses"] if status != "200"}
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    assert responses[("GET", "/v1/status")] == GUARDED
    assert responses[("GET", "/v1/timeline")] == GUARDED | {"422"}
    assert responses[("GET", "/v1/memories/{ref}")] == GUARDED | {"404", "422"}
    assert responses[("POST", "/v1/recall")] == GUARDED | {"400", "422"}
    assert responses[("POST", "/v1/memories")] == GUARDED | {"400", "409", "422"}
    assert responses[("POST", "/v1/outcomes")] == GUARDED | {"400", "404", "409", "422"}
    assert responses[("GET", "/healthz")] == {"413", "421"}
    assert responses[("GET", "/readyz")] == {"413", "421", "503"}
    for (method, path), statuses in responses.items():
        if path.startswith("/v1/"):
            assert statuses >= GUARDED, (method, path)
    # Every error answer is a problem detail: each field's reason, or the operation's own.
    for (method, path), statuses in responses.items():
        for status in statuses:
            answer = document["paths"][path][method.lower()]["responses"][status]
            if "content" in answer:
                assert answer["content"] == {
                    "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
                }, (method, path, status)
    assert "HTTPValidationError" not in schemas
    # Refused by FastAPI's validation, then by the operation (no model is 3 wide).
    for body in ({"query": "a", "top_k": 0}, {"vector": [1.0, 2.0, 3.0], "record": False}):
        refused = api.unix.post("/v1/recall", json=body)
        assert refused.status_code == 422
        assert refused.headers["content-type"] == "application/problem+json"
        problem = http_problems.Problem.model_validate_json(refused.content)
        assert (problem.status, problem.type) == (422, "about:blank")
    token = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=api.tcp_url, timeout=30.0) as tcp:
        for expected, refused in (
            (401, tcp.get("/v1/status")),
            (421, tcp.get("/v1/status", headers={**token, "Host": FOREIGN_HOST})),
            (413, _declared_too_large(api.tcp_url)),
            (
                400,
                tcp.post(
                    "/v1/memories",
                    content=b'{"content": "\xff"}',
                    headers={**token, "content-type": "application/json"},
                ),
            ),
        ):
            assert refused.status_code == expected, refused.text
            assert str(expected) in responses[("POST", "/v1/memories")]
            assert refused.headers["content-type"] == "application/problem+json"
            assert http_problems.Problem.model_validate_json(refused.content).status == expected
