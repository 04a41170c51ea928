"""The zeitgeist backend's health as its calls report it: reachable or not, the last error,
and when segments were last listed (a poll) and written (a publish). /readyz reads it
(health.py); the metrics follow it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dreamcycle.daemon.observe import metrics
from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    BackendError,
    KeyExists,
    LogBackend,
    ObjectTooLarge,
    PreconditionFailed,
    UnreadableObject,
    Versioned,
)
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX

#: The logger of the daemon's health, whichever part of it speaks.
log = logging.getLogger("dreamcycle.health")


@dataclass
class BackendHealth:
    """What the last calls to the zeitgeist backend said (written by one thread at a time)."""

    name: str
    reachable: bool | None = None
    last_error: str | None = None
    last_poll_ms: int | None = None
    last_publish_ms: int | None = None

    def succeeded(self) -> None:
        self.reachable, self.last_error = True, None
        metrics.BACKEND_UP.labels(self.name).set(1)

    def failed(self, error: BackendError) -> None:
        if self.reachable is not False:
            log.warning("zeitgeist backend unreachable", extra={"error": str(error)})
        self.reachable, self.last_error = False, str(error)
        metrics.BACKEND_UP.labels(self.name).set(0)

    def polled(self, now_ms: int) -> None:
        self.last_poll_ms = now_ms
        metrics.LAST_POLL.set(now_ms / 1000)

    def published(self, now_ms: int) -> None:
        self.last_publish_ms = now_ms
        metrics.LAST_PUBLISH.set(now_ms / 1000)


class ObservedBackend:
    """A backend whose every call is recorded in a `BackendHealth`: reachable or not, and
    when segments were last listed (a poll) and written (a publish)."""

    def __init__(self, inner: LogBackend, health: BackendHealth, now_ms: Callable[[], int]):
        self.inner = inner
        self.health = health
        self.name = inner.name
        self._now_ms = now_ms

    def _call(self, operation: Callable[[], Any]) -> Any:
        try:
            result = operation()
        # The store answered: a lost race, an existing key or a refused object is not an
        # outage.
        except (KeyExists, PreconditionFailed, ObjectTooLarge, UnreadableObject):
            self.health.succeeded()
            raise
        except BackendError as exc:
            self.health.failed(exc)
            raise
        self.health.succeeded()
        return result

    def probe(self) -> None:
        self._call(self.inner.probe)

    def create(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.create(key, data))
        if key.startswith(SEGMENT_PREFIX):
            self.health.published(self._now_ms())

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        data: bytes = self._call(lambda: self.inner.read(key, max_bytes=max_bytes))
        return data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        keys: list[str] = self._call(lambda: self.inner.list_after(prefix, start_after))
        if prefix == SEGMENT_PREFIX:
            self.health.polled(self._now_ms())
        return keys

    def delete(self, keys: list[str]) -> None:
        self._call(lambda: self.inner.delete(keys))

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        found: Versioned | None = self._call(
            lambda: self.inner.read_versioned(key, max_bytes=max_bytes)
        )
        return found

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        etag: str = self._call(lambda: self.inner.write_versioned(key, data, expect))
        return etag

    def write_overwrite(self, key: str, data: bytes) -> None:
        self._call(lambda: self.inner.write_overwrite(key, data))

    def close(self) -> None:
        self.inner.close()
