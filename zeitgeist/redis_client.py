"""The Redis Streams backend's connection: the redis-py client for one server, and every
command run under the retry policy and counted, with the server's errors told apart
(transient or not) and reported as `BackendError` naming the server.

redis-py's own retries are disabled: `zeitgeist.retry.RetryPolicy` owns retries and
their deadline. `redis_streams.RedisStreamsBackend` builds one of these and implements
the log's operations over it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, TypeVar

import redis
from redis.backoff import NoBackoff
from redis.exceptions import (
    AuthenticationError,
    AuthorizationError,
    ClusterDownError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.retry import RequestCounter, RetryDeadlineExceeded, RetryPolicy

T = TypeVar("T")

#: Error replies that heal by themselves (script busy, failover in progress).
TRANSIENT_REPLY_PREFIXES: Final = ("BUSY ", "LOADING ", "TRYAGAIN", "MASTERDOWN")


class RedisConfigError(ValueError):
    """The Redis backend was configured with values that cannot work."""


def is_transient(error: BaseException) -> bool:
    """Whether retrying may succeed: lost connections, timeouts, busy or failing-over servers."""
    if isinstance(error, AuthenticationError | AuthorizationError):
        return False
    if isinstance(error, RedisConnectionError | RedisTimeoutError | TimeoutError):
        return True
    if isinstance(error, ReadOnlyError | TryAgainError | ClusterDownError):
        return True
    return isinstance(error, ResponseError) and str(error).startswith(TRANSIENT_REPLY_PREFIXES)


class RedisConnection:
    """The Redis server at `url`, for the mesh whose keys start with `prefix`."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        socket_timeout_s: float,
        socket_connect_timeout_s: float,
        retry: RetryPolicy | None,
    ) -> None:
        if not socket_timeout_s > 0 or not socket_connect_timeout_s > 0:
            raise RedisConfigError(
                f"Redis timeouts must be > 0 s, got socket_timeout_s={socket_timeout_s!r}, "
                f"socket_connect_timeout_s={socket_connect_timeout_s!r}"
            )
        try:
            self.client: redis.Redis = redis.Redis.from_url(
                url,
                socket_timeout=socket_timeout_s,
                socket_connect_timeout=socket_connect_timeout_s,
                # No retries inside redis-py: RetryPolicy owns retries and their deadline.
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as error:
            raise RedisConfigError(f"Redis URL {url!r} is not usable: {error}") from error
        self.prefix = prefix
        self.requests = RequestCounter()
        self._retry = retry if retry is not None else RetryPolicy()

    @property
    def location(self) -> str:
        """Where this connection writes, for error messages (without any password)."""
        pool_kwargs = self.client.connection_pool.connection_kwargs
        where = pool_kwargs.get("path") or f"{pool_kwargs.get('host')}:{pool_kwargs.get('port')}"
        return f"redis {where} db {pool_kwargs.get('db', 0)} prefix {self.prefix!r}"

    def run(self, operation: str, key: str, call: Callable[[], T]) -> T:
        """One command under the retry policy; failures become BackendError in context."""

        def attempt() -> T:
            self.requests.record(operation)
            return call()

        try:
            return self._retry.call(attempt, is_transient)
        except RetryDeadlineExceeded as error:
            raise BackendError(
                f"redis {operation} of {key!r} on {self.location}: {error}"
            ) from error
        except RedisError as error:
            raise BackendError(
                f"redis {operation} of {key!r} on {self.location} failed: "
                f"{type(error).__name__}: {error}"
            ) from error

    def close(self) -> None:
        self.client.close()
