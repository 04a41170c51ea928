"""A persisted hnswlib cosine index over chunk embeddings, labelled by observation rowid.

The index is derived state: the database holds every embedding, so a missing,
corrupt, stale or foreign index file is rebuilt from it (`open_or_rebuild`).

The saved files and their seal are `index_file`'s; this module is the live index.
It stays one module because every method of `HnswIndex` runs under the one lock that
guards the one hnswlib engine, and `open_or_rebuild` decides between loading that
engine's file and rebuilding it, from the same labels.

Determinism: elements are added on one thread and hnswlib's level generator has a
fixed seed, so the same sequence of operations (adds, saves and loads at the same
points) yields the same graph and the same neighbours on every peer.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from contextlib import suppress
from dataclasses import asdict
from pathlib import Path
from typing import Any, Final

import hnswlib
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.vectors import Vectors
from dreamcycle.store.index_file import (
    IDENTITY_BYTES,
    META_FORMAT,
    IndexMeta,
    IndexSaveFailed,
    IndexUnusable,
    Unusable,
    VectorIndexError,
    check_header,
    file_checksum,
    load_verified,
    meta_path,
    read_meta,
    replace_durably,
    save_failed,
    temporary_path,
    write_engine,
)
from dreamcycle.store.readers_writer_lock import ReadersWriterLock

__all__ = [
    "DEFAULT_EF",
    "DEFAULT_EF_CONSTRUCTION",
    "DEFAULT_M",
    "GROWTH_FACTOR",
    "INITIAL_CAPACITY",
    "META_FORMAT",
    "REBUILD_CHUNK_SIZE",
    "HnswIndex",
    "IndexQueryFailed",
    "IndexSaveFailed",
    "IndexUnusable",
    "InvalidIndexInput",
    "LabelNotLive",
    "Unusable",
    "VectorIndexError",
    "meta_path",
    "open_or_rebuild",
]

#: Links per element of the graph (hnswlib's M): more raise recall and memory alike; the
#: benchmarks (scripts/bench_propagate.py, scripts/bench_recall.py) measure the index at 16.
DEFAULT_M: Final = 16
#: Search breadth while inserting: wider builds a better graph, more slowly.
DEFAULT_EF_CONSTRUCTION: Final = 100
#: Search breadth for queries; raised to k whenever k is larger.
DEFAULT_EF: Final = 64
INITIAL_CAPACITY: Final = 1024
#: Capacity is multiplied by this until the new elements fit.
GROWTH_FACTOR: Final = 2
#: Elements added per step of a rebuild, between progress reports.
REBUILD_CHUNK_SIZE: Final = 10_000
_SPACE: Final = "cosine"
#: hnswlib's default, fixed here because replay must reproduce the same graph.
_LEVEL_SEED: Final = 100
#: Adding on one thread keeps the insertion order, hence the graph, reproducible.
_ADD_THREADS: Final = 1
#: Let hnswlib spread a batch of queries over all cores (results do not depend on it).
_QUERY_THREADS: Final = -1
#: Labels (rowids) from this one on are checked one by one rather than through the
#: index's array of live flags, which so stays within 64 MiB.
MAX_MASKED_LABEL: Final = 1 << 26
#: How many tombstoned labels an error message lists before eliding the rest.
_LABELS_SHOWN_IN_ERRORS: Final = 5
#: Range of cosine distance (1 - cosine similarity).
_MIN_DISTANCE: Final = np.float32(0.0)
_MAX_DISTANCE: Final = np.float32(2.0)

Labels = npt.NDArray[np.int64]
Distances = npt.NDArray[np.float32]
ProgressCallback = Callable[[int, int], None]
LoadAll = Callable[[], tuple[Labels, Vectors, Labels]]


class InvalidIndexInput(VectorIndexError, ValueError):
    """Labels, vectors or settings handed to the index are malformed."""


class LabelNotLive(VectorIndexError, LookupError):
    """A label asked for is absent from the index or tombstoned."""


class IndexQueryFailed(VectorIndexError):
    """hnswlib could not answer a k-NN query even with an exhaustive search breadth."""


class LabelMask:
    """One flag per label below MAX_MASKED_LABEL, for checking many labels in one array
    operation. Not thread-safe on its own: HnswIndex reads and marks it under its lock."""

    def __init__(self, labels: Iterable[int]) -> None:
        self._flags: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        self.mark(np.fromiter(labels, dtype=np.int64), live=True)

    def mark(self, labels: Labels | list[int], *, live: bool) -> None:
        ids = np.asarray(labels, dtype=np.int64)
        ids = ids[(ids >= 0) & (ids < MAX_MASKED_LABEL)]
        if len(ids) == 0:
            return
        needed = int(ids.max()) + 1
        if needed > len(self._flags):
            grown = np.zeros(max(needed, 2 * len(self._flags)), dtype=np.bool_)
            grown[: len(self._flags)] = self._flags
            self._flags = grown
        self._flags[ids] = live

    def among(self, labels: Labels, beyond: AbstractSet[int]) -> npt.NDArray[np.bool_]:
        """Which of `labels` are marked; those outside the flags are looked up in
        `beyond` (the whole set of marked labels)."""
        flags = self._flags
        inside = (labels >= 0) & (labels < len(flags))
        if inside.all():
            return flags[labels]
        marked = np.zeros(len(labels), dtype=np.bool_)
        marked[inside] = flags[labels[inside]]
        outside = np.flatnonzero(~inside)
        marked[outside] = [int(label) in beyond for label in labels[outside].tolist()]
        return marked


def _preview(labels: Iterable[int]) -> str:
    ordered = sorted(labels)
    shown = ", ".join(str(label) for label in ordered[:_LABELS_SHOWN_IN_ERRORS])
    more = len(ordered) - _LABELS_SHOWN_IN_ERRORS
    return f"{shown} (+{more} more)" if more > 0 else shown


def _check_positive(name: str, value: int, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidIndexInput(f"{name} must be an integer >= {minimum}, got {value!r}")


def _as_labels(labels: Any, what: str) -> Labels:
    array = np.asarray(labels)
    if array.ndim != 1:
        raise InvalidIndexInput(f"{what} must be one-dimensional, got shape {array.shape}")
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if not np.issubdtype(array.dtype, np.integer):
        raise InvalidIndexInput(f"{what} must be integers, got dtype {array.dtype}")
    if int(array.min()) < 0:
        raise InvalidIndexInput(f"{what} must be >= 0, got {int(array.min())}")
    return array.astype(np.int64, copy=False)


def _as_vectors(vectors: Any, dim: int, what: str) -> Vectors:
    array = np.asarray(vectors)
    if array.ndim != 2 or array.shape[1] != dim:
        raise InvalidIndexInput(f"{what} must have shape (n, {dim}), got {array.shape}")
    if not np.issubdtype(array.dtype, np.floating):
        raise InvalidIndexInput(f"{what} must be floating point, got dtype {array.dtype}")
    if not np.isfinite(array).all():
        raise InvalidIndexInput(f"{what} contain NaN or infinite values")
    return np.ascontiguousarray(array, dtype=np.float32)


class HnswIndex:
    """Cosine k-NN over live chunks; deleted labels (tombstoned or cold) are never returned,
    and come back only through `restore` (a cold chunk revived).

    Safe to share between threads: queries (and saves, which only read the graph) run
    side by side; add, mark_deleted, restore and resize each run alone.
    """

    def __init__(
        self,
        path: Path,
        dim: int,
        index_version: str,
        engine: Any,
        *,
        ef: int,
        live: set[int],
        deleted: set[int],
        stamp: str | None,
        identity: str | None = None,
    ) -> None:
        """Use `create`, `load` or `open_or_rebuild` instead."""
        self._path = path
        self._dim = dim
        self._index_version = index_version
        self._engine = engine
        self._ef = ef
        self._live = live
        self._live_mask = LabelMask(live)
        self._deleted = deleted
        self._stamp = stamp
        self._identity = identity
        self._lock = ReadersWriterLock()
        #: Changes since the file was last written or read (see `is_saved_at`).
        self._unsaved_changes = 0

    @classmethod
    def create(
        cls,
        path: Path,
        dim: int,
        index_version: str,
        *,
        m: int = DEFAULT_M,
        ef_construction: int = DEFAULT_EF_CONSTRUCTION,
        ef: int = DEFAULT_EF,
        capacity: int = INITIAL_CAPACITY,
    ) -> HnswIndex:
        """An empty index, kept in memory until `save`."""
        _check_positive("dim", dim)
        _check_positive("m", m, minimum=2)
        _check_positive("ef_construction", ef_construction)
        _check_positive("ef", ef)
        _check_positive("capacity", capacity)
        if not index_version:
            raise InvalidIndexInput("index_version is empty")
        engine = hnswlib.Index(space=_SPACE, dim=dim)
        engine.init_index(
            max_elements=capacity,
            ef_construction=ef_construction,
            M=m,
            random_seed=_LEVEL_SEED,
        )
        engine.set_ef(ef)
        return cls(
            Path(path), dim, index_version, engine, ef=ef, live=set(), deleted=set(), stamp=None
        )

    @classmethod
    def load(
        cls,
        path: Path,
        dim: int,
        index_version: str,
        *,
        ef: int = DEFAULT_EF,
        expected_stamp: str | None = None,
        expected_identity: str | None = None,
        live_labels: Callable[[], Labels] | None = None,
    ) -> HnswIndex:
        """The index saved at `path`; IndexUnusable says why it cannot be used.

        Given, `expected_stamp` (the database's stamp now) and `expected_identity` (the
        identity the database recorded for its last save; "" when it recorded none) must
        match the save's, and `live_labels` (the database's live chunks) the live labels
        loaded. All but the last are checked before the file is read.
        """
        _check_positive("dim", dim)
        _check_positive("ef", ef)
        path = Path(path)
        meta = read_meta(path)
        if meta.dim != dim:
            raise IndexUnusable(Unusable.MODEL, f"dim {meta.dim} != {dim}", path)
        if meta.index_version != index_version:
            raise IndexUnusable(
                Unusable.MODEL, f"index_version {meta.index_version} != {index_version}", path
            )
        if expected_identity is not None and meta.identity != expected_identity:
            raise IndexUnusable(
                Unusable.IDENTITY,
                f"identity {meta.identity} is not the database's "
                f"{expected_identity or '(none recorded)'}",
                path,
            )
        if expected_stamp is not None and meta.stamp != expected_stamp:
            raise IndexUnusable(
                Unusable.STALE,
                f"stale stamp: index has {meta.stamp!r}, database has {expected_stamp!r}",
                path,
            )
        check_header(path, dim, meta)
        engine = hnswlib.Index(space=_SPACE, dim=dim)
        load_verified(engine, path, meta)
        if engine.element_count != meta.count:
            raise IndexUnusable(
                Unusable.STALE,
                f"stale: file holds {engine.element_count} elements, meta says {meta.count}",
                path,
            )
        engine.set_ef(ef)
        deleted = set(meta.deleted)
        live = {int(label) for label in engine.get_ids_list()} - deleted
        if live_labels is not None:
            _check_labels(path, live, _as_labels(live_labels(), "live labels"))
        return cls(
            path,
            dim,
            index_version,
            engine,
            ef=ef,
            live=live,
            deleted=deleted,
            stamp=meta.stamp,
            identity=meta.identity,
        )

    @property
    def path(self) -> Path:
        return self._path

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def index_version(self) -> str:
        return self._index_version

    @property
    def readable_at_once(self) -> bool:
        """Whether a query would start now, with no add, deletion or resize running or
        waiting to (a hint: see ReadersWriterLock.free)."""
        return self._lock.free

    @property
    def stamp(self) -> str | None:
        """The database stamp this index was last saved or loaded with (None if never)."""
        with self._lock.reading():
            return self._stamp

    @property
    def identity(self) -> str | None:
        """The identity of the save this index was last saved as or loaded from (None if never)."""
        with self._lock.reading():
            return self._identity

    @property
    def capacity(self) -> int:
        with self._lock.reading():
            return int(self._engine.get_max_elements())

    @property
    def live_count(self) -> int:
        with self._lock.reading():
            return len(self._live)

    def labels(self) -> set[int]:
        """Every label the index knows, live or tombstoned."""
        with self._lock.reading():
            return self._live | self._deleted

    def deleted_labels(self) -> set[int]:
        with self._lock.reading():
            return set(self._deleted)

    def contains(self, label: int) -> bool:
        """Whether `label` is known, live or tombstoned."""
        with self._lock.reading():
            return label in self._live or label in self._deleted

    def live_among(self, labels: Labels) -> Labels:
        """Those of `labels` that are live, in their order (one array operation for
        thousands of labels, where probing the set of live labels takes a cache miss
        each)."""
        label_array = _as_labels(labels, "labels")
        with self._lock.reading():
            return label_array[self._live_mask.among(label_array, self._live)]

    def is_live(self, label: int) -> bool:
        with self._lock.reading():
            return label in self._live

    def add(self, labels: Labels, vectors: Vectors) -> None:
        """Insert new labelled vectors; known labels (live or tombstoned) are skipped."""
        label_array = _as_labels(labels, "labels")
        vector_array = _as_vectors(vectors, self._dim, "vectors")
        if len(label_array) != len(vector_array):
            raise InvalidIndexInput(f"{len(label_array)} labels for {len(vector_array)} vectors")
        unique, counts = np.unique(label_array, return_counts=True)
        if (counts > 1).any():
            repeated = unique[counts > 1].tolist()
            raise InvalidIndexInput(f"labels repeated within one add: {_preview(repeated)}")
        with self._lock.writing():
            fresh = [
                position
                for position, label in enumerate(label_array.tolist())
                if label not in self._live and label not in self._deleted
            ]
            if not fresh:
                return
            new_labels = label_array[fresh]
            self._ensure_capacity(int(self._engine.element_count) + len(fresh))
            self._engine.add_items(vector_array[fresh], new_labels, num_threads=_ADD_THREADS)
            self._live.update(new_labels.tolist())
            self._live_mask.mark(new_labels, live=True)
            self._unsaved_changes += 1

    def mark_deleted(self, labels: Labels) -> None:
        """Delete `labels` from the live index; unknown or already deleted labels are ignored."""
        label_array = _as_labels(labels, "labels")
        with self._lock.writing():
            removed: list[int] = []
            for label in sorted(set(label_array.tolist())):
                if label in self._live:
                    self._engine.mark_deleted(label)
                    self._live.discard(label)
                    self._deleted.add(label)
                    removed.append(label)
                    self._unsaved_changes += 1
            # One array operation for a sweep's thousands of labels.
            self._live_mask.mark(removed, live=False)

    def restore(self, labels: Labels, vectors: Vectors) -> None:
        """Make deleted labels live again (a chunk revived from the cold tier).

        Labels the engine holds are unmarked; labels it never held are added with
        their vector. Labels already live are left as they are.
        """
        label_array = _as_labels(labels, "labels")
        vector_array = _as_vectors(vectors, self._dim, "vectors")
        if len(label_array) != len(vector_array):
            raise InvalidIndexInput(f"{len(label_array)} labels for {len(vector_array)} vectors")
        with self._lock.writing():
            held = set(np.asarray(self._engine.get_ids_list(), dtype=np.int64).tolist())
            missing: list[int] = []
            revived: list[int] = []
            for position, label in enumerate(label_array.tolist()):
                if label in self._live:
                    continue
                if label in held:
                    self._engine.unmark_deleted(label)
                    self._deleted.discard(label)
                    self._live.add(label)
                    revived.append(label)
                    self._unsaved_changes += 1
                else:
                    self._deleted.discard(label)
                    missing.append(position)
            self._live_mask.mark(revived, live=True)
        if missing:
            self.add(label_array[missing], vector_array[missing])

    def knn_many(
        self, vectors: Vectors, k: int, *, allowed: AbstractSet[int] | None = None
    ) -> tuple[Labels, Distances]:
        """Nearest live neighbours of each row, as (labels, cosine distances), both (n, k').

        k' = min(k, live count), or with `allowed` min(k, live labels in it): only those
        are returned. Each row is ordered by (distance, label), so ties come out the same
        on every peer.
        """
        queries = _as_vectors(vectors, self._dim, "query vectors")
        _check_positive("k", k, minimum=0)
        with self._lock.reading():
            eligible = len(self._live) if allowed is None else len(self._live & allowed)
            width = min(k, eligible)
            if width == 0 or len(queries) == 0:
                return (
                    np.zeros((len(queries), width), dtype=np.int64),
                    np.zeros((len(queries), width), dtype=np.float32),
                )
            admit = None if allowed is None else allowed.__contains__
            try:
                # hnswlib searches max(ef, k) wide on its own: no shared setting changes here,
                # so queries run side by side.
                raw_labels, raw_distances = self._engine.knn_query(
                    queries, k=width, num_threads=_QUERY_THREADS, filter=admit
                )
                starved = False
            except RuntimeError:
                starved = True
        if starved:
            raw_labels, raw_distances = self._exhaustive_query(queries, width, admit)
        found_labels = np.asarray(raw_labels).astype(np.int64)
        # Rounding gives -2e-7 for a vector and itself; callers rely on d in [0, 2].
        found_distances = np.clip(
            np.asarray(raw_distances, dtype=np.float32), _MIN_DISTANCE, _MAX_DISTANCE
        )
        order = np.lexsort((found_labels, found_distances), axis=-1)
        return (
            np.take_along_axis(found_labels, order, axis=-1),
            np.take_along_axis(found_distances, order, axis=-1),
        )

    def vectors(self, labels: Labels) -> Vectors:
        """The stored (unit-length) vectors of live `labels`, shape (len(labels), dim)."""
        label_array = _as_labels(labels, "labels")
        with self._lock.reading():
            absent = [label for label in label_array.tolist() if label not in self._live]
            if absent:
                tombstoned = [label for label in absent if label in self._deleted]
                reason = "tombstoned" if len(tombstoned) == len(absent) else "not live"
                raise LabelNotLive(f"labels {reason} in {self._path}: {_preview(absent)}")
            if len(label_array) == 0:
                return np.zeros((0, self._dim), dtype=np.float32)
            found = self._engine.get_items(label_array, return_type="numpy")
        return np.ascontiguousarray(found, dtype=np.float32)

    def save(self, stamp: str) -> str:
        """Write the index, then its sealed meta, each atomically; `stamp` names the database
        state. Returns the identity of this save, for the database to record."""
        if not isinstance(stamp, str):
            raise InvalidIndexInput(f"stamp must be a str, got {type(stamp).__name__}")
        identity = secrets.token_hex(IDENTITY_BYTES)
        with self._lock.reading():
            index_temporary = temporary_path(self._path)
            try:
                self._path.parent.mkdir(parents=True, exist_ok=True)
                write_engine(self._engine, index_temporary)
                size = index_temporary.stat().st_size
                checksum = file_checksum(index_temporary)
            except OSError as error:
                _discard(index_temporary)
                raise save_failed(index_temporary, error) from error
            except IndexSaveFailed:
                _discard(index_temporary)
                raise
            _replace_or_discard(index_temporary, self._path)
            meta = IndexMeta(
                format=META_FORMAT,
                dim=self._dim,
                index_version=self._index_version,
                count=int(self._engine.element_count),
                stamp=stamp,
                m=int(self._engine.M),
                ef_construction=int(self._engine.ef_construction),
                max_elements=int(self._engine.get_max_elements()),
                deleted=sorted(self._deleted),
                size=size,
                checksum=checksum,
                identity=identity,
            )
            sidecar = meta_path(self._path)
            sidecar_temporary = temporary_path(sidecar)
            try:
                sidecar_temporary.write_text(
                    json.dumps(asdict(meta), sort_keys=True), encoding="utf-8"
                )
            except OSError as error:
                _discard(sidecar_temporary)
                raise save_failed(sidecar_temporary, error) from error
            _replace_or_discard(sidecar_temporary, sidecar)
            self._stamp = stamp
            self._identity = identity
            self._unsaved_changes = 0
        return identity

    def is_saved_at(self, stamp: str) -> bool:
        """Whether the file holds exactly this index for the database state `stamp`: saved
        or loaded with that stamp and not changed since (saving again would write the same
        graph under a new identity)."""
        with self._lock.reading():
            return self._identity is not None and self._stamp == stamp and not self._unsaved_changes

    def _ensure_capacity(self, needed: int) -> None:
        capacity = int(self._engine.get_max_elements())
        if needed <= capacity:
            return
        while capacity < needed:
            capacity *= GROWTH_FACTOR
        self._engine.resize_index(capacity)

    def _exhaustive_query(
        self, queries: Vectors, width: int, admit: Callable[[int], bool] | None
    ) -> tuple[Any, Any]:
        """Many tombstones (or a narrow filter) can starve a search: widen it to everything.

        The search breadth is shared by every query, so this runs alone.
        """
        with self._lock.writing():
            self._engine.set_ef(max(self._ef, width, int(self._engine.element_count)))
            try:
                found: tuple[Any, Any] = self._engine.knn_query(
                    queries, k=width, num_threads=_QUERY_THREADS, filter=admit
                )
            except RuntimeError as error:
                raise IndexQueryFailed(
                    f"k-NN query for k={width} over {len(self._live)} live chunks "
                    f"in {self._path} failed: {error}"
                ) from error
            finally:
                self._engine.set_ef(self._ef)
        return found

    def _adopt_tombstones(self, labels: Labels) -> None:
        """Remember tombstones that were never added, so a later add cannot revive them."""
        with self._lock.writing():
            self._deleted.update(labels.tolist())
            self._unsaved_changes += 1


def _discard(temporary: Path) -> None:
    """Remove what a failed save wrote; a directory in its place is left for whoever put
    it there, and the save's own error says why it failed."""
    with suppress(OSError):
        if not temporary.is_dir():
            temporary.unlink(missing_ok=True)


def _replace_or_discard(temporary: Path, final: Path) -> None:
    try:
        replace_durably(temporary, final)
    except IndexSaveFailed:
        _discard(temporary)
        raise


def open_or_rebuild(
    path: Path,
    dim: int,
    index_version: str,
    *,
    expected_stamp: str,
    load_all: LoadAll,
    expected_identity: str | None = None,
    live_labels: Callable[[], Labels] | None = None,
    on_unusable: Callable[[IndexUnusable], None] | None = None,
    progress: ProgressCallback | None = None,
    m: int = DEFAULT_M,
    ef_construction: int = DEFAULT_EF_CONSTRUCTION,
    ef: int = DEFAULT_EF,
) -> tuple[HnswIndex, str | None]:
    """The saved index if it matches the database (reason None), else a fresh rebuild.

    `load_all` returns (live labels, their vectors, tombstoned labels) from the database;
    tombstoned labels are remembered but never inserted. The rebuild inserts in ascending
    label order, so every peer rebuilding the same state gets the same graph; `m` and
    `ef_construction` apply to rebuilds only. `expected_identity` and `live_labels` are
    checked as `HnswIndex.load` says; `on_unusable` hears why the saved index was not used
    before the rebuild starts. The rebuilt index is saved; the caller records its identity.
    """
    path = Path(path)
    try:
        index = HnswIndex.load(
            path,
            dim,
            index_version,
            ef=ef,
            expected_stamp=expected_stamp,
            expected_identity=expected_identity,
            live_labels=live_labels,
        )
    except IndexUnusable as unusable:
        if on_unusable is not None:
            on_unusable(unusable)
        reason = unusable.reason
    else:
        return index, None
    index = _rebuild(
        path,
        dim,
        index_version,
        load_all,
        progress,
        m=m,
        ef_construction=ef_construction,
        ef=ef,
    )
    index.save(expected_stamp)
    return index, reason


def _check_labels(path: Path, live: set[int], expected: Labels) -> None:
    wanted = set(expected.tolist())
    if live == wanted:
        return
    extra, lacking = live - wanted, wanted - live
    raise IndexUnusable(
        Unusable.LABELS,
        f"labels: {len(live)} live in the index, {len(wanted)} in the database "
        f"(not in the database: {_preview(extra) or 'none'}; "
        f"not in the index: {_preview(lacking) or 'none'})",
        path,
    )


def _rebuild(
    path: Path,
    dim: int,
    index_version: str,
    load_all: LoadAll,
    progress: ProgressCallback | None,
    *,
    m: int,
    ef_construction: int,
    ef: int,
) -> HnswIndex:
    raw_live, raw_vectors, raw_deleted = load_all()
    live_labels = _as_labels(raw_live, "live labels from the database")
    live_vectors = _as_vectors(raw_vectors, dim, "vectors from the database")
    deleted_labels = _as_labels(raw_deleted, "tombstoned labels from the database")
    total = len(live_labels)
    if total != len(live_vectors):
        raise InvalidIndexInput(
            f"database gave {total} live labels for {len(live_vectors)} vectors"
        )
    both = np.intersect1d(live_labels, deleted_labels)
    if len(both):
        raise InvalidIndexInput(
            f"database lists labels as both live and tombstoned: {_preview(both.tolist())}"
        )
    index = HnswIndex.create(
        path,
        dim,
        index_version,
        m=m,
        ef_construction=ef_construction,
        ef=ef,
        capacity=max(INITIAL_CAPACITY, total),
    )
    index._adopt_tombstones(deleted_labels)
    order = np.argsort(live_labels, kind="stable")
    for start in range(0, total, REBUILD_CHUNK_SIZE):
        chunk = order[start : start + REBUILD_CHUNK_SIZE]
        index.add(live_labels[chunk], live_vectors[chunk])
        if progress is not None:
            progress(start + len(chunk), total)
    return index
