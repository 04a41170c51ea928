"""The narrow storage interface every zeitgeist backend implements.

Keys are '/'-separated strings relative to the mesh prefix, e.g.
``seg/0000018c2f3a0001-peerA-0000002a.ndjson.gz``. Backends store opaque bytes;
ordering, windows, fencing decisions and compaction policy live in `zeitgeist.log`.
All calls are blocking; the daemon runs them in worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class BackendError(Exception):
    """A backend failure that retrying did not cure; the message names the operation."""


class KeyExists(BackendError):
    """A create-only write found the key already present (S3 412 on If-None-Match)."""


class PreconditionFailed(BackendError):
    """A compare-and-swap write lost: the object changed or vanished (412, or 404 on AWS)."""


class UnsupportedStore(BackendError):
    """The store does not honour conditional writes; using it could silently lose entries."""


@dataclass(frozen=True)
class Versioned:
    """An object's bytes with the token that a later compare-and-swap must present."""

    data: bytes
    etag: str


class LogBackend(Protocol):
    #: Short name used in logs, metrics and config: "dir", "s3", "redis".
    name: str

    def probe(self) -> None:
        """Check the store is reachable and honours create-only writes; raise UnsupportedStore or BackendError."""
        ...

    def create(self, key: str, data: bytes) -> None:
        """Write `key` only if absent; raise KeyExists otherwise. Durable when it returns."""
        ...

    def read(self, key: str) -> bytes:
        """The bytes of `key`; raise KeyError if absent."""
        ...

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        """Every key under `prefix` that sorts after `start_after`, ascending (all pages)."""
        ...

    def delete(self, keys: list[str]) -> None:
        """Remove keys; absent keys are not an error."""
        ...

    def read_versioned(self, key: str) -> Versioned | None:
        """Bytes and version token of a mutable object (heartbeat, lease), or None if absent."""
        ...

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        """Compare-and-swap: write if the current version is `expect` (None: only if absent).

        Returns the new version token; raises PreconditionFailed if the object changed.
        """
        ...

    def write_overwrite(self, key: str, data: bytes) -> None:
        """Unconditional write of a mutable object (heartbeats)."""
        ...

    def close(self) -> None: ...
