"""Learned retrieval keys as stored: per chunk, the queries it has answered.

The words of a chunk's keys are kept in `learned_fts`, a full-text index of their
own, so the lexical side of recall finds a chunk by the questions it answered as
well as by its own words.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import Database, blob_to_vector, tier_stamp, vector_to_blob

#: meta key counting changes to learned keys (recall caches the key matrix until it moves).
KEYS_EPOCH_META_KEY: Final = "keys_epoch"
#: A key's embedding is stored as little-endian float32.
_BYTES_PER_COMPONENT: Final = 4


@dataclass(frozen=True)
class StoredKey:
    chunk_id: int
    embedding: npt.NDArray[np.float32]
    text: str | None
    weight: float
    updated_ms: int


def keys_of(db: Database, chunk_id: int, dim: int | None = None) -> list[StoredKey]:
    """The chunk's keys; with `dim`, only those of that width (see `all_keys`)."""
    width = "" if dim is None else f" AND length(embedding) = {_BYTES_PER_COMPONENT * dim:d}"
    return [
        StoredKey(int(c), blob_to_vector(bytes(e)), t, float(w), int(u))
        for c, e, t, w, u in db.fetch_all(
            "SELECT chunk_id, embedding, text, weight, updated_ms FROM learned_keys "
            f"WHERE chunk_id = ?{width} ORDER BY id",
            (chunk_id,),
        )
    ]


def replace_keys(db: Database, chunk_id: int, keys: Sequence[StoredKey]) -> None:
    """Store `keys` as the chunk's keys (inside the caller's transaction)."""
    db.conn.execute("DELETE FROM learned_keys WHERE chunk_id = ?", (chunk_id,))
    db.conn.executemany(
        "INSERT INTO learned_keys (chunk_id, embedding, text, weight, updated_ms) "
        "VALUES (?, ?, ?, ?, ?)",
        [(chunk_id, vector_to_blob(k.embedding), k.text, k.weight, k.updated_ms) for k in keys],
    )
    db.next_counter(KEYS_EPOCH_META_KEY)
    db.conn.execute("DELETE FROM learned_fts WHERE rowid = ?", (chunk_id,))
    words = " ".join(k.text for k in keys if k.text)
    if words:
        db.conn.execute("INSERT INTO learned_fts (rowid, learned) VALUES (?, ?)", (chunk_id, words))


def all_keys(
    db: Database, dim: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.float64], list[int]]:
    """(chunk ids, key embeddings, weights, updated ms) of every key of `dim` components of
    a chunk not tombstoned.

    A key is a query embedded by the model of its time: after a change of model, keys
    of another width cannot be compared with a query (nor joined into one matrix), and
    are left out.
    """
    chunks: list[int] = []
    blobs: list[bytes] = []
    weights: list[float] = []
    updated: list[int] = []
    for chunk, blob, weight, at in db.fetch_all(
        "SELECT k.chunk_id, k.embedding, k.weight, k.updated_ms FROM learned_keys k "
        "JOIN observations o ON o.id = k.chunk_id WHERE o.deleted_at IS NULL "
        "AND length(k.embedding) = ? ORDER BY k.id",
        (_BYTES_PER_COMPONENT * dim,),
    ):
        chunks.append(int(chunk))
        blobs.append(bytes(blob))
        weights.append(float(weight))
        updated.append(int(at))
    matrix = (
        np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(blobs), -1)
        if blobs
        else np.zeros((0, 0), dtype=np.float32)
    )
    return np.array(chunks, dtype=np.int64), matrix, np.array(weights), updated


def key_count(db: Database) -> int:
    row = db.fetch_one("SELECT count(*) FROM learned_keys")
    return int(row[0])


def keys_stamp(db: Database, change_stamp: str) -> str:
    """Changes whenever any chunk's keys change or (with the tier part of the database's
    `change_stamp`) a chunk is tombstoned."""
    return f"{db.get_meta(KEYS_EPOCH_META_KEY) or '0'}-{tier_stamp(change_stamp)}"
