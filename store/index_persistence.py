"""Saving the live index's hnswlib engine to its sealed files and loading it back, with
every check that decides whether a saved index is the one this database last saved.

The files' format, seal and verified read are `index_file`'s; `HnswIndex.save` and
`HnswIndex.load` come here with the engine and labels they hold.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

import hnswlib
import numpy as np

from dreamcycle.pulses.vectors import Labels
from dreamcycle.store.index_file import (
    IDENTITY_BYTES,
    META_FORMAT,
    IndexMeta,
    IndexSaveFailed,
    IndexUnusable,
    Unusable,
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
from dreamcycle.store.index_input import as_labels, preview

#: The files do not record the space, so every engine, built or loaded, is made here.
_SPACE: Final = "cosine"
#: hnswlib's default, fixed here because replay must reproduce the same graph.
_LEVEL_SEED: Final = 100


def new_engine(
    dim: int, *, capacity: int = 0, m: int = 0, ef_construction: int = 0, ef: int = 0
) -> Any:
    """An hnswlib engine over cosine distance: with a `capacity`, initialized empty with the
    graph's settings (ready to add to); without, for a file to be loaded into."""
    engine = hnswlib.Index(space=_SPACE, dim=dim)
    if capacity:
        engine.init_index(
            max_elements=capacity, ef_construction=ef_construction, M=m, random_seed=_LEVEL_SEED
        )
        engine.set_ef(ef)
    return engine


@dataclass(frozen=True)
class SavedIndex:
    """A saved index that passed every check: its engine, meta and labels."""

    engine: Any
    meta: IndexMeta
    live: set[int]
    #: Every label that is not live: cold or tombstoned.
    deleted: set[int]
    #: Those of `deleted` the engine holds unmarked (the cold tier).
    cold: frozenset[int]


def load_saved(
    path: Path,
    dim: int,
    index_version: str,
    *,
    expected_stamp: str | None,
    expected_identity: str | None,
    live_labels: Callable[[], Labels] | None,
) -> SavedIndex:
    """The index saved at `path`; IndexUnusable says why it cannot be used.

    Given, `expected_stamp` (the database's stamp now) and `expected_identity` (the
    identity the database recorded for its last save; "" when it recorded none) must
    match the save's, and `live_labels` (the database's live chunks) the live labels
    loaded. All but the last are checked before the file is read.
    """
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
    engine = new_engine(dim)
    expected: list[Labels] = []

    def read_live_labels() -> None:
        if live_labels is not None:
            expected.append(as_labels(live_labels(), "live labels"))

    load_verified(engine, path, meta, while_hashing=read_live_labels)
    if engine.element_count != meta.count:
        raise IndexUnusable(
            Unusable.STALE,
            f"stale: file holds {engine.element_count} elements, meta says {meta.count}",
            path,
        )
    deleted = set(meta.deleted)
    cold = frozenset(meta.cold)
    if not cold <= deleted:
        raise IndexUnusable(
            Unusable.CORRUPT,
            f"corrupt: meta lists cold labels that are live: {preview(cold - deleted)}",
            path,
        )
    held = set(engine.get_ids_list())
    live = held - deleted
    if not cold <= held:
        raise IndexUnusable(
            Unusable.CORRUPT,
            f"corrupt: meta lists cold labels the file does not hold: {preview(cold - held)}",
            path,
        )
    if expected:
        _check_labels(path, live, expected[0])
    return SavedIndex(engine=engine, meta=meta, live=live, deleted=deleted, cold=cold)


def _check_labels(path: Path, live: set[int], expected: Labels) -> None:
    """Whether the index's live labels are `expected`, compared as sorted arrays, far
    quicker than sets of Python ints at a large store (scripts/bench_scale.py measures
    start-up)."""
    held = np.fromiter(live, dtype=np.int64, count=len(live))
    if np.array_equal(np.sort(held), np.sort(expected)):
        return
    wanted = set(expected.tolist())
    extra, lacking = live - wanted, wanted - live
    raise IndexUnusable(
        Unusable.LABELS,
        f"labels: {len(live)} live in the index, {len(wanted)} in the database "
        f"(not in the database: {preview(extra) or 'none'}; "
        f"not in the index: {preview(lacking) or 'none'})",
        path,
    )


def save_engine(
    engine: Any,
    path: Path,
    *,
    dim: int,
    index_version: str,
    stamp: str,
    deleted: Iterable[int],
    cold: Iterable[int],
) -> str:
    """Write `engine` to `path`, then its sealed meta, each atomically; `stamp` names the
    database state. Returns the identity of this save. The caller keeps the engine from
    changing meanwhile."""
    identity = secrets.token_hex(IDENTITY_BYTES)
    index_temporary = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_engine(engine, index_temporary)
        size = index_temporary.stat().st_size
        checksum = file_checksum(index_temporary)
    except OSError as error:
        _discard(index_temporary)
        raise save_failed(index_temporary, error) from error
    except IndexSaveFailed:
        _discard(index_temporary)
        raise
    _replace_or_discard(index_temporary, path)
    meta = IndexMeta(
        format=META_FORMAT,
        dim=dim,
        index_version=index_version,
        count=int(engine.element_count),
        stamp=stamp,
        m=int(engine.M),
        ef_construction=int(engine.ef_construction),
        max_elements=int(engine.get_max_elements()),
        deleted=sorted(deleted),
        cold=sorted(cold),
        size=size,
        checksum=checksum,
        identity=identity,
    )
    sidecar = meta_path(path)
    sidecar_temporary = temporary_path(sidecar)
    try:
        # Field by field, not asdict: that deep-copies the list of deleted labels, one
        # per cold chunk, which at a large store's cold tier took most of a save.
        fields_of_meta = {field.name: getattr(meta, field.name) for field in fields(meta)}
        sidecar_temporary.write_text(json.dumps(fields_of_meta, sort_keys=True), encoding="utf-8")
    except OSError as error:
        _discard(sidecar_temporary)
        raise save_failed(sidecar_temporary, error) from error
    _replace_or_discard(sidecar_temporary, sidecar)
    return identity


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
