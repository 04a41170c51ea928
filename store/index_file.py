"""The sealed files of a saved HNSW index: hnswlib's own file and the meta sidecar.

`<path>` is hnswlib's format; `<path>.meta.json` records what the file holds
(dimension, index_version, element count, the database stamp it matches, build
parameters, tombstoned labels) and seals it: the file's size and blake3 checksum, and an
identity drawn afresh at every save, which the database records too (so a copy of an
older save, or another peer's index, is told apart from the one this database last
saved). Both are replaced atomically, the meta last, so a crash between the two leaves
a meta that does not describe the file, which `read_meta` and `load_verified` detect.

hnswlib trusts its input: a damaged body loads and then crashes the process (SIGSEGV)
in the first query. `load_verified` therefore hands hnswlib only a file whose checksum
it has verified, after `check_header` has compared hnswlib's header with the meta.
"""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import blake3

#: Version of the meta sidecar's layout (2: sealed with size, checksum and identity).
META_FORMAT: Final = 2
#: The layout written before the seal: such a file is rebuilt once.
UNSEALED_META_FORMAT: Final = 1
#: Random bytes in a save's identity.
IDENTITY_BYTES: Final = 16
#: Bytes of an index file hashed at a time when it is verified.
CHECKSUM_BUFFER_BYTES: Final = 16 * 1024 * 1024
META_SUFFIX: Final = ".meta.json"
TEMPORARY_SUFFIX: Final = ".tmp"

# hnswlib's file header (hnswalg.h saveIndex), little-endian on 64-bit hosts:
# offsetLevel0, max_elements, cur_element_count, size_data_per_element, label_offset,
# offsetData (size_t), maxlevel (int), enterpoint_node (uint32), maxM, maxM0, M
# (size_t), mult (double), ef_construction (size_t).
_HEADER: Final = struct.Struct("<6QiI3QdQ")
_LINK_COUNT_BYTES: Final = 4
_FLOAT32_BYTES: Final = 4
_LABEL_BYTES: Final = 8


class VectorIndexError(Exception):
    """Base class for errors of the HNSW index."""


class Unusable(StrEnum):
    """Why a saved index is not used, in few enough words to label a metric."""

    MISSING = "missing"
    #: The sidecar or hnswlib's header cannot be read, or hnswlib refused the file.
    CORRUPT = "corrupt"
    #: The file is shorter (truncated) or longer than the one saved.
    SIZE = "size"
    CHECKSUM = "checksum"
    #: Saved by a version that did not seal the file.
    NO_CHECKSUM = "no_checksum"
    #: Not the index this database last saved: an older save, or another peer's.
    IDENTITY = "identity"
    #: Another embedding model (dimension or index_version).
    MODEL = "model"
    #: The database changed after the save.
    STALE = "stale"
    #: Its live labels are not the database's live chunks.
    LABELS = "labels"


class IndexUnusable(VectorIndexError):
    """The saved index cannot be used as it is and must be rebuilt from the database."""

    def __init__(self, kind: Unusable, reason: str, path: Path) -> None:
        super().__init__(f"index {path} is unusable: {reason}")
        self.kind = kind
        self.reason = reason
        self.path = path


@dataclass(frozen=True)
class IndexMeta:
    format: int
    dim: int
    index_version: str
    count: int
    stamp: str
    m: int
    ef_construction: int
    max_elements: int
    deleted: list[int]
    size: int
    checksum: str
    identity: str
    #: Those of `deleted` the engine holds unmarked: the cold tier, searched apart. A file
    #: saved before the engine kept cold chunks has none (they are marked deleted there).
    cold: list[int] = field(default_factory=list)


def meta_path(path: Path) -> Path:
    """Where the sidecar describing the index file at `path` lives."""
    return path.with_name(path.name + META_SUFFIX)


def temporary_path(path: Path) -> Path:
    return path.with_name(path.name + TEMPORARY_SUFFIX)


def fsync_path(path: Path) -> None:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def replace_durably(temporary: Path, final: Path) -> None:
    """Make the fully written `temporary` appear as `final`, surviving a power cut.

    IndexSaveFailed when the file system refuses (a directory in the file's place, no
    permission, a full disk); the OSError is its cause, for the daemon to tell a storage
    fault it waits out (daemon/observe/storage_health.py)."""
    try:
        fsync_path(temporary)
        os.replace(temporary, final)
        fsync_path(final.parent)
    except OSError as error:
        raise save_failed(final, error) from error


def save_failed(path: Path, error: OSError) -> IndexSaveFailed:
    """The file system refused to let the index be written at `path`."""
    if error.errno == errno.EISDIR or path.is_dir():
        return IndexSaveFailed(
            f"cannot write index {path}: it is a directory; move it out of the way and try again"
        )
    if path.parent.is_dir() and not os.access(path.parent, os.W_OK | os.X_OK):
        # hnswlib reports no failure of its own: a file it could not create is just missing.
        return IndexSaveFailed(
            f"cannot write index {path}: its directory {path.parent} cannot be written "
            "(permissions or a read-only mount)"
        )
    return IndexSaveFailed(f"cannot write index {path}: {error}")


def read_meta(path: Path) -> IndexMeta:
    sidecar = meta_path(path)
    if not path.exists():
        raise IndexUnusable(Unusable.MISSING, "missing", path)
    if not sidecar.exists():
        raise IndexUnusable(Unusable.MISSING, f"missing meta sidecar {sidecar.name}", path)
    try:
        fields = json.loads(sidecar.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise IndexUnusable(
            Unusable.CORRUPT, f"corrupt: meta sidecar unreadable ({error})", path
        ) from error
    if isinstance(fields, dict) and fields.get("format") == UNSEALED_META_FORMAT:
        raise IndexUnusable(Unusable.NO_CHECKSUM, "no checksum: saved by an older version", path)
    try:
        meta = IndexMeta(**fields)
    except TypeError as error:
        raise IndexUnusable(
            Unusable.CORRUPT, f"corrupt: meta sidecar unreadable ({error})", path
        ) from error
    if meta.format != META_FORMAT:
        raise IndexUnusable(Unusable.CORRUPT, f"meta format {meta.format!r} != {META_FORMAT}", path)
    integers = (meta.dim, meta.count, meta.m, meta.ef_construction, meta.max_elements, meta.size)
    well_typed = (
        all(isinstance(value, int) for value in integers)
        and isinstance(meta.index_version, str)
        and isinstance(meta.stamp, str)
        and isinstance(meta.checksum, str)
        and isinstance(meta.identity, str)
        and isinstance(meta.deleted, list)
        and all(isinstance(label, int) for label in meta.deleted)
        and isinstance(meta.cold, list)
        and all(isinstance(label, int) for label in meta.cold)
    )
    if not well_typed:
        raise IndexUnusable(
            Unusable.CORRUPT, "corrupt: meta sidecar has fields of the wrong type", path
        )
    return meta


#: Bytes enough for blake3 to hash on its thread pool (smaller inputs it hashes alone).
_POOL_START_BYTES: Final = 1 << 16


def start_checksum_threads() -> None:
    """Start the thread pool checksums are hashed on, now, in the calling thread: blake3
    starts it with the first large input and keeps its threads, at the priority of the
    thread that started them. The daemon calls this at start, so that the cycle's thread,
    saving the index under SCHED_IDLE, does not start them (and every later checksum,
    at start-up too, run) at that priority."""
    blake3.blake3(bytes(_POOL_START_BYTES), max_threads=blake3.blake3.AUTO).digest()


def _checksum(file: int) -> str:
    """blake3 of the whole file open as descriptor `file`, read a buffer at a time: a
    mapped file's pages count as the process's resident memory while it is hashed, which
    added about the file's size to the peak of every start, beside the index itself
    (scripts/bench_scale.py measures that peak at a million chunks)."""
    hasher = blake3.blake3(max_threads=blake3.blake3.AUTO)
    buffer = bytearray(CHECKSUM_BUFFER_BYTES)
    view = memoryview(buffer)
    offset = 0
    while read := os.preadv(file, [buffer], offset):
        hasher.update(view[:read])
        offset += read
    return hasher.hexdigest()


def file_checksum(path: Path) -> str:
    descriptor = os.open(path, os.O_RDONLY)
    try:
        return _checksum(descriptor)
    finally:
        os.close(descriptor)


class IndexSaveFailed(VectorIndexError):
    """hnswlib could not write the index file (disk full, no permission, ...)."""


def write_engine(engine: Any, path: Path) -> None:
    """hnswlib's `save_index(path)`, and a check that it wrote the whole file.

    hnswlib holds the GIL for the whole write (a time that grows with the index), so every
    other thread of the process waits meanwhile; the
    daemon writes its index at most every `index.save_interval_s`. A forked child writing
    it instead was tried and withdrawn: fork() runs OpenBLAS's atfork handler, which
    waited for the library's thread pool while a request thread was in a matrix product,
    and the process hung.
    """
    engine.save_index(str(path))
    _check_written(path)


def _check_written(path: Path) -> None:
    """hnswlib reports no failed write (a full disk leaves a short file): the file must at
    least hold the header and every element's level-0 record its header counts."""
    try:
        size = path.stat().st_size
        with path.open("rb") as file:
            header = file.read(_HEADER.size)
    except OSError as error:
        raise save_failed(path, error) from error
    if len(header) < _HEADER.size:
        raise IndexSaveFailed(f"cannot write index {path}: {size} bytes, no full header")
    count, bytes_per_element = _HEADER.unpack(header)[2:4]
    least = _HEADER.size + count * (bytes_per_element + _LINK_COUNT_BYTES)
    if size < least:
        raise IndexSaveFailed(
            f"cannot write index {path}: {size} bytes, less than the {least} its "
            f"{count} elements take (is the disk full?)"
        )


def load_verified(
    engine: Any, path: Path, meta: IndexMeta, *, while_hashing: Callable[[], None] | None = None
) -> None:
    """Load `path` into `engine` only if it is, byte for byte, the file `meta` sealed.

    The file is hashed on a thread meanwhile the calling thread runs `while_hashing`
    (reading what the load is to be checked against, say): hashing and reading a
    database both run mostly without the GIL, so the two overlap. hnswlib's load holds
    the GIL throughout, so it comes after the hash, not beside it.

    The file is held open while hashed and loaded: its inode cannot be reused meanwhile,
    so the same inode under `path` after loading proves hnswlib read the verified bytes
    (a save by another process replaces the file with a new inode).
    """
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError as error:
        raise IndexUnusable(Unusable.MISSING, "missing", path) from error
    except OSError as error:
        raise IndexUnusable(Unusable.CORRUPT, f"corrupt: unreadable ({error})", path) from error
    try:
        held = os.fstat(descriptor)
        if held.st_size != meta.size:
            raise IndexUnusable(
                Unusable.SIZE, f"corrupt: {held.st_size} bytes, saved with {meta.size}", path
            )
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="index-checksum") as hashing:
            checksum = hashing.submit(_checksum, descriptor)
            if while_hashing is not None:
                while_hashing()
            verified = checksum.result() == meta.checksum
        if not verified:
            raise IndexUnusable(Unusable.CHECKSUM, "corrupt: checksum mismatch", path)
        try:
            engine.load_index(str(path), max_elements=meta.max_elements)
        except (RuntimeError, MemoryError, OSError) as error:
            raise IndexUnusable(Unusable.CORRUPT, f"corrupt: {error}", path) from error
        try:
            current = os.stat(path)
        except OSError:
            current = None
        if current is None or (current.st_dev, current.st_ino) != (held.st_dev, held.st_ino):
            raise IndexUnusable(Unusable.STALE, "stale: replaced while it was read", path)
    finally:
        os.close(descriptor)


def check_header(path: Path, dim: int, meta: IndexMeta) -> None:
    """Compare hnswlib's header with the meta before hnswlib allocates anything from it."""
    try:
        with path.open("rb") as file:
            header = file.read(_HEADER.size)
    except OSError as error:
        raise IndexUnusable(Unusable.CORRUPT, f"corrupt: unreadable ({error})", path) from error
    if len(header) < _HEADER.size:
        raise IndexUnusable(
            Unusable.CORRUPT, f"corrupt: file of {len(header)} bytes has no full header", path
        )
    (
        level0_offset,
        max_elements,
        count,
        bytes_per_element,
        label_offset,
        data_offset,
        _max_level,
        _entry_point,
        _max_m,
        max_m0,
        m,
        _level_multiplier,
        ef_construction,
    ) = _HEADER.unpack(header)
    expected_data_offset = max_m0 * _LINK_COUNT_BYTES + _LINK_COUNT_BYTES
    expected_label_offset = expected_data_offset + dim * _FLOAT32_BYTES
    layout_ok = (
        level0_offset == 0
        and data_offset == expected_data_offset
        and label_offset == expected_label_offset
        and bytes_per_element == expected_label_offset + _LABEL_BYTES
    )
    if not layout_ok:
        raise IndexUnusable(
            Unusable.CORRUPT, f"corrupt: header does not describe {dim}-d vectors", path
        )
    built_as = (count, max_elements, m, ef_construction)
    described = (meta.count, meta.max_elements, meta.m, meta.ef_construction)
    if built_as != described:
        raise IndexUnusable(
            Unusable.STALE,
            "stale: file holds (count, capacity, M, ef_construction) = "
            f"{built_as}, meta describes {described}",
            path,
        )
