"""Checkpoints of the journal, and the retention they make possible.

The journal lists every applied salience step; `rebuild` replays it. A checkpoint is
the per-chunk state that replaying the journal up to one step produces (salience, pin
floor, kind, when its decay counts from, tier, and the order it joined the index),
read from the chunks themselves at a moment when the journal's head is that step.
Journal steps a checkpoint covers may then be deleted once they are older than the
retention: replay starts from the newest checkpoint at or below the oldest step left.
Journal steps are deleted only up to a checkpoint, so the journal never has a hole.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

from dreamcycle.store.database import EFFICACY_TYPE, Database
from dreamcycle.store.timefmt import ms_from_iso, ms_in_sql

#: meta key: the newest journal step deleted (every step up to it is gone).
PRUNED_SEQ_META_KEY: Final = "journal_pruned_seq"

Tier = Literal["live", "cold", "tombstoned"]


@dataclass(frozen=True)
class ChunkState:
    """One chunk as replay holds it after a journal step."""

    chunk_id: int
    admitted_seq: int
    kind: str
    salience: float
    pin_floor: float
    decay_from_ms: int
    tier: Tier


@dataclass(frozen=True)
class Checkpoint:
    seq: int
    at_ms: int
    journal_at_ms: int
    chunks: list[ChunkState]


@dataclass(frozen=True)
class Written:
    """A checkpoint just written: its step, when, and how many chunks it holds."""

    seq: int
    at_ms: int
    journal_at_ms: int
    chunks: int


@dataclass(frozen=True)
class Pruned:
    through_seq: int
    steps: int
    checkpoints: int


def journal_head(db: Database) -> int | None:
    row = db.fetch_one("SELECT max(seq) FROM journal")
    return None if row is None or row[0] is None else int(row[0])


def last_checkpoint_ms(db: Database) -> int | None:
    row = db.fetch_one("SELECT max(at_ms) FROM journal_checkpoints")
    return None if row is None or row[0] is None else int(row[0])


_DECAY_FROM: Final = "coalesce(last_decay_ts, created_at)"


def current_chunks(db: Database) -> list[ChunkState]:
    """Every admitted chunk's replay state as stored now (exact only between phases, when
    every step journaled has been applied and written)."""
    rows = db.fetch_all(
        f"SELECT id, admitted_seq, kind, salience, pin_floor, {_DECAY_FROM}, "
        "deleted_at IS NOT NULL, cold_at IS NOT NULL "
        "FROM observations WHERE admitted_seq IS NOT NULL "
        f"AND type != '{EFFICACY_TYPE}' ORDER BY id"
    )
    return [
        ChunkState(
            chunk_id=int(rowid),
            admitted_seq=int(admitted),
            kind=str(kind),
            salience=float(salience),
            pin_floor=float(floor),
            decay_from_ms=ms_from_iso(str(decay_from)),
            tier="tombstoned" if tombstoned else "cold" if cold else "live",
        )
        for rowid, admitted, kind, salience, floor, decay_from, tombstoned, cold in rows
    ]


_CHECKPOINTED: Final = (
    "FROM observations WHERE admitted_seq IS NOT NULL "
    f"AND type != '{EFFICACY_TYPE}' AND {ms_in_sql(_DECAY_FROM)} IS {{}} NULL"
)
_TIER: Final = (
    "CASE WHEN deleted_at IS NOT NULL THEN 'tombstoned' "
    "WHEN cold_at IS NOT NULL THEN 'cold' ELSE 'live' END"
)


def write_checkpoint(db: Database, *, now_ms: int) -> Written | None:
    """Checkpoint the journal's head (inside the caller's IMMEDIATE transaction, so no step
    is journaled meanwhile): every admitted chunk's replay state as stored now, exact
    between phases, when every step journaled has been applied and written. None when the
    journal is empty or its head is checkpointed.

    What current_chunks reads, copied inside SQLite, so that a million chunks cost no Python objects; the few dates
    SQLite cannot read are converted here.
    """
    head = journal_head(db)
    if head is None or db.fetch_one("SELECT 1 FROM journal_checkpoints WHERE seq = ?", (head,)):
        return None
    newest = int(db.fetch_one("SELECT max(at_ms) FROM journal WHERE seq <= ?", (head,))[0])
    db.conn.execute(
        "INSERT INTO journal_checkpoints (seq, at_ms, journal_at_ms, chunks) VALUES (?, ?, ?, 0)",
        (head, now_ms, newest),
    )
    insert = (
        "INSERT INTO checkpoint_chunks (checkpoint_seq, chunk_id, admitted_seq, kind, salience, "
        "pin_floor, decay_from_ms, tier) "
    )
    db.conn.execute(
        f"{insert} SELECT ?, id, admitted_seq, kind, salience, pin_floor, "
        f"{ms_in_sql(_DECAY_FROM)}, {_TIER} {_CHECKPOINTED.format('NOT')}",
        (head,),
    )
    unread = db.fetch_all(
        f"SELECT ?, id, admitted_seq, kind, salience, pin_floor, {_DECAY_FROM}, {_TIER} "
        f"{_CHECKPOINTED.format('')}",
        (head,),
    )
    db.conn.executemany(
        f"{insert} VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [(*row[:6], ms_from_iso(str(row[6])), row[7]) for row in unread],
    )
    count = int(
        db.fetch_one("SELECT count(*) FROM checkpoint_chunks WHERE checkpoint_seq = ?", (head,))[0]
    )
    db.conn.execute("UPDATE journal_checkpoints SET chunks = ? WHERE seq = ?", (count, head))
    return Written(head, now_ms, newest, count)


def prune(db: Database, *, older_than_ms: int) -> Pruned | None:
    """Delete the journal up to the newest checkpoint whose steps are all older than
    `older_than_ms`, and the checkpoints before it (inside the caller's transaction).
    None when no checkpoint is old enough."""
    row = db.fetch_one(
        "SELECT max(seq) FROM journal_checkpoints WHERE journal_at_ms < ?", (older_than_ms,)
    )
    if row is None or row[0] is None:
        return None
    cut = int(row[0])
    # These keep their record of the pulse or tombstone; only the step they pointed at goes.
    db.conn.execute("UPDATE applied_pulses SET journal_seq = NULL WHERE journal_seq <= ?", (cut,))
    db.conn.execute("UPDATE tombstones SET journal_seq = NULL WHERE journal_seq <= ?", (cut,))
    db.conn.execute("DELETE FROM journal WHERE seq <= ?", (cut,))
    steps = db.conn.changes()
    older = db.fetch_all("SELECT seq FROM journal_checkpoints WHERE seq < ?", (cut,))
    db.conn.execute("DELETE FROM checkpoint_chunks WHERE checkpoint_seq < ?", (cut,))
    db.conn.execute("DELETE FROM journal_checkpoints WHERE seq < ?", (cut,))
    previous = int(db.get_meta(PRUNED_SEQ_META_KEY) or "0")
    db.set_meta(PRUNED_SEQ_META_KEY, str(max(previous, cut)))
    return Pruned(through_seq=cut, steps=steps, checkpoints=len(older))


def pruned_through(db: Database) -> int:
    """The newest journal step deleted; 0 when the journal is whole."""
    return int(db.get_meta(PRUNED_SEQ_META_KEY) or "0")


def checkpoint_at(db: Database, seq: int) -> Checkpoint | None:
    row = db.fetch_one(
        "SELECT seq, at_ms, journal_at_ms FROM journal_checkpoints WHERE seq = ?", (seq,)
    )
    if row is None:
        return None
    chunks = [
        ChunkState(int(a), int(b), str(c), float(d), float(e), int(f), g)
        for a, b, c, d, e, f, g in db.fetch_all(
            "SELECT chunk_id, admitted_seq, kind, salience, pin_floor, decay_from_ms, tier "
            "FROM checkpoint_chunks WHERE checkpoint_seq = ? ORDER BY chunk_id",
            (seq,),
        )
    ]
    return Checkpoint(int(row[0]), int(row[1]), int(row[2]), chunks)


def replay_start(db: Database) -> Checkpoint | None:
    """The newest checkpoint at or below the oldest step the journal holds (the newest of
    all when it holds none); None when there is none and replay starts from nothing."""
    row = db.fetch_one("SELECT min(seq) FROM journal")
    oldest = None if row is None or row[0] is None else int(row[0])
    found = db.fetch_one(
        "SELECT max(seq) FROM journal_checkpoints WHERE ?1 IS NULL OR seq <= ?1", (oldest,)
    )
    if found is None or found[0] is None:
        return None
    return checkpoint_at(db, int(found[0]))


def journal_after(db: Database, seq: int) -> Iterator[tuple[int, str, str, dict[str, Any], int]]:
    """The journal's steps after `seq`, in order, as `Database.journal_entries` gives them."""
    for step, kind, ref, body, at_ms in db.fetch_all(
        "SELECT seq, kind, ref, body, at_ms FROM journal WHERE seq > ? ORDER BY seq", (seq,)
    ):
        yield int(step), str(kind), str(ref), json.loads(body), int(at_ms)


def history_since_ms(db: Database) -> int | None:
    """When the journal's history starts, once older steps were deleted: the time of the
    oldest step it holds (or of the newest deleted, when it holds none). None: whole."""
    if not pruned_through(db):
        return None
    row = db.fetch_one("SELECT at_ms FROM journal ORDER BY seq LIMIT 1")
    if row is not None:
        return int(row[0])
    newest = db.fetch_one("SELECT max(journal_at_ms) FROM journal_checkpoints")
    return None if newest is None or newest[0] is None else int(newest[0])
