"""The cold tier: chunks the sweep moved out of the live index, kept to come back.

A sweep is a scar, not a deletion: the row and its embedding stay, recall can
fall back to it, and a re-ingest of the same content or a Reward seeded at it
revives it. Explicit tombstones are a different thing (see Database.tombstone)
and are permanent. Cold rows become tombstones only by the retention rule
(`expire_cold`). Every move bumps the tier epoch, which is part of the index's
freshness stamp, so an index saved before a move is known to be stale.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import TIER_EPOCH_META_KEY, Database
from dreamcycle.store.timefmt import iso_from_ms


@dataclass(frozen=True)
class ColdChunk:
    rowid: int
    content_hash: str
    cold_at: str
    reason: str
    salience: float
    text: str


def _bump_epoch(db: Database) -> None:
    db.next_counter(TIER_EPOCH_META_KEY)


def epoch(db: Database) -> str:
    """The tier epoch: it moves whenever a chunk changes tier through this module."""
    return db.get_meta(TIER_EPOCH_META_KEY) or "0"


def kinds_and_hashes(db: Database, rowids: Sequence[int]) -> dict[int, tuple[str, str]]:
    """The kind and content hash of each chunk in `rowids`: what a move to the cold tier
    journals, without reading the chunks' text."""
    rows = db.fetch_all_in(
        "SELECT id, kind, content_hash FROM observations WHERE id IN ({marks})", rowids
    )
    return {int(rowid): (str(kind), str(content_hash)) for rowid, kind, content_hash in rows}


#: Which of some chunks are live, from the index of every chunk's state (migration 0021): with
#: thousands of ids the planner otherwise read each row, embedding and all, to test its tier.
_LIVE_AMONG: Final = (
    "SELECT id FROM observations INDEXED BY observations_salience_state "
    "WHERE id IN ({marks}) AND deleted_at IS NULL AND cold_at IS NULL"
)


def move_to_cold(db: Database, rowids: Sequence[int], *, reason: str, now_ms: int) -> list[int]:
    """Mark live chunks cold (inside the caller's transaction); returns those moved, in
    rowid order."""
    return move_each_to_cold(db, dict.fromkeys(rowids, reason), now_ms=now_ms)


def move_each_to_cold(db: Database, reasons: Mapping[int, str], *, now_ms: int) -> list[int]:
    """Mark live chunks cold, each for its reason (inside the caller's transaction), in
    rowid order; returns those moved. One statement for all: a sweep moves thousands."""
    moved = sorted(int(row[0]) for row in db.fetch_all_in(_LIVE_AMONG, sorted(reasons)))
    at = iso_from_ms(now_ms)
    db.conn.executemany(
        "UPDATE observations SET cold_at = ?, cold_reason = ? WHERE id = ?",
        [(at, reasons[rowid], rowid) for rowid in moved],
    )
    if moved:
        _bump_epoch(db)
    return moved


def revive(db: Database, rowid: int) -> bool:
    """Bring a cold chunk back to the live tier (inside the caller's transaction)."""
    row = db.fetch_one(
        "UPDATE observations SET cold_at = NULL, cold_reason = NULL "
        "WHERE id = ? AND deleted_at IS NULL AND cold_at IS NOT NULL RETURNING id",
        (rowid,),
    )
    if row is None:
        return False
    _bump_epoch(db)
    return True


def reingested_cold(db: Database) -> list[int]:
    """Cold chunks whose content was ingested again after they went cold (an index holds
    just those: migration 0014)."""
    return [
        int(r[0])
        for r in db.fetch_all(
            "SELECT id FROM observations INDEXED BY observations_cold_reingested "
            "WHERE cold_at IS NOT NULL AND deleted_at IS NULL AND last_seen_at > cold_at "
            "ORDER BY id"
        )
    ]


#: Through migration 0022's index of revivals: the journal holds a step per chunk ever
#: ingested or swept, and this is read at every sweep.
_REVIVED_SINCE: Final = (
    "SELECT DISTINCT o.id FROM journal j INDEXED BY journal_revivals "
    "JOIN observations o ON o.content_hash = j.ref WHERE j.kind = 'revive' AND j.at_ms >= ?"
)


def revived_since(db: Database, since_ms: int) -> set[int]:
    """Chunks brought back from the cold tier at or after `since_ms` (from the journal)."""
    return {int(r[0]) for r in db.fetch_all(_REVIVED_SINCE, (since_ms,))}


def cold_rowid_of_hash(db: Database, digest: str) -> int | None:
    row = db.fetch_one(
        "SELECT id FROM observations WHERE content_hash = ? AND cold_at IS NOT NULL "
        "AND deleted_at IS NULL",
        (digest,),
    )
    return None if row is None else int(row[0])


def cold_chunks(db: Database, *, limit: int, offset: int = 0) -> list[ColdChunk]:
    """What the sweep moved to the cold tier, most recent first."""
    rows = db.fetch_all(
        "SELECT id, content_hash, cold_at, coalesce(cold_reason, ''), salience, "
        "CASE WHEN title != '' THEN title ELSE content END FROM observations "
        "WHERE cold_at IS NOT NULL AND deleted_at IS NULL ORDER BY cold_at DESC, id "
        "LIMIT ? OFFSET ?",
        (limit, offset),
    )
    return [
        ColdChunk(int(a), str(b), str(c), str(d), float(e), str(f)) for a, b, c, d, e, f in rows
    ]


def cold_vectors(
    db: Database, index_version: str, dim: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
    """Labels and embeddings of every cold chunk (recall's fallback searches them exactly)."""
    labels: list[int] = []
    blobs: list[bytes] = []
    for rowid, blob in db.fetch_all(
        "SELECT id, embedding FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL "
        "AND embedding IS NOT NULL AND index_version = ? ORDER BY id",
        (index_version,),
    ):
        labels.append(int(rowid))
        blobs.append(bytes(blob))
    if not blobs:
        return np.zeros(0, dtype=np.int64), np.zeros((0, dim), dtype=np.float32)
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(blobs), -1)
    return np.array(labels, dtype=np.int64), matrix


def expired_cold(db: Database, *, older_than_ms: int) -> list[str]:
    """Hashes of chunks cold since before `older_than_ms`: retention turns them into tombstones."""
    return [
        str(r[0])
        for r in db.fetch_all(
            "SELECT content_hash FROM observations WHERE cold_at IS NOT NULL "
            "AND deleted_at IS NULL AND cold_at < ? ORDER BY id",
            (iso_from_ms(older_than_ms),),
        )
    ]


def request_revival(db: Database, rowid: int, *, now_ms: int) -> None:
    """Mark a cold chunk as seen again; the daemon revives it at its next cycle.

    The same signal as a re-ingest of its content, so a CLI never touches the
    daemon's index.
    """
    db.conn.execute(
        "UPDATE observations SET last_seen_at = ? WHERE id = ?", (iso_from_ms(now_ms), rowid)
    )
