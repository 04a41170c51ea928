"""The S3 backend against a real SeaweedFS, and the retry policy it relies on.

Behaviour every backend shares is in test_zeitgeist_contract.py; this file covers
what is particular to object stores: conditional-write status codes, the probe,
retries across an outage, replies lost after a write landed, request counts.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    EndpointConnectionError,
    ReadTimeoutError,
    SSLError,
)

from dreamcycle.zeitgeist.backend import (
    BackendError,
    KeyExists,
    PreconditionFailed,
    UnsupportedStore,
)
from dreamcycle.zeitgeist.retry import (
    InvalidRetryPolicy,
    RequestCounter,
    RetryDeadlineExceeded,
    RetryPolicy,
)
from dreamcycle.zeitgeist.s3 import S3Backend
from dreamcycle.zeitgeist.s3_client import S3ConfigError, is_transient
from scripts.local_servers import RunningS3, start_seaweedfs

pytestmark = pytest.mark.slow

#: Gives up within about a second: for tests that expect a failure.
IMPATIENT = RetryPolicy(base_delay_s=0.02, max_delay_s=0.1, deadline_s=1.0)
#: Outlasts a server restart.
PATIENT = RetryPolicy(base_delay_s=0.05, max_delay_s=0.2, deadline_s=20.0)


def fresh_prefix() -> str:
    return f"s3t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def s3(s3_server: RunningS3) -> S3Backend:
    return s3_server.backend(fresh_prefix())


def client_error(status: int, code: str) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": "x"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, "PutObject")


# ---- conditional writes on a real store ----------------------------------------------


def test_create_refuses_an_existing_key_and_keeps_the_first_bytes(s3: S3Backend) -> None:
    s3.create("seg/a", b"first")
    with pytest.raises(KeyExists, match="seg/a"):
        s3.create("seg/a", b"second")
    assert s3.read("seg/a") == b"first"


def test_if_match_on_a_missing_key_is_precondition_failed(s3: S3Backend) -> None:
    with pytest.raises(PreconditionFailed, match=r"lease/none\.json"):
        s3.write_versioned("lease/none.json", b"x", expect='"0123456789abcdef0123456789abcdef"')
    assert s3.read_versioned("lease/none.json") is None


def test_compare_and_swap_accepts_the_current_etag_only(s3: S3Backend) -> None:
    first = s3.write_versioned("lease/c.json", b"one", expect=None)
    with pytest.raises(PreconditionFailed):
        s3.write_versioned("lease/c.json", b"again", expect=None)
    second = s3.write_versioned("lease/c.json", b"two", expect=first)
    assert second != first
    with pytest.raises(PreconditionFailed):
        s3.write_versioned("lease/c.json", b"stale", expect=first)
    current = s3.read_versioned("lease/c.json")
    assert current is not None
    assert (current.data, current.etag) == (b"two", second)


def test_overwrite_changes_the_etag(s3: S3Backend) -> None:
    s3.write_overwrite("peers/p.json", b"beat 1")
    before = s3.read_versioned("peers/p.json")
    s3.write_overwrite("peers/p.json", b"beat 2")
    after = s3.read_versioned("peers/p.json")
    assert before is not None and after is not None
    assert after.data == b"beat 2" and after.etag != before.etag


def test_listing_is_in_byte_order_even_across_subfolders(s3: S3Backend) -> None:
    # SeaweedFS lists a folder's sub-folder ("x/a/") before its sibling "x/a-b".
    keys = ["x/a/b", "x/a-b", "x/a.b", "x/a0", "x/B"]
    for key in keys:
        s3.create(key, b".")
    assert s3.list_after("x/", "") == sorted(keys)
    assert s3.list_after("x/", "x/a.b") == ["x/a0"]


def test_listing_follows_continuation_tokens(s3_server: RunningS3) -> None:
    backend = s3_server.backend(fresh_prefix(), list_page_size=4)
    keys = [f"seg/{i:04d}" for i in range(10)]
    for key in reversed(keys):
        backend.create(key, key.encode())
    backend.requests.reset()
    assert backend.list_after("seg/", "seg/0000") == keys[1:]
    assert backend.requests.snapshot() == {"ListObjectsV2": 3}


def test_delete_ignores_absent_keys_and_batches(s3: S3Backend) -> None:
    for key in ("seg/1", "seg/2", "seg/3"):
        s3.create(key, b".")
    s3.requests.reset()
    s3.delete(["seg/1", "seg/3", "seg/never"])
    s3.delete([])
    assert s3.requests.snapshot() == {"DeleteObjects": 1}
    assert s3.list_after("seg/", "") == ["seg/2"]


# ---- probe ---------------------------------------------------------------------------


def test_probe_passes_and_leaves_nothing_behind(s3: S3Backend) -> None:
    s3.probe()
    assert s3.list_after("", "") == []


def test_probe_rejects_a_store_that_ignores_if_none_match(s3: S3Backend) -> None:
    def strip_condition(params: dict[str, Any], **_: Any) -> None:
        params.pop("IfNoneMatch", None)

    # The real server, reached by a client that drops the header: what a store that
    # ignores it would do.
    s3.client.meta.events.register("before-parameter-build.s3.PutObject", strip_condition)
    with pytest.raises(UnsupportedStore, match="does not honour If-None-Match"):
        s3.probe()
    assert s3.list_after("", "") == []


def test_probe_names_a_missing_bucket_and_the_endpoint(s3_server: RunningS3) -> None:
    backend = S3Backend(
        "no-such-bucket-here",
        "mesh",
        endpoint_url=s3_server.endpoint_url,
        access_key_id=s3_server.access_key_id,
        secret_access_key=s3_server.secret_access_key,
    )
    with pytest.raises(BackendError, match="no-such-bucket-here") as failure:
        backend.probe()
    assert s3_server.endpoint_url in str(failure.value)
    assert "does not exist" in str(failure.value)


def test_wrong_credentials_fail_at_once_without_retrying(s3_server: RunningS3) -> None:
    backend = S3Backend(
        s3_server.bucket,
        "mesh",
        endpoint_url=s3_server.endpoint_url,
        access_key_id=s3_server.access_key_id,
        secret_access_key="not-the-secret",
    )
    with pytest.raises(BackendError, match="SignatureDoesNotMatch"):
        backend.create("seg/a", b".")
    assert backend.requests.total() == 1


def test_bad_configuration_is_refused_with_the_reason() -> None:
    with pytest.raises(S3ConfigError, match="bucket"):
        S3Backend("", "mesh")
    with pytest.raises(S3ConfigError, match="secret_access_key"):
        S3Backend("bucket", "mesh", access_key_id="only-half")
    with pytest.raises(S3ConfigError, match="timeouts"):
        S3Backend("bucket", "mesh", read_timeout_s=0)


# ---- lost replies: the write landed, the answer did not --------------------------------


def lose_first_reply(backend: S3Backend) -> list[int]:
    """Make the first PutObject's response vanish after the server has acted on it."""
    calls: list[int] = []

    def drop_reply(**_: Any) -> None:
        calls.append(1)
        if len(calls) == 1:
            raise ReadTimeoutError(endpoint_url=str(backend.endpoint_url))

    backend.client.meta.events.register("after-call.s3.PutObject", drop_reply)
    return calls


def test_create_whose_reply_was_lost_succeeds_on_retry(s3: S3Backend) -> None:
    puts = lose_first_reply(s3)
    s3.create("seg/lost-reply", b"mine")
    assert len(puts) == 2  # the retry met its own object (412) ...
    assert s3.read("seg/lost-reply") == b"mine"  # ... and recognised it


def test_lost_reply_does_not_hide_another_writers_object(s3: S3Backend) -> None:
    s3.create("seg/taken", b"theirs")
    lose_first_reply(s3)
    with pytest.raises(KeyExists):
        s3.create("seg/taken", b"mine")
    assert s3.read("seg/taken") == b"theirs"


def test_compare_and_swap_whose_reply_was_lost_returns_the_new_etag(s3: S3Backend) -> None:
    first = s3.write_versioned("lease/c.json", b"one", expect=None)
    lose_first_reply(s3)
    second = s3.write_versioned("lease/c.json", b"two", expect=first)
    current = s3.read_versioned("lease/c.json")
    assert current is not None and (current.data, current.etag) == (b"two", second)


# ---- outages ---------------------------------------------------------------------------


def test_outage_raises_backend_error_and_a_retried_create_survives_a_restart(
    tmp_path: Path,
) -> None:
    server = start_seaweedfs(tmp_path / "s3")
    try:
        quick = {"connect_timeout_s": 0.5, "read_timeout_s": 2.0}
        impatient = server.backend("mesh", retry=IMPATIENT, **quick)
        patient = server.backend("mesh", retry=PATIENT, **quick)
        before = [f"seg/{i:04d}" for i in range(3)]
        for key in before:
            impatient.create(key, key.encode())
        server.stop()

        impatient.requests.reset()
        with pytest.raises(BackendError, match="PutObject") as failure:
            impatient.create("seg/0003", b"during the outage")
        assert "seg/0003" in str(failure.value)
        assert not isinstance(failure.value, KeyExists)
        assert impatient.requests.snapshot()["PutObject"] > 1  # it did retry

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
        assert patient.read("seg/0004") == b"retried"
    finally:
        server.stop()


# ---- what counts as transient ------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "transient"),
    [
        (client_error(503, "SlowDown"), True),
        (client_error(500, "InternalError"), True),
        (client_error(400, "RequestTimeout"), True),
        (client_error(400, "ThrottlingException"), True),
        (client_error(409, "ConditionalRequestConflict"), True),
        (client_error(412, "PreconditionFailed"), False),
        (client_error(404, "NoSuchKey"), False),
        (client_error(403, "AccessDenied"), False),
        (ReadTimeoutError(endpoint_url="http://x"), True),
        (EndpointConnectionError(endpoint_url="http://x"), True),
        (SSLError(endpoint_url="http://x", error=OSError("bad certificate")), False),
        (ValueError("not a store error"), False),
    ],
)
def test_transient_errors_are_told_apart(error: BaseException, transient: bool) -> None:
    assert is_transient(error) is transient


# ---- the retry policy itself (no servers) -------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def fake_policy(fake: FakeTime, **settings: float) -> RetryPolicy:
    return RetryPolicy(**settings, sleep=fake.sleep, clock=fake.clock, rng=random.Random(7))


def test_retry_returns_once_the_failure_heals() -> None:
    fake = FakeTime()
    failures = [ConnectionError("down"), ConnectionError("down")]

    def flaky() -> str:
        if failures:
            raise failures.pop()
        return "done"

    policy = fake_policy(fake, base_delay_s=0.1, max_delay_s=1.0, deadline_s=10.0)
    assert policy.call(flaky, lambda error: isinstance(error, ConnectionError)) == "done"
    assert len(fake.sleeps) == 2
    assert fake.sleeps[0] <= 0.1 and fake.sleeps[1] <= 0.2  # full jitter under the ceiling


def test_retry_backoff_grows_to_the_cap_and_stops_at_the_deadline() -> None:
    fake = FakeTime()
    policy = fake_policy(fake, base_delay_s=0.1, max_delay_s=0.8, deadline_s=30.0)

    def always_down() -> None:
        raise TimeoutError("no answer")

    with pytest.raises(RetryDeadlineExceeded, match="TimeoutError: no answer") as failure:
        policy.call(always_down, lambda error: True)
    assert isinstance(failure.value.__cause__, TimeoutError)
    assert failure.value.attempts == len(fake.sleeps) + 1
    assert fake.now <= 30.0
    assert all(0 <= s <= policy.backoff_ceiling(n) for n, s in enumerate(fake.sleeps))
    assert [policy.backoff_ceiling(n) for n in range(5)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 0.8])
    # Jitter is full: with this many draws some waits are far below their ceiling.
    assert min(fake.sleeps[3:]) < 0.4


def test_retry_passes_permanent_errors_through_at_once() -> None:
    fake = FakeTime()
    calls: list[int] = []

    def refused() -> None:
        calls.append(1)
        raise PermissionError("denied")

    with pytest.raises(PermissionError):
        fake_policy(fake).call(refused, lambda error: isinstance(error, ConnectionError))
    assert calls == [1] and fake.sleeps == []


def test_retry_policy_refuses_impossible_settings() -> None:
    with pytest.raises(InvalidRetryPolicy, match="base_delay_s"):
        RetryPolicy(base_delay_s=0)
    with pytest.raises(InvalidRetryPolicy, match="max_delay_s"):
        RetryPolicy(base_delay_s=1.0, max_delay_s=0.5)
    with pytest.raises(InvalidRetryPolicy, match="deadline_s"):
        RetryPolicy(deadline_s=-1)


def test_request_counter_counts_per_operation_across_threads() -> None:
    counter = RequestCounter()

    def put_many() -> None:
        for _ in range(1000):
            counter.record("PutObject")

    workers = [threading.Thread(target=put_many) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    counter.record("ListObjectsV2")
    assert counter.snapshot() == {"PutObject": 4000, "ListObjectsV2": 1}
    assert counter.total() == 4001
    counter.reset()
    assert counter.total() == 0
