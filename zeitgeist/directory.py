"""The local-directory backend: every key is a file under one root directory.

Create-only writes go through a fsynced temp file that is hard-linked into place:
link(2) fails if the name exists, so a key is never overwritten, and a reader
never sees a partly written file. Compare-and-swap writes of mutable objects
(lease, heartbeats) hold an exclusive flock on a lock file, so several processes
on one machine can share a root safely.

A segment file that this process may not read (its mode or owner, a link loop) in a
folder it can search is one unreadable object (UnreadableObject), which the log reads on
past; a folder that cannot be searched or listed is an outage.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    BackendError,
    KeyExists,
    ObjectTooLarge,
    PreconditionFailed,
    UnreadableObject,
    UnsupportedStore,
    Versioned,
    check_read_bound,
)
from dreamcycle.zeitgeist.object_keys import PROBE_PREFIX, SEGMENT_PREFIX

#: Lock file for compare-and-swap writes; its leading dot keeps it out of listings.
LOCK_FILE_NAME: Final = ".versioned.lock"
TEMP_PREFIX: Final = "."
TEMP_SUFFIX: Final = ".tmp"
#: Bytes hashed at a time when a compare-and-swap checks the current version.
HASH_CHUNK_BYTES: Final = 1024 * 1024
#: Times a write makes its folder again when another process removed it meanwhile.
FOLDER_VANISHED_ATTEMPTS: Final = 8


#: Errors opening a file that are about that file alone (its mode, owner or ACL, a link
#: loop) once its name is found in a folder this process can search.
FILE_ERRNOS: Final = frozenset({errno.EACCES, errno.EPERM, errno.ELOOP})


def _about_the_file(path: Path, error: OSError) -> bool:
    """Whether `error`, met opening `path`, is about that file rather than a folder above
    it: finding the name needs search permission on every folder above it, and lstat does
    not follow a link at the end."""
    if error.errno not in FILE_ERRNOS:
        return False
    try:
        os.lstat(path)
    except OSError:
        return False
    return True


class InvalidBackendKey(BackendError, ValueError):
    """A key that would escape the root or collide with the backend's own files."""


def _version_token(data: bytes) -> str:
    # A content hash: equal bytes mean equal state, so an A-B-A change is harmless.
    return hashlib.sha256(data).hexdigest()


def _current_version(path: Path) -> str | None:
    """The version token of the file at `path` (None if absent), hashed a chunk at a time:
    a compare-and-swap over a huge object costs time, never its size in memory."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as stream:
            while chunk := stream.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None
    return digest.hexdigest()


def _write_fsynced(path: Path, data: bytes) -> Path:
    """`data` in a new file at `path` (its folder made if missing), on disk when it returns."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "xb") as stream:
        stream.write(data)
        stream.flush()
        os.fsync(stream.fileno())
    return path


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class DirectoryBackend:
    """LogBackend over a local directory; safe for several processes on one machine."""

    name = "dir"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"DirectoryBackend({str(self.root)!r})"

    # ---- paths ---------------------------------------------------------------

    def _path(self, key: str) -> Path:
        parts = key.split("/")
        for part in parts:
            if not part or part in (".", "..") or part.startswith(TEMP_PREFIX) or "\0" in part:
                raise InvalidBackendKey(
                    f"dir: key {key!r} has an empty, relative or hidden path component {part!r}"
                )
        return self.root.joinpath(*parts)

    def _fail(self, operation: str, key: str, exc: OSError) -> BackendError:
        return BackendError(f"dir: {operation} {key!r} under {self.root}: {exc}")

    def _missing(self, operation: str, key: str, exc: OSError) -> None:
        """Raise BackendError unless `key` is merely absent: a log whose root is a file
        (a mount gone wrong) is unreachable, not empty. A root not made yet is a new log."""
        if self.root.exists() and not self.root.is_dir():
            raise self._fail(operation, key, exc) from exc

    def _write_temp(self, path: Path, data: bytes) -> Path:
        """A fsynced file with `data` next to `path`, under a name no listing shows."""
        temp = path.with_name(f"{TEMP_PREFIX}{path.name}.{uuid.uuid4().hex}{TEMP_SUFFIX}")
        for _ in range(FOLDER_VANISHED_ATTEMPTS - 1):
            try:
                return _write_fsynced(temp, data)
            except (FileNotFoundError, FileExistsError):
                # Another process removed the folder as it emptied (a probe finishing):
                # the folder is made again; once this file is in it, it is not empty.
                continue
        return _write_fsynced(temp, data)

    @contextlib.contextmanager
    def _exclusive_lock(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / LOCK_FILE_NAME, "a+b") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _replace(self, path: Path, data: bytes) -> None:
        temp = self._write_temp(path, data)
        try:
            os.replace(temp, path)
        except BaseException:
            temp.unlink(missing_ok=True)
            raise
        _fsync_directory(path.parent)

    # ---- LogBackend ------------------------------------------------------------

    def probe(self) -> None:
        key = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        try:
            self.create(key, b"probe")
        except BackendError as exc:
            raise BackendError(f"dir: {self.root} is not writable: {exc}") from None
        try:
            self.create(key, b"second write")
        except KeyExists:
            pass
        else:
            raise UnsupportedStore(f"dir: {self.root} let a create-only write replace a file")
        finally:
            self.delete([key])
        with contextlib.suppress(OSError):
            (self.root / PROBE_PREFIX).rmdir()

    def create(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            temp = self._write_temp(path, data)
            try:
                os.link(temp, path)
            except FileExistsError:
                raise KeyExists(f"dir: {key!r} already exists under {self.root}") from None
            finally:
                temp.unlink(missing_ok=True)
            _fsync_directory(path.parent)
        except OSError as exc:
            raise self._fail("create", key, exc) from exc

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        check_read_bound(max_bytes)
        path = self._path(key)
        try:
            with open(path, "rb") as stream:
                size = os.fstat(stream.fileno()).st_size
                # The size first, so a huge file is refused unread; the bounded read
                # still holds if the file grows in between. A read asks for the file's size
                # (plus one), not the bound: Python allocates what a read asks for.
                data = b"" if size > max_bytes else stream.read(min(size, max_bytes) + 1)
                if size < len(data) <= max_bytes:
                    data += stream.read(max_bytes + 1 - len(data))  # it grew meanwhile
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            self._missing("read", key, exc)
            raise KeyError(key) from None
        except OSError as exc:
            if key.startswith(SEGMENT_PREFIX) and _about_the_file(path, exc):
                # Not chained: a permission error among the causes reads as this peer's
                # own data directory made read-only (daemon/observe/storage_health.py).
                raise UnreadableObject(
                    f"dir: cannot read {key!r} under {self.root}: {exc}; peers sharing a "
                    "directory must be able to read each other's files"
                ) from None
            raise self._fail("read", key, exc) from exc
        if size > max_bytes or len(data) > max_bytes:
            raise ObjectTooLarge(
                key, max_bytes, received=len(data), size=max(size, len(data)), where=str(self.root)
            )
        return data

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        """Keys one directory level below the last '/' of `prefix` (e.g. "seg/", "claim/p/")."""
        directory_key, _, name_prefix = prefix.rpartition("/")
        directory = self._path(directory_key) if directory_key else self.root
        base = f"{directory_key}/" if directory_key else ""
        # Every key here is base + name: past the base, names compare as their keys do.
        # A poll lists the recent end of a long log, so the one string comparison goes
        # first and the older names cost nothing more.
        if start_after.startswith(base):
            after_name = start_after[len(base) :]
        elif start_after < base:
            after_name = ""
        else:
            return []
        try:
            with os.scandir(directory) as items:
                later = [item for item in items if item.name > after_name]
        except (FileNotFoundError, NotADirectoryError) as exc:
            self._missing("list", prefix, exc)
            return []
        except OSError as exc:
            raise self._fail("list", prefix, exc) from exc
        return sorted(
            base + item.name
            for item in later
            if item.name.startswith(name_prefix)
            and not item.name.startswith(TEMP_PREFIX)
            and item.is_file(follow_symlinks=False)
        )

    def delete(self, keys: list[str]) -> None:
        directories: set[Path] = set()
        for key in keys:
            path = self._path(key)
            try:
                path.unlink(missing_ok=True)
            except OSError as exc:
                raise self._fail("delete", key, exc) from exc
            directories.add(path.parent)
        for directory in directories:
            with contextlib.suppress(FileNotFoundError):
                _fsync_directory(directory)

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        try:
            data = self.read(key, max_bytes=max_bytes)
        except KeyError:
            return None
        return Versioned(data=data, etag=_version_token(data))

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        path = self._path(key)
        try:
            with self._exclusive_lock():
                current = _current_version(path)
                if expect is None and current is not None:
                    raise PreconditionFailed(f"dir: {key!r} already exists (expected absent)")
                if expect is not None and current != expect:
                    found = "absent" if current is None else f"version {current[:12]}"
                    raise PreconditionFailed(
                        f"dir: {key!r} changed: expected version {expect[:12]}, found {found}"
                    )
                self._replace(path, data)
        except OSError as exc:
            raise self._fail("write_versioned", key, exc) from exc
        return _version_token(data)

    def write_overwrite(self, key: str, data: bytes) -> None:
        path = self._path(key)
        try:
            with self._exclusive_lock():
                self._replace(path, data)
        except OSError as exc:
            raise self._fail("write_overwrite", key, exc) from exc

    def close(self) -> None:
        """Nothing is held open between calls."""
