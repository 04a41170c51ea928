"""What recall reads of its candidates, shaped so that most of it comes from memory.

Ranking needs three things of each candidate: whether it is tombstoned or cold, its
stored embedding, and (only when a bound lets them move a score) its salience and
confidence. The tiers change only with the database's change stamp, so their members
are read once per stamp (`tier_sets`); an admitted chunk's embedding never changes
(admission stores it, and nothing embeds an admitted chunk again), so `StoredVectors`
keeps each one once read. What changes with every cycle (salience, confidence,
stability) is read for the hits alone, with their text (`hit_rows`), or for every
candidate when ranking needs it (`candidate_numbers`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Protocol

import apsw
import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import Database
from dreamcycle.store.observations import COLD_ROWS

#: Rows per query when stored embeddings are read into memory.
LOAD_BATCH: Final = 5_000
#: Rowids from this one on are not held (SQLite assigns them one after another, so a
#: store reaches it only with tens of millions of chunks): the array of slots, 4 bytes per
#: rowid up to the largest held, stays within 256 MiB. Those chunks are read on each use.
MAX_HELD_ROWID: Final = 1 << 26


@dataclass(frozen=True)
class TierSets:
    """The chunks ranking must drop (tombstoned) or mark (cold), at one change stamp."""

    tombstoned: frozenset[int]
    cold: frozenset[int]

    def cold_among(self, labels: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of `labels` are cold, for a candidate list in one array operation."""
        cold = self._cold_sorted
        if len(cold) == 0 or len(labels) == 0:
            return np.zeros(len(labels), dtype=np.bool_)
        at = np.minimum(np.searchsorted(cold, labels), len(cold) - 1)
        found: npt.NDArray[np.bool_] = cold[at] == labels
        return found

    @functools.cached_property
    def _cold_sorted(self) -> npt.NDArray[np.int64]:
        return np.array(sorted(self.cold), dtype=np.int64)


def tier_sets(db: Database) -> TierSets:
    """Tombstoned and cold chunks, each read from an index alone (no row is visited)."""
    tombstoned = db.fetch_packed("id", "FROM observations WHERE deleted_at IS NOT NULL")
    cold = db.fetch_packed("id", COLD_ROWS)
    return TierSets(tombstoned=frozenset(tombstoned), cold=frozenset(cold))


def in_write_transaction(db: Database) -> bool:
    """Whether `db` has uncommitted changes pending: what is read then may be rolled back,
    while the change stamp it was read at may come again, so it must not be cached."""
    return bool(db.conn.txn_state("main") == apsw.SQLITE_TXN_WRITE)


@dataclass(frozen=True)
class HitRow:
    content_hash: str
    title: str
    content: str
    salience: float
    confidence: float
    stability: float


def hit_rows(db: Database, rowids: Sequence[int]) -> dict[int, HitRow]:
    """What a hit shows of each chunk, in one query."""
    if not rowids:
        return {}
    marks = ",".join("?" * len(rowids))
    return {
        int(r[0]): HitRow(str(r[1]), str(r[2]), str(r[3]), float(r[4]), float(r[5]), float(r[6]))
        for r in db.fetch_packed(
            "json_array(id, content_hash, title, content, salience, confidence, stability)",
            f"FROM observations WHERE id IN ({marks})",
            tuple(rowids),
        )
    }


def candidate_numbers(
    db: Database, rowids: Sequence[int]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(saliences, confidences, content lengths) of `rowids`, in their order (every one
    must exist)."""
    marks = ",".join("?" * len(rowids))
    found = {
        int(r[0]): (float(r[1]), float(r[2]), float(r[3]))
        for r in db.fetch_packed(
            "json_array(id, salience, confidence, length(content))",
            f"FROM observations WHERE id IN ({marks})",
            tuple(rowids),
        )
    }
    numbers = np.array([found[rowid] for rowid in rowids], dtype=np.float64)
    numbers = numbers.reshape(len(rowids), 3)
    return numbers[:, 0], numbers[:, 1], numbers[:, 2]


# Newest first by rowid alone. The unary + keeps SQLite off the indexes of those columns:
# through one, each batch read and sorted every live row, a cost that grows with the store.
_HELD_ROWS: Final = (
    "SELECT id, embedding FROM observations WHERE id < ? "
    "AND admitted_seq IS NOT NULL AND embedding IS NOT NULL "
    "AND index_version = ? AND +deleted_at IS NULL AND +cold_at IS {} "
    "ORDER BY id DESC LIMIT ?"
)
HELD_LIVE_FIRST: Final = _HELD_ROWS.format("NULL")
HELD_COLD_NEXT: Final = _HELD_ROWS.format("NOT NULL")


class LiveVectors(Protocol):
    """Where vectors not held may come from: the live index (store/index_graph.py)."""

    @property
    def index_version(self) -> str: ...

    def live_vectors(
        self, labels: npt.NDArray[np.int64]
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]: ...


class StoredVectors:
    """Stored embeddings of admitted chunks, each read from the database once, as rows of
    one matrix, up to `held_bytes` of them (None: every one).

    Only embeddings of one vector space (an index version: model and dimension) are
    held or returned: one of another model cannot be compared with a query, and after a
    change of model the database holds both kinds. Chunks still pending admission may be
    embedded again, so theirs are returned but not kept. Once the matrix is full, chunks
    not held are read on each use: at a million chunks a copy of every embedding beside
    the index's would double the memory a peer needs (scripts/bench_scale.py). Safe to
    share between threads: rows are only added, under a lock, each written before its
    slot is published, and a grown matrix is a copy published whole, so a reader that
    found a slot finds its row.
    """

    def __init__(self, held_bytes: int | None = None) -> None:
        if held_bytes is not None and held_bytes < 0:
            raise ValueError(f"held_bytes must be >= 0, got {held_bytes}")
        self._held_bytes = held_bytes
        # Row of `_matrix` per rowid, -1 for none: looked up for a whole candidate list in
        # one array operation rather than a dict lookup each.
        self._slot_of: npt.NDArray[np.int32] = np.full(0, -1, dtype=np.int32)
        self._held = 0
        self._matrix: npt.NDArray[np.float32] = np.zeros((0, 0), dtype=np.float32)
        self._adding = threading.Lock()
        #: The vector space of every row held, set by the first call.
        self._version: str | None = None
        #: Set once `load_all` has read all it may hold.
        self.loaded = threading.Event()

    def __len__(self) -> int:
        return self._held

    def unheld(self, rowids: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_] | None:
        """Which of `rowids` are not held, once no more may be; None while there is room
        (a row not held is then read and held on its first use)."""
        if not self._full():
            return None
        unheld: npt.NDArray[np.bool_] = self._positions(rowids) < 0
        return unheld

    def _full(self) -> bool:
        """Whether no more rows may be held."""
        if self._held_bytes is None:
            return False
        dim = int(self._matrix.shape[1])
        return self._held_bytes == 0 or (dim > 0 and self._room(dim) == 0)

    def _room(self, dim: int) -> int:
        """How many more rows of `dim` floats may be held."""
        if self._held_bytes is None:
            return MAX_HELD_ROWID
        return max(0, self._held_bytes // (dim * 4) - self._held)

    def load_all(self, db: Database, index_version: str) -> int:
        """Read admitted chunks' embeddings of `index_version` (not tombstoned ones: never
        ranked), in batches, until full: live chunks before cold ones, the newest first
        (what recall meets most). How many are held afterwards."""
        self._bind_to(index_version)
        for tier in (HELD_LIVE_FIRST, HELD_COLD_NEXT):
            if not self._load_tier(db, index_version, tier):
                break
        self.loaded.set()
        return self._held

    def _load_tier(self, db: Database, index_version: str, tier: str) -> bool:
        """Read the embeddings of chunks `tier` selects; whether room is left."""
        before = MAX_HELD_ROWID
        while True:
            found = db.fetch_all(tier, (before, index_version, LOAD_BATCH))
            if not found:
                return True
            if not self._keep([int(r[0]) for r in found], _matrix([bytes(r[1]) for r in found])):
                return False
            before = int(found[-1][0])

    def gather(
        self,
        db: Database,
        rowids: Sequence[int] | npt.NDArray[np.int64],
        index_version: str,
        *,
        index: LiveVectors | None = None,
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        """(the stored embeddings of `index_version` of those of `rowids` that have one, in
        their order; which of `rowids` have one).

        Those not held are read from the database and held while there is room. Once
        there is none, they are read from `index` where it holds them live (the same unit
        vectors, each rounded once by the index's normalization: within 1e-7 of the
        database's), the rest from the database.
        """
        self._bind_to(index_version)
        # The slots before the matrix: a slot is published only after its row is written.
        positions = self._positions(rowids)
        matrix = self._matrix
        held = positions >= 0
        if held.all():
            return matrix[positions], held
        if index is not None and index.index_version == index_version and self._full():
            return self._gather_through(db, rowids, index_version, index, positions, matrix)
        return self._gather_unheld(db, rowids, index_version, positions, matrix)

    def _gather_through(
        self,
        db: Database,
        rowids: Sequence[int] | npt.NDArray[np.int64],
        index_version: str,
        index: LiveVectors,
        positions: npt.NDArray[np.int32],
        matrix: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        ids = np.asarray(rowids, dtype=np.int64)
        held = positions >= 0
        unheld_at = np.flatnonzero(~held)
        from_index, in_index = index.live_vectors(ids[unheld_at])
        rest = unheld_at[~in_index]
        no_slots = np.full(len(rest), -1, dtype=np.int32)
        read, found = self._gather_unheld(db, ids[rest], index_version, no_slots, matrix)
        present = held.copy()
        present[unheld_at[in_index]] = True
        present[rest[found]] = True
        widths = [part.shape[1] for part in (matrix, from_index, read) if part.ndim == 2]
        if not present.any() or not max(widths, default=0):
            return np.zeros((0, 0), dtype=np.float32), present
        rows = np.empty((len(ids), max(widths)), dtype=np.float32)
        if held.any():
            rows[held] = matrix[positions[held]]
        if len(from_index):
            rows[unheld_at[in_index]] = from_index
        if len(read):
            rows[rest[found]] = read
        return rows[present], present

    def _gather_unheld(
        self,
        db: Database,
        rowids: Sequence[int] | npt.NDArray[np.int64],
        index_version: str,
        positions: npt.NDArray[np.int32],
        matrix: npt.NDArray[np.float32],
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_]]:
        held = positions >= 0
        ids = np.asarray(rowids, dtype=np.int64)
        # Python ints for SQLite, which binds no numpy integer.
        missing: list[int] = ids[~held].tolist()
        read: list[Any] = []
        # In parts: SQLite takes at most 32,766 parameters, and a filter's matches are
        # gathered here (store/filtered_search.py).
        for start in range(0, len(missing), LOAD_BATCH):
            part = missing[start : start + LOAD_BATCH]
            found = db.fetch_all(
                f"SELECT id, embedding, admitted_seq IS NOT NULL, index_version "
                f"FROM observations WHERE id IN ({','.join('?' * len(part))}) "
                "AND embedding IS NOT NULL",
                tuple(part),
            )
            # Compared here, so that a part names no more parameters than rowids.
            read += [row for row in found if row[3] == index_version]
        fresh = _matrix([bytes(r[1]) for r in read])
        row_of = {int(r[0]): i for i, r in enumerate(read)}
        admitted = [i for i, r in enumerate(read) if r[2]]
        if admitted:
            self._keep([int(read[i][0]) for i in admitted], fresh[admitted])
        # Array operations over every rowid, a loop over the missing ones alone: a filter's
        # thousands of matches often include a few chunks saved since the last cycle.
        fresh_at = np.array([row_of.get(rowid, -1) for rowid in missing], dtype=np.int64)
        present = held.copy()
        present[~held] = fresh_at >= 0
        if not present.any():
            return np.zeros((0, 0), dtype=np.float32), present
        dim = matrix.shape[1] if held.any() else fresh.shape[1]
        rows = np.empty((int(present.sum()), dim), dtype=np.float32)
        from_matrix = held[present]
        if from_matrix.any():
            rows[from_matrix] = matrix[positions[held]]
        if not from_matrix.all():
            rows[~from_matrix] = fresh[fresh_at[fresh_at >= 0]]
        return rows, present

    def _bind_to(self, index_version: str) -> None:
        if self._version == index_version:
            return
        with self._adding:
            if self._version is None:
                self._version = index_version
            elif self._version != index_version:
                raise ValueError(
                    f"these stored embeddings are of {self._version!r}, not {index_version!r}"
                )

    def _positions(self, rowids: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int32]:
        """Each rowid's row in the matrix, -1 where none is held."""
        slot_of = self._slot_of
        ids = np.asarray(rowids, dtype=np.int64)
        known = (ids >= 0) & (ids < len(slot_of))
        if known.all():
            return slot_of[ids]
        positions = np.full(len(ids), -1, dtype=np.int32)
        positions[known] = slot_of[ids[known]]
        return positions

    def _keep(self, rowids: list[int], vectors: npt.NDArray[np.float32]) -> bool:
        """Hold the rows of `rowids` not held yet, as many as there is room for; whether
        room is left."""
        with self._adding:
            positions = self._positions(rowids)
            new = [
                i
                for i, at in enumerate(positions.tolist())
                if at < 0 and 0 <= rowids[i] < MAX_HELD_ROWID
            ]
            room = self._room(vectors.shape[1])
            new = new[:room]
            if not new:
                return room > 0
            start = self._held
            needed = start + len(new)
            matrix = self._matrix
            if needed > len(matrix):
                grown = _grown(len(matrix), needed, start + room, vectors.shape[1])
                if start:
                    grown[:start] = matrix[:start]
                self._matrix = matrix = grown
            matrix[start:needed] = vectors[new]
            new_ids = np.array([rowids[i] for i in new], dtype=np.int64)
            slot_of = self._slot_of
            highest = int(new_ids.max())
            if highest >= len(slot_of):
                # Grown as a copy published whole, with the new slots already in it.
                grown_slots = np.full(max(highest + 1, 2 * len(slot_of)), -1, dtype=np.int32)
                grown_slots[: len(slot_of)] = slot_of
                grown_slots[new_ids] = np.arange(start, needed, dtype=np.int32)
                self._slot_of = grown_slots
            else:
                slot_of[new_ids] = np.arange(start, needed, dtype=np.int32)
            self._held = needed
            return room > len(new)


def _grown(rows: int, needed: int, most: int, dim: int) -> npt.NDArray[np.float32]:
    """A zeroed matrix for at least `needed` rows: room for `most` at once where the system
    grants it (it gives a zeroed page only when a row is written to it), so that no copy of
    the old rows is later held beside a new matrix; else twice `rows`."""
    if most < MAX_HELD_ROWID:  # a bound was set (unbounded, the room is MAX_HELD_ROWID)
        try:
            return np.zeros((most, dim), np.float32)
        except MemoryError:
            pass  # more than the system will promise at once: grown as it fills
    return np.zeros((max(needed, min(2 * rows, most)), dim), np.float32)


def _matrix(blobs: list[bytes]) -> npt.NDArray[np.float32]:
    """Embeddings as rows of one matrix, in one copy."""
    if not blobs:
        return np.zeros((0, 0), dtype=np.float32)
    matrix: npt.NDArray[np.float32] = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(
        len(blobs), -1
    )
    return matrix
