"""The zeitgeist on Redis: log entries in a stream, mutable objects in hashes.

`RedisStreamsBackend` holds the log's operations and the Lua scripts they run, each
beside its calls; its connection (the client, retries and error mapping) is
`redis_client`'s.

Redis keys of a mesh (all named from its prefix P; write P as ``{mesh}`` to pin
them to one Redis Cluster slot, since the scripts declare every key they touch):

``P:log``   stream; one entry per created key, fields ``key`` and ``data``
``P:keys``  sorted set of every live key, score 0, so ZRANGEBYLEX lists them in
            byte order exactly like an S3 listing (ascending, exclusive start)
``P:ids``   hash: created key -> its stream entry id (also its version token)
``P:obj``   hash: mutable key (heartbeat, lease) -> bytes
``P:ver``   hash: mutable key -> version token
``P:seq``   counter that issues version tokens; never reused, so a deleted and
            re-created object cannot be mistaken for its earlier self

Every write is one Lua script, so create-only and compare-and-swap are atomic.
`delete` XDELs stream entries. Compaction, once it has folded and deleted old
segments, calls `trim(min_key)` with the minimum live cursor: it drops whatever
sorts before that key in its folder and XTRIMs the stream with MINID.

Durability: `create` returns once Redis has the entry in memory. Run Redis with
``appendonly yes`` (``appendfsync always`` to survive a power cut) for the log to
outlive a restart; see docs/s3.md for the comparison with object stores.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, Final, cast

import redis

from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    KeyExists,
    ObjectTooLarge,
    UnsupportedStore,
    Versioned,
    check_create_only,
    check_read_bound,
    precondition_failed,
    written_by_earlier_attempt,
)
from dreamcycle.zeitgeist.defaults import DEFAULT_CONNECT_TIMEOUT_S
from dreamcycle.zeitgeist.object_keys import InvalidKey
from dreamcycle.zeitgeist.redis_client import RedisConfigError, RedisConnection
from dreamcycle.zeitgeist.retry import RetryPolicy

log = logging.getLogger(__name__)

BACKEND_NAME: Final = "redis"
#: Seconds to wait for a command's reply before the attempt counts as failed.
DEFAULT_SOCKET_TIMEOUT_S: Final = 10.0
#: Keys per ZRANGEBYLEX page and per delete or trim script call; bounds the time
#: one script holds the (single-threaded) server.
PAGE_SIZE: Final = 1000
#: XTRIM MINID arrived in Redis 6.2.
MINIMUM_REDIS_VERSION: Final = (6, 2)
#: Sorts after every UTF-8 string: 0xff never occurs in UTF-8.
ABOVE_ANY_UTF8: Final = b"\xff"

# The Redis keys every script receives, in this order.
_KEY_SUFFIXES: Final = ("log", "keys", "ids", "obj", "ver", "seq")

_PRELUDE: Final = """
local log, index, ids, objects, versions, sequence =
    KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]

local function forget(key)
    local id = redis.call('HGET', ids, key)
    if id then
        redis.call('XDEL', log, id)
        redis.call('HDEL', ids, key)
    end
    redis.call('HDEL', objects, key)
    redis.call('HDEL', versions, key)
    redis.call('ZREM', index, key)
end

local function version_of(key)
    local version = redis.call('HGET', versions, key)
    if version then return version end
    return redis.call('HGET', ids, key)
end

local function put_object(key, data)
    forget(key)
    local version = tostring(redis.call('INCR', sequence))
    redis.call('HSET', objects, key, data)
    redis.call('HSET', versions, key, version)
    redis.call('ZADD', index, 0, key)
    return version
end
"""

# ARGV: key, data. Returns the new stream id, or false if the key exists.
_CREATE: Final = """
local key, data = ARGV[1], ARGV[2]
if redis.call('ZSCORE', index, key) then return false end
local id = redis.call('XADD', log, '*', 'key', key, 'data', data)
redis.call('HSET', ids, key, id)
redis.call('ZADD', index, 0, key)
return id
"""

# ARGV: key, most bytes wanted. Returns {data, version}, {size, version} (an integer) when
# the data is longer than wanted, so it never leaves the server, or false if absent.
_READ: Final = """
local key, max_bytes = ARGV[1], tonumber(ARGV[2])
local function bounded(data, version)
    if string.len(data) > max_bytes then return {string.len(data), version} end
    return {data, version}
end
local id = redis.call('HGET', ids, key)
if id then
    local found = redis.call('XRANGE', log, id, id)
    if #found == 0 then return false end
    local fields = found[1][2]
    for i = 1, #fields, 2 do
        if fields[i] == 'data' then return bounded(fields[i + 1], id) end
    end
    return false
end
local data = redis.call('HGET', objects, key)
if not data then return false end
return bounded(data, redis.call('HGET', versions, key))
"""

# ARGV: key, data, '1' if the key must be absent else '0', expected version.
# Returns the new version, or false if the condition did not hold.
_WRITE_VERSIONED: Final = """
local key, data, must_be_absent, expected = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local current = version_of(key)
if must_be_absent == '1' then
    if current then return false end
elseif current ~= expected then
    return false
end
return put_object(key, data)
"""

# ARGV: key, data. Returns the new version.
_WRITE_OVERWRITE: Final = """
return put_object(ARGV[1], ARGV[2])
"""

# ARGV: the keys to remove. Returns how many existed.
_DELETE: Final = """
local removed = 0
for i = 1, #ARGV do
    if redis.call('ZSCORE', index, ARGV[i]) then removed = removed + 1 end
    forget(ARGV[i])
end
return removed
"""

# ARGV: lowest bound of the folder (ZRANGEBYLEX syntax), exclusive upper bound, page size.
# Removes one page of keys in the range and returns how many it removed.
_TRIM_PAGE: Final = """
local doomed = redis.call('ZRANGEBYLEX', index, ARGV[1], ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for i = 1, #doomed do forget(doomed[i]) end
return #doomed
"""

# Drops the stream's storage below its oldest remaining entry.
_TRIM_STREAM: Final = """
local oldest = redis.call('XRANGE', log, '-', '+', 'COUNT', 1)
if #oldest == 0 then return redis.call('XTRIM', log, 'MAXLEN', 0) end
return redis.call('XTRIM', log, 'MINID', oldest[1][1])
"""


def _parse_version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


class RedisStreamsBackend:
    """A mesh's zeitgeist under `prefix` on the Redis server at `url`."""

    name: str = BACKEND_NAME

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
        socket_connect_timeout_s: float = DEFAULT_CONNECT_TIMEOUT_S,
        page_size: int = PAGE_SIZE,
        retry: RetryPolicy | None = None,
    ) -> None:
        if not prefix:
            raise RedisConfigError("the Redis key prefix must be non-empty")
        if not page_size >= 1:
            raise RedisConfigError(f"page_size must be >= 1, got {page_size!r}")
        self._redis = RedisConnection(
            url,
            prefix,
            socket_timeout_s=socket_timeout_s,
            socket_connect_timeout_s=socket_connect_timeout_s,
            retry=retry,
        )
        self.url = url
        self.page_size = page_size
        self.prefix = prefix
        self.requests = self._redis.requests
        self._keys = [f"{prefix}:{suffix}" for suffix in _KEY_SUFFIXES]
        self._index_key = self._keys[_KEY_SUFFIXES.index("keys")]
        self._scripts = {
            name: self._redis.client.register_script(_PRELUDE + body)
            for name, body in (
                ("create", _CREATE),
                ("read", _READ),
                ("write_versioned", _WRITE_VERSIONED),
                ("write_overwrite", _WRITE_OVERWRITE),
                ("delete", _DELETE),
                ("trim_page", _TRIM_PAGE),
                ("trim_stream", _TRIM_STREAM),
            )
        }

    @property
    def client(self) -> redis.Redis:
        """The underlying redis-py client (for tests and diagnostics)."""
        return self._redis.client

    @property
    def location(self) -> str:
        """Where this backend writes, for error messages (without any password)."""
        return self._redis.location

    def probe(self) -> None:
        self._redis.run("PING", "", self._redis.client.ping)
        info = self._redis.run("INFO", "", functools.partial(self._redis.client.info, "server"))
        version = str(info.get("redis_version", "0"))
        if _parse_version(version) < MINIMUM_REDIS_VERSION:
            wanted = ".".join(map(str, MINIMUM_REDIS_VERSION))
            raise UnsupportedStore(
                f"{self.location} runs Redis {version}; the zeitgeist needs Redis >= {wanted} "
                "(streams with XTRIM MINID)"
            )
        check_create_only(
            lambda key, data: self._script("create", key, [key, data]) is not None,
            self.delete,
            self.location,
            "let a create-only write replace an entry",
        )
        persistence = self._redis.run(
            "INFO", "", functools.partial(self._redis.client.info, "persistence")
        )
        if not int(persistence.get("aof_enabled", 0)):
            log.warning(
                "%s has no append-only file: a Redis restart loses the zeitgeist "
                "(set appendonly yes)",
                self.location,
            )

    def create(self, key: str, data: bytes) -> None:
        if self._conditional_write("create", key, data, [key, data]) is None:
            raise KeyExists(f"{key!r} already exists in {self.location}")

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        current = self.read_versioned(key, max_bytes=max_bytes)
        if current is None:
            raise KeyError(key)
        return current.data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        low = b"(" + start_after.encode() if start_after >= prefix else b"[" + prefix.encode()
        high = b"[" + prefix.encode() + ABOVE_ANY_UTF8 if prefix else b"+"
        keys: list[str] = []
        while True:
            page = cast(
                list[bytes],
                self._redis.run(
                    "ZRANGEBYLEX",
                    prefix,
                    functools.partial(
                        self._redis.client.zrangebylex,
                        self._index_key,
                        low,
                        high,
                        0,
                        self.page_size,
                    ),
                ),
            )
            keys.extend(member.decode() for member in page)
            if len(page) < self.page_size:
                return keys
            low = b"(" + page[-1]

    def delete(self, keys: list[str]) -> None:
        for start in range(0, len(keys), self.page_size):
            batch = keys[start : start + self.page_size]
            self._script("delete", batch[0], batch)

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        """The script measures the object on the server: one longer than `max_bytes` is
        refused without a byte of it sent."""
        self._check_key(key)
        check_read_bound(max_bytes)
        found = cast(list[Any] | None, self._script("read", key, [key, max_bytes]))
        if found is None:
            return None
        data, version = found
        if isinstance(data, int):
            raise ObjectTooLarge(key, max_bytes, received=0, size=data, where=self.location)
        return Versioned(data=bytes(data), etag=bytes(version).decode())

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        must_be_absent = b"1" if expect is None else b"0"
        version = self._conditional_write(
            "write_versioned", key, data, [key, data, must_be_absent, expect or ""]
        )
        if version is None:
            raise precondition_failed(key, self.location, expect)
        return version

    def write_overwrite(self, key: str, data: bytes) -> None:
        self._check_key(key)
        self._script("write_overwrite", key, [key, data])

    def trim(self, min_key: str) -> int:
        """Drop every key in `min_key`'s folder that sorts before it; XTRIM the stream.

        Compaction calls this with the minimum cursor of the live peers once the
        entries below it are folded into a snapshot. Keys at or after `min_key` keep
        their data whatever order they were appended in: the stream is trimmed with
        MINID at its oldest remaining entry, not at `min_key`'s own entry. Returns
        the number of keys removed.
        """
        self._check_key(min_key)
        if "/" not in min_key:
            # Without a folder the range would reach heartbeats and the lease.
            raise InvalidKey(f"trim needs a key inside a folder such as 'seg/', got {min_key!r}")
        folder = min_key[: min_key.rfind("/") + 1]
        low = b"[" + folder.encode()
        high = b"(" + min_key.encode()
        removed = 0
        while True:
            count = int(self._script("trim_page", min_key, [low, high, self.page_size]))
            removed += count
            if count < self.page_size:
                break
        self._script("trim_stream", min_key, [])
        return removed

    def close(self) -> None:
        self._redis.close()

    def _conditional_write(
        self, script: str, key: str, data: bytes, args: Sequence[str | bytes]
    ) -> str | None:
        """Run a create-only or compare-and-swap script; the new version or None if refused.

        After a retry, a refusal is checked against the stored bytes: the script may have
        met the effect of its own earlier attempt, whose reply was lost.
        """
        self._check_key(key)
        attempts = 0

        def attempt() -> Any:
            nonlocal attempts
            attempts += 1
            return self._scripts[script](keys=self._keys, args=list(args))

        result = self._redis.run(f"script:{script}", key, attempt)
        if result is not None:
            return bytes(result).decode()
        if attempts > 1:
            return written_by_earlier_attempt(self, key, data)
        return None

    def _script(self, script: str, key: str, args: Sequence[str | bytes | int]) -> Any:
        return self._redis.run(
            f"script:{script}",
            key,
            functools.partial(self._scripts[script], keys=self._keys, args=list(args)),
        )

    def _check_key(self, key: str) -> None:
        if not key:
            raise InvalidKey(f"empty key for {self.location}")
