"""Real servers for the tests: SeaweedFS (S3) and redis-server, on loopback.

Loaded by tests/conftest.py through `pytest_plugins`. Each server starts at most
once per test run, on the first test that asks for it, and is stopped at the end.
A missing binary fails the test with the command that installs it: these servers
are part of the test setup, not optional extras.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scripts.local_servers import (
    RunningRedis,
    RunningS3,
    ServerStartError,
    start_redis,
    start_seaweedfs,
)


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningS3]:
    """SeaweedFS `weed mini` with one bucket; `.backend(prefix)` gives a fresh S3Backend."""
    try:
        server = start_seaweedfs(tmp_path_factory.mktemp("seaweedfs"))
    except ServerStartError as error:
        pytest.fail(f"cannot start the S3 test server: {error}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningRedis]:
    """redis-server without persistence; `.backend(prefix)` gives a fresh RedisStreamsBackend."""
    try:
        server = start_redis(tmp_path_factory.mktemp("redis"))
    except ServerStartError as error:
        pytest.fail(f"cannot start the Redis test server: {error}", pytrace=False)
    yield server
    server.stop()
