"""The Redis Streams backend against a real redis-server.

Behaviour every backend shares is in test_zeitgeist_contract.py; this file covers
what is particular to Redis: atomic create-only and compare-and-swap under racing
clients, the stream and its index staying in step, trim, outages and timeouts.
"""

from __future__ import annotations

import functools
import signal
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from dreamcycle.zeitgeist.backend import BackendError, KeyExists, PreconditionFailed
from dreamcycle.zeitgeist.object_keys import InvalidKey
from dreamcycle.zeitgeist.redis_client import RedisConfigError, is_transient
from dreamcycle.zeitgeist.redis_streams import RedisStreamsBackend
from dreamcycle.zeitgeist.retry import RetryPolicy
from scripts.local_servers import RunningRedis, start_redis

pytestmark = pytest.mark.slow

IMPATIENT = RetryPolicy(base_delay_s=0.02, max_delay_s=0.1, deadline_s=0.6)
PATIENT = RetryPolicy(base_delay_s=0.02, max_delay_s=0.1, deadline_s=15.0)
RACE_ROUNDS = 40


def fresh_prefix() -> str:
    return f"rt-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def prefix() -> str:
    return fresh_prefix()


@pytest.fixture
def backend(redis_server: RunningRedis, prefix: str) -> RedisStreamsBackend:
    return redis_server.backend(prefix)


def stream_length(server: RunningRedis, prefix: str) -> int:
    with server.client() as raw:
        return int(raw.xlen(f"{prefix}:log"))


def race(contenders: list[Callable[[], object]]) -> list[BaseException | None]:
    """Start every contender at the same instant; what each raised (None: it won)."""
    start = threading.Barrier(len(contenders))
    outcomes: list[BaseException | None] = [None] * len(contenders)

    def run(index: int) -> None:
        start.wait()
        try:
            contenders[index]()
        except BaseException as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(contenders))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


# ---- atomic conditional writes ------------------------------------------------------


def test_racing_creates_of_one_key_have_exactly_one_winner(
    redis_server: RunningRedis, prefix: str
) -> None:
    clients = [redis_server.backend(prefix), redis_server.backend(prefix)]
    for round_number in range(RACE_ROUNDS):
        key = f"seg/{round_number:04d}"
        outcomes = race(
            [
                functools.partial(client.create, key, name)
                for client, name in zip(clients, (b"left", b"right"), strict=True)
            ]
        )
        winners = [index for index, outcome in enumerate(outcomes) if outcome is None]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, KeyExists) for o in outcomes if o is not None)
        assert clients[0].read(key) == (b"left", b"right")[winners[0]]
    assert stream_length(redis_server, prefix) == RACE_ROUNDS


def test_racing_compare_and_swaps_have_exactly_one_winner(
    redis_server: RunningRedis, prefix: str
) -> None:
    clients = [redis_server.backend(prefix), redis_server.backend(prefix)]
    version = clients[0].write_versioned("lease/compactor.json", b"start", expect=None)
    for round_number in range(RACE_ROUNDS):
        bodies = [f"left {round_number}".encode(), f"right {round_number}".encode()]
        outcomes = race(
            [
                functools.partial(client.write_versioned, "lease/compactor.json", body, version)
                for client, body in zip(clients, bodies, strict=True)
            ]
        )
        winners = [index for index, outcome in enumerate(outcomes) if outcome is None]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, PreconditionFailed) for o in outcomes if o is not None)
        current = clients[0].read_versioned("lease/compactor.json")
        assert current is not None and current.data == bodies[winners[0]]
        version = current.etag


def test_version_tokens_are_never_reused_after_a_delete(backend: RedisStreamsBackend) -> None:
    first = backend.write_versioned("lease/c.json", b"one", expect=None)
    backend.delete(["lease/c.json"])
    second = backend.write_versioned("lease/c.json", b"one", expect=None)
    assert second != first
    with pytest.raises(PreconditionFailed):
        backend.write_versioned("lease/c.json", b"stale writer", expect=first)


def test_a_created_entry_can_be_swapped_and_leaves_the_stream(
    redis_server: RunningRedis, prefix: str, backend: RedisStreamsBackend
) -> None:
    backend.create("snap/1", b"entry")
    created = backend.read_versioned("snap/1")
    assert created is not None and created.data == b"entry"
    replaced = backend.write_versioned("snap/1", b"object", expect=created.etag)
    assert backend.read_versioned("snap/1") == type(created)(data=b"object", etag=replaced)
    assert stream_length(redis_server, prefix) == 0
    assert backend.list_after("snap/", "") == ["snap/1"]


def test_create_whose_reply_was_lost_succeeds_on_retry(backend: RedisStreamsBackend) -> None:
    real_create = backend._scripts["create"]
    calls: list[int] = []

    def reply_lost_once(**arguments: Any) -> Any:
        result = real_create(**arguments)
        calls.append(1)
        if len(calls) == 1:
            raise RedisTimeoutError("Timeout reading from socket")
        return result

    backend._scripts["create"] = reply_lost_once  # type: ignore[assignment]
    backend.create("seg/lost-reply", b"mine")
    assert len(calls) == 2
    assert backend.read("seg/lost-reply") == b"mine"
    with pytest.raises(KeyExists):
        backend.create("seg/lost-reply", b"someone else")


# ---- listing, deleting, trimming ------------------------------------------------------


def test_listing_is_in_byte_order_exclusive_and_paged(redis_server: RunningRedis) -> None:
    backend = redis_server.backend(fresh_prefix(), page_size=4)
    keys = ["x/a/b", "x/a-b", "x/a.b", "x/a0", "x/B", "x/é", "x/zz", "x/a", "x/b", "x/c"]
    for key in keys:
        backend.create(key, b".")
    backend.create("y/outside", b".")
    backend.requests.reset()
    assert backend.list_after("x/", "") == sorted(keys)
    assert backend.requests.snapshot() == {"ZRANGEBYLEX": 3}
    assert backend.list_after("x/", "x/a.b") == [k for k in sorted(keys) if k > "x/a.b"]
    assert backend.list_after("x/", "w/anything") == sorted(keys)
    assert backend.list_after("x/", "x/é") == []
    assert backend.list_after("", "x/é") == ["y/outside"]


def test_delete_removes_index_and_stream_entries(
    redis_server: RunningRedis, prefix: str, backend: RedisStreamsBackend
) -> None:
    for key in ("seg/1", "seg/2", "seg/3"):
        backend.create(key, key.encode())
    backend.write_overwrite("peers/p.json", b"beat")
    backend.delete(["seg/1", "seg/3", "peers/p.json", "seg/never"])
    assert backend.list_after("", "") == ["seg/2"]
    assert stream_length(redis_server, prefix) == 1
    with pytest.raises(KeyError):
        backend.read("seg/1")
    assert backend.read_versioned("peers/p.json") is None


def test_trim_drops_older_keys_of_the_folder_and_keeps_late_arrivals(
    redis_server: RunningRedis, prefix: str, backend: RedisStreamsBackend
) -> None:
    # A segment with a high key appended first: insertion order is not key order.
    backend.create("seg/0009", b"early append, late key")
    for index in range(1, 6):
        backend.create(f"seg/{index:04d}", b"segment")
    backend.write_overwrite("peers/a.json", b"beat")
    backend.write_versioned("lease/compactor.json", b"lease", expect=None)
    backend.create("snap/0002", b"snapshot")

    assert backend.trim("seg/0003") == 2
    assert backend.list_after("seg/", "") == ["seg/0003", "seg/0004", "seg/0005", "seg/0009"]
    assert backend.read("seg/0009") == b"early append, late key"
    assert backend.read("peers/a.json") == b"beat"
    assert backend.read("lease/compactor.json") == b"lease"
    assert backend.read("snap/0002") == b"snapshot"
    assert stream_length(redis_server, prefix) == 5

    assert backend.trim("seg/0003") == 0
    with pytest.raises(InvalidKey, match="folder"):
        backend.trim("seg")
    backend.delete([*backend.list_after("seg/", ""), "snap/0002"])
    backend.trim("seg/0099")
    assert stream_length(redis_server, prefix) == 0


# ---- probe and configuration --------------------------------------------------------------


def test_probe_passes_and_leaves_nothing_behind(
    redis_server: RunningRedis, prefix: str, backend: RedisStreamsBackend
) -> None:
    backend.probe()
    assert backend.list_after("", "") == []
    assert stream_length(redis_server, prefix) == 0


def test_wrong_password_fails_at_once_without_retrying(redis_server: RunningRedis) -> None:
    with redis_server.client() as admin:
        admin.acl_setuser(
            "zeitgeist", enabled=True, passwords=["+right"], keys="*", commands=["+@all"]
        )
    backend = RedisStreamsBackend(
        f"redis://zeitgeist:wrong@127.0.0.1:{redis_server.port}/0", fresh_prefix()
    )
    with pytest.raises(BackendError, match=r"127\.0\.0\.1"):
        backend.probe()
    assert backend.requests.total() == 1


def test_bad_configuration_is_refused_with_the_reason() -> None:
    with pytest.raises(RedisConfigError, match="prefix"):
        RedisStreamsBackend("redis://127.0.0.1:1/0", "")
    with pytest.raises(RedisConfigError, match="not usable"):
        RedisStreamsBackend("http://127.0.0.1:1/0", "mesh")
    with pytest.raises(RedisConfigError, match="timeouts"):
        RedisStreamsBackend("redis://127.0.0.1:1/0", "mesh", socket_timeout_s=0)


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (RedisConnectionError("Connection refused"), True),
        (RedisTimeoutError("Timeout reading from socket"), True),
        (BusyLoadingError("Redis is loading the dataset in memory"), True),
        (ResponseError("BUSY Redis is busy running a script"), True),
        (AuthenticationError("invalid username-password pair"), False),
        (ResponseError("WRONGTYPE Operation against a key holding the wrong kind"), False),
        (ValueError("not a store error"), False),
    ],
)
def test_transient_errors_are_told_apart(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


# ---- outages --------------------------------------------------------------------------------


def test_dropped_connections_are_reopened(redis_server: RunningRedis) -> None:
    backend = redis_server.backend(fresh_prefix(), retry=IMPATIENT)
    backend.create("seg/1", b"before")
    with redis_server.client() as admin:
        assert int(admin.client_kill_filter(_type="normal", skipme=True)) >= 1
    assert backend.read("seg/1") == b"before"
    backend.create("seg/2", b"after")
    assert backend.list_after("seg/", "") == ["seg/1", "seg/2"]


def test_pause_times_out_and_outage_recovers_without_loss(tmp_path: Path) -> None:
    server = start_redis(tmp_path / "redis", persistent=True)
    try:
        quick = {"socket_timeout_s": 0.2, "socket_connect_timeout_s": 0.2}
        impatient = server.backend("mesh", retry=IMPATIENT, **quick)
        patient = server.backend("mesh", retry=PATIENT, **quick)
        before = [f"seg/{index:04d}" for index in range(3)]
        for key in before:
            impatient.create(key, key.encode())

        server.process.send_signal(signal.SIGSTOP)
        try:
            with pytest.raises(BackendError, match="TimeoutError"):
                impatient.read("seg/0000")
        finally:
            server.process.send_signal(signal.SIGCONT)
        assert impatient.read("seg/0000") == b"seg/0000"

        server.stop()
        with pytest.raises(BackendError, match="script:create") as failure:
            impatient.create("seg/0003", b"during the outage")
        assert "seg/0003" in str(failure.value)

        outcome: list[BaseException | None] = []

        def create_through_the_outage() -> None:
            try:
                patient.create("seg/0004", b"retried")
                outcome.append(None)
            except BaseException as error:
                outcome.append(error)

        writer = threading.Thread(target=create_through_the_outage)
        writer.start()
        time.sleep(0.3)  # the writer is now retrying against a dead port
        server = server.restart()
        writer.join(timeout=PATIENT.deadline_s)
        assert outcome == [None]
        assert patient.list_after("seg/", "") == [*before, "seg/0004"]
        assert [patient.read(key) for key in before] == [key.encode() for key in before]
    finally:
        server.stop()
