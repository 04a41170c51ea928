"""What the efficacy metrics read (attributions, outcomes) and the rows they are recorded in.

Each metric is one observation of type EFFICACY_TYPE per topic key, updated in
place. Such a row is stored with admitted_seq = 0 and no embedding: admission
(admitted_seq IS NULL) never picks it up, so it is never journaled, published,
indexed or embedded, and the recall_fts triggers leave it out of full text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

from dreamcycle.store.database import EFFICACY_TYPE, Database, initial_salience
from dreamcycle.store.hashing import content_hash
from dreamcycle.store.timefmt import iso_from_ms

#: Not memory: the lowest importance, a summary, never pruned.
EFFICACY_KIND: Final = "summary"
EFFICACY_IMPORTANCE: Final = 0
EFFICACY_DELETION_POLICY: Final = "never"
#: Marks the row as recorded but never admitted (admission selects admitted_seq IS NULL).
NEVER_ADMITTED: Final = 0


@dataclass(frozen=True)
class ConvertedOutcome:
    reward: float
    cited: list[str]
    attributed: list[str]


@dataclass(frozen=True)
class EfficacyRow:
    rowid: int
    topic_key: str
    title: str
    content: str
    revision_count: int
    updated_at: str


def attributions_since(db: Database, since_ms: int) -> list[tuple[str, list[str]]]:
    """(decision hash, chunk hashes in context) of decisions recorded at or after `since_ms`."""
    return [
        (str(digest), list(json.loads(chunks)))
        for digest, chunks in db.fetch_all(
            "SELECT decision_hash, chunk_hashes_json FROM attributions WHERE ts >= ? "
            "ORDER BY hlc, decision_hash",
            (iso_from_ms(since_ms),),
        )
    ]


def converted_outcomes_since(db: Database, since_ms: int) -> list[ConvertedOutcome]:
    """Outcomes turned into pulses, of decisions recorded at or after `since_ms`."""
    return [
        ConvertedOutcome(float(reward), list(json.loads(cited)), list(json.loads(chunks)))
        for reward, cited, chunks in db.fetch_all(
            "SELECT o.reward, o.cited_json, a.chunk_hashes_json FROM outcomes o "
            "JOIN attributions a ON a.decision_hash = o.decision_hash "
            "WHERE o.status = 'converted' AND a.ts >= ? ORDER BY o.hlc, o.outcome_id",
            (iso_from_ms(since_ms),),
        )
    ]


def efficacy_rowids(db: Database) -> set[int]:
    return {
        int(r[0])
        for r in db.fetch_all("SELECT id FROM observations WHERE type = ?", (EFFICACY_TYPE,))
    }


def efficacy_rows(db: Database) -> list[EfficacyRow]:
    return [
        EfficacyRow(int(a), str(b), str(c), str(d), int(e), str(f))
        for a, b, c, d, e, f in db.fetch_all(
            "SELECT id, topic_key, title, content, revision_count, updated_at FROM observations "
            "WHERE type = ? ORDER BY topic_key",
            (EFFICACY_TYPE,),
        )
    ]


def record(
    db: Database, *, topic_key: str, title: str, content: str, origin_peer: str, now_ms: int
) -> tuple[int, bool]:
    """Insert the row of `topic_key`, or update its content in place; (rowid, created).

    Call inside a transaction.
    """
    digest = content_hash(content)
    now = iso_from_ms(now_ms)
    row = db.fetch_one(
        "SELECT id FROM observations WHERE type = ? AND topic_key = ? ORDER BY id LIMIT 1",
        (EFFICACY_TYPE, topic_key),
    )
    if row is not None:
        db.conn.execute(
            "UPDATE observations SET content = ?, content_hash = ?, normalized_hash = ?, "
            "updated_at = ?, revision_count = revision_count + 1 WHERE id = ?",
            (content, digest, digest, now, int(row[0])),
        )
        return int(row[0]), False
    db.conn.execute(
        "INSERT INTO observations (type, title, content, topic_key, normalized_hash, created_at, "
        "updated_at, last_seen_at, last_decay_ts, pin_floor, salience, content_hash, kind, "
        "importance, deletion_policy, origin_peer, admitted_seq) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 0.0, ?, ?, ?, ?, ?, ?, ?)",
        (
            EFFICACY_TYPE,
            title,
            content,
            topic_key,
            digest,
            now,
            now,
            now,
            now,
            initial_salience(EFFICACY_IMPORTANCE),
            digest,
            EFFICACY_KIND,
            EFFICACY_IMPORTANCE,
            EFFICACY_DELETION_POLICY,
            origin_peer,
            NEVER_ADMITTED,
        ),
    )
    return db.conn.last_insert_rowid(), True
