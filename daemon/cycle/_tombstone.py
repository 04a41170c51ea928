"""The one way a chunk is tombstoned (phases 4 and 7, and the API and CLIs through them)."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import Database
from dreamcycle.store.salience import SalienceCache


def hide_chunk(
    db: Database,
    salience: SalienceCache,
    digest: str,
    *,
    reason: str,
    origin_peer: str,
    now_ms: int,
    journal_seq: int,
    collectable_after_ms: int | None = None,
) -> int | None:
    """Tombstone a hash for good and hide its chunk from pulses. Returns the rowid hidden,
    which the caller marks deleted in the index once its transaction commits."""
    rowid = db.tombstone(
        digest,
        reason=reason,
        origin_peer=origin_peer,
        now_ms=now_ms,
        collectable_after_ms=collectable_after_ms,
        journal_seq=journal_seq,
    )
    if rowid is not None:
        salience.mark_tombstoned(rowid)
    return rowid


def tombstone_hashes(peer: Peer, digests: Iterable[str], *, reason: str, now_ms: int) -> list[int]:
    """Tombstone chunks locally for good (journalled, hidden from the index); returns those
    hidden."""
    db = peer.db
    hidden: list[int] = []
    with db.transaction():
        for digest in sorted(set(digests)):
            seq = db.journal(JournalKind.TOMBSTONE, digest, {"hash": digest}, now_ms=now_ms)
            rowid = hide_chunk(
                db,
                peer.salience,
                digest,
                reason=reason,
                origin_peer=peer.peer_id,
                now_ms=now_ms,
                journal_seq=seq,
            )
            if rowid is not None:
                hidden.append(rowid)
    if hidden:
        peer.index.mark_deleted(np.array(hidden, dtype=np.int64))
    return hidden
