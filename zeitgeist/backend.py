"""The narrow storage interface every zeitgeist backend implements.

Keys are '/'-separated strings relative to the mesh prefix, e.g.
``seg/0000018c2f3a0001-peerA-0000002a.ndjson.gz``. Backends store opaque bytes;
ordering, windows, fencing decisions and compaction policy live in `zeitgeist.log`.
All calls are blocking; the daemon runs them in worker threads. The checks that the
networked backends make alike (the probe of create-only writes, a retried write that
finds its own effect) are written here once.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from dreamcycle.zeitgeist.defaults import MAX_SNAPSHOT_COMPRESSED_BYTES
from dreamcycle.zeitgeist.object_keys import PROBE_PREFIX

#: The most any read returns unless its caller bounds it tighter: as large as the largest
#: object the log layer reads (a snapshot at its default limit), so no call, however
#: careless, pulls a many-GiB object into memory.
MAX_OBJECT_BYTES: Final = MAX_SNAPSHOT_COMPRESSED_BYTES


class BackendError(Exception):
    """A backend failure that retrying did not cure; the message names the operation."""


class UnreadableObject(BackendError):
    """One listed object this peer may not read, while the store answers for the rest (a
    file's mode or owner, a link loop). A segment is waited for, never refused: the usual
    cause, peers that may not read each other's files, is fixed by an operator, and a
    refusal would skip the segment for good. The log reads on past it meanwhile."""


class KeyExists(BackendError):
    """A create-only write found the key already present (S3 412 on If-None-Match)."""


class PreconditionFailed(BackendError):
    """A compare-and-swap write lost: the object changed or vanished (412, or 404 on AWS)."""


class UnsupportedStore(BackendError):
    """The store does not honour conditional writes; using it could silently lose entries."""


class ObjectTooLarge(ValueError):
    """An object holds more bytes than its reader's bound: refused before it is read whole.

    Not a BackendError: the store answered, and it is the object that is refused, so
    nobody mistakes it for an outage. `received` is how many of its bytes reached this
    process (at most the bound plus one; 0 when the store told its size first), `size`
    its full size when the store said it (None when unknown).
    """

    def __init__(
        self, key: str, max_bytes: int, *, received: int, size: int | None, where: str
    ) -> None:
        told = f"{size} bytes" if size is not None else "more bytes"
        super().__init__(
            f"{key!r} in {where} holds {told}, more than the {max_bytes} its reader accepts; "
            f"refused after receiving {received} bytes"
        )
        self.key = key
        self.max_bytes = max_bytes
        self.received = received
        self.size = size


def check_read_bound(max_bytes: int) -> int:
    """`max_bytes` when it is a usable bound on a read; ValueError naming it otherwise."""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise ValueError(f"max_bytes must be a non-negative integer, got {max_bytes!r}")
    return max_bytes


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

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        """The bytes of `key`; raise KeyError if absent.

        At most `max_bytes + 1` bytes of it are fetched: a larger object raises
        ObjectTooLarge rather than being downloaded whole.
        """
        ...

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        """Every key under `prefix` that sorts after `start_after`, ascending (all pages)."""
        ...

    def delete(self, keys: list[str]) -> None:
        """Remove keys; absent keys are not an error."""
        ...

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        """Bytes and version token of a mutable object (heartbeat, lease), or None if absent;
        bounded like `read` (ObjectTooLarge beyond `max_bytes`)."""
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


def check_create_only(
    create_if_absent: Callable[[str, bytes], bool],
    delete: Callable[[list[str]], None],
    location: str,
    failure: str,
) -> None:
    """Create a throw-away key twice: the second create must be refused. A store that lets
    it through (`failure` says how) raises UnsupportedStore: it would let one writer
    overwrite another's entries. `create_if_absent` says whether the key was created."""
    probe_key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
    try:
        if not create_if_absent(probe_key, b"probe: first write"):
            raise BackendError(f"probe key {probe_key!r} already existed in {location}")
        # Different bytes, so the retry reconciliation cannot mistake an overwrite.
        if create_if_absent(probe_key, b"probe: second write"):
            raise UnsupportedStore(
                f"{location} {failure}; using it could silently lose log entries"
            )
    finally:
        delete([probe_key])


def written_by_earlier_attempt(backend: LogBackend, key: str, data: bytes) -> str | None:
    """The version token of `key` if it holds exactly `data`, else None.

    A retried conditional write may meet the effect of its own earlier attempt, one whose
    reply was lost: the condition then fails although this very write landed. An object
    longer than `data` is not read further: it is not this write's effect.
    """
    try:
        current = backend.read_versioned(key, max_bytes=len(data))
    except ObjectTooLarge:
        return None
    if current is not None and current.data == data:
        return current.etag
    return None


def precondition_failed(key: str, location: str, expect: str | None) -> PreconditionFailed:
    """The error of a compare-and-swap that found `key` changed from version `expect`."""
    expected = "absent" if expect is None else f"at version {expect}"
    return PreconditionFailed(f"{key!r} in {location} is no longer {expected}")
