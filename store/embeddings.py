"""The observations' vectors and their admission to the index (`embedding`, `model_id`,
`index_version` and `admitted_seq` of the `observations` table).

A vector is stored as little-endian float32 bytes beside the model and index version that
made it: the index is rebuilt from these alone. A chunk is admitted once, by the journal
step that indexed it (`admitted_seq`); chunks of EFFICACY_TYPE are never embedded or
indexed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.observations import EFFICACY_TYPE
from dreamcycle.store.queries import TableQueries


def vector_to_blob(vector: npt.NDArray[np.float32]) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def blob_to_vector(blob: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def embedding_text(title: str, content: str) -> str:
    """What is embedded for a chunk: its title (if any) and its content."""
    return f"{title}\n{content}" if title else content


@dataclass(frozen=True)
class PendingChunk:
    rowid: int
    text: str
    embedding: npt.NDArray[np.float32] | None
    index_version: str | None
    pin_floor: float
    kind: str
    decay_from: str  # ISO time salience decay counts from
    origin_peer: str | None


_UNEMBEDDED: Final = (
    # Named: without statistics SQLite picks the index of live chunks, and reads every row.
    "SELECT id, title, content FROM observations INDEXED BY observations_unembedded "
    f"WHERE embedding IS NULL AND deleted_at IS NULL AND type != '{EFFICACY_TYPE}' "
    "ORDER BY id LIMIT ?"
)
_PENDING_COLUMNS: Final = (
    "SELECT id, title, content, embedding, index_version, pin_floor, kind, "
    "coalesce(last_decay_ts, created_at), origin_peer FROM observations "
)
# The few pending rows, from their own index: without statistics the planner would rather
# read every live chunk by observations_live, a cost that grows with the store.
_PENDING_OLDEST_FIRST: Final = (
    "INDEXED BY observations_pending "
    "WHERE admitted_seq IS NULL AND deleted_at IS NULL ORDER BY id LIMIT ?"
)
_MARK_ADMITTED: Final = "UPDATE observations SET admitted_seq = ? WHERE id = ?"
_SET_EMBEDDING: Final = (
    "UPDATE observations SET embedding = ?, model_id = ?, index_version = ? WHERE id = ?"
)
_ADMITTED_EMBEDDINGS: Final = (
    "SELECT id, embedding, coalesce(deleted_at, cold_at) FROM observations "
    "WHERE admitted_seq IS NOT NULL AND index_version = ? AND id > ? "
    f"AND type != '{EFFICACY_TYPE}' ORDER BY id"
)
_INDEXED_LABELS: Final = (
    "SELECT id FROM observations WHERE admitted_seq IS NOT NULL AND index_version = ? "
    f"AND type != '{EFFICACY_TYPE}' AND deleted_at IS NULL AND cold_at IS NULL "
    "ORDER BY id"
)
_INDEXED_COLD_LABELS: Final = (
    "SELECT id FROM observations WHERE admitted_seq IS NOT NULL AND index_version = ? "
    f"AND type != '{EFFICACY_TYPE}' AND deleted_at IS NULL AND cold_at IS NOT NULL "
    "ORDER BY id"
)
_INDEX_CONTENTS: Final = (
    "SELECT id, embedding, deleted_at IS NOT NULL, cold_at IS NOT NULL FROM observations "
    "WHERE admitted_seq IS NOT NULL AND index_version = ? "
    f"AND type != '{EFFICACY_TYPE}' ORDER BY id"
)
_INDEX_CONTENTS_HELD: Final = (
    "SELECT count(*) FROM observations WHERE admitted_seq IS NOT NULL AND index_version = ? "
    f"AND type != '{EFFICACY_TYPE}' AND deleted_at IS NULL"
)
_EMBEDDING_OF_HASH: Final = (
    "SELECT embedding, index_version FROM observations WHERE content_hash = ?"
)


class EmbeddingQueries(TableQueries):
    def unembedded(self, limit: int) -> list[tuple[int, str]]:
        """Live chunks without an embedding: (rowid, text to embed), oldest first."""
        rows = self._all(_UNEMBEDDED, (limit,))
        return [(int(r[0]), embedding_text(str(r[1]), str(r[2]))) for r in rows]

    def pending_admission(self, limit: int) -> list[PendingChunk]:
        """Live chunks the daemon has not indexed yet, oldest first, with any stored embedding."""
        return self._pending(_PENDING_OLDEST_FIRST, limit)

    def pending_admission_of(self, rowid: int) -> PendingChunk:
        return self._pending("WHERE id = ?", rowid)[0]

    def _pending(self, condition: str, arg: int) -> list[PendingChunk]:
        rows = self._all(_PENDING_COLUMNS + condition, (arg,))
        return [
            PendingChunk(
                rowid=int(r[0]),
                text=embedding_text(str(r[1]), str(r[2])),
                embedding=None if r[3] is None else blob_to_vector(bytes(r[3])),
                index_version=r[4],
                pin_floor=float(r[5]),
                kind=str(r[6]),
                decay_from=str(r[7]),
                origin_peer=r[8],
            )
            for r in rows
        ]

    def mark_admitted(self, rowid: int, journal_seq: int) -> None:
        self.conn.execute(_MARK_ADMITTED, (journal_seq, rowid))

    def set_embeddings(
        self,
        rowids: Sequence[int],
        vectors: npt.NDArray[np.float32],
        *,
        model_id: str,
        index_version: str,
    ) -> None:
        self.conn.executemany(
            _SET_EMBEDDING,
            [
                (vector_to_blob(vectors[i]), model_id, index_version, rowid)
                for i, rowid in enumerate(rowids)
            ],
        )

    def embeddings(
        self, index_version: str, dim: int, *, after_rowid: int = 0
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]:
        """(live labels, their vectors, tombstoned or cold labels) embedded under `index_version`."""
        live: list[int] = []
        blobs: list[bytes] = []
        dead: list[int] = []
        for rowid, blob, deleted in self._all(_ADMITTED_EMBEDDINGS, (index_version, after_rowid)):
            if deleted is None:
                live.append(int(rowid))
                blobs.append(bytes(blob))
            else:
                dead.append(int(rowid))
        vectors = (
            np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(blobs), -1)
            if blobs
            else np.zeros((0, dim), dtype=np.float32)
        )
        return np.array(live, dtype=np.int64), vectors, np.array(dead, dtype=np.int64)

    def index_contents(
        self, index_version: str, dim: int
    ) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.int64]
    ]:
        """What an index of `index_version` holds, for its rebuild: (labels of live and cold
        chunks, their vectors, those of them that are cold, tombstoned labels). The vectors
        are written into one matrix as they are read: at a million chunks a list of every
        blob beside it would double what a rebuild needs."""
        held = int(self._one(_INDEX_CONTENTS_HELD, (index_version,))[0])
        matrix = np.empty((held, dim), dtype=np.float32)
        labels: list[int] = []
        cold: list[int] = []
        tombstoned: list[int] = []
        for rowid, blob, deleted, is_cold in self.conn.execute(_INDEX_CONTENTS, (index_version,)):
            if deleted:
                tombstoned.append(int(rowid))
                continue
            if len(labels) == held:
                raise ValueError(f"more chunks of {index_version} than counted: one was added")
            matrix[len(labels)] = np.frombuffer(bytes(blob), dtype="<f4")
            labels.append(int(rowid))
            if is_cold:
                cold.append(int(rowid))
        return (
            np.array(labels, dtype=np.int64),
            matrix[: len(labels)],
            np.array(cold, dtype=np.int64),
            np.array(tombstoned, dtype=np.int64),
        )

    def indexed_cold_labels(self, index_version: str) -> npt.NDArray[np.int64]:
        """The labels of the cold chunks an index of `index_version` holds apart."""
        rows = self._all(_INDEXED_COLD_LABELS, (index_version,))
        return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))

    def indexed_labels(self, index_version: str) -> npt.NDArray[np.int64]:
        """The labels a live index of `index_version` holds: what `embeddings` lists live."""
        rows = self._all(_INDEXED_LABELS, (index_version,))
        return np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))

    def embedding_of_hash(
        self, digest: str, index_version: str | None = None
    ) -> npt.NDArray[np.float32] | None:
        """The chunk's stored vector; with `index_version`, only one of that vector space
        (after a change of model, the old model's is none to compare or seed with)."""
        row = self._one(_EMBEDDING_OF_HASH, (digest,))
        if row is None or row[0] is None:
            return None
        if index_version is not None and row[1] != index_version:
            return None
        return blob_to_vector(bytes(row[0]))

    def embeddings_of(
        self, rowids: Sequence[int], index_version: str | None = None
    ) -> dict[int, npt.NDArray[np.float32]]:
        """Stored vectors of the given chunks (those that have one; with `index_version`,
        one embedded in that vector space), in one query."""
        if not rowids:
            return {}
        rows = self._all_in(
            "SELECT id, embedding, index_version FROM observations WHERE id IN ({marks}) "
            "AND embedding IS NOT NULL",
            rowids,
        )
        return {
            int(r[0]): blob_to_vector(bytes(r[1]))
            for r in rows
            if index_version is None or r[2] == index_version
        }
