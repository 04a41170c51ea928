"""What the sweep reads of every chunk: the `observations_sweep` index and the words kept
in `sweep_words` and `chunk_words` (migration 0020).

A sweep ranks every chunk by, among other things, the summed rarity of its distinct words
(pulses/sweep.py: information_content). The words of each chunk are kept as numbers, once,
so that a sweep of a large store reads a few bytes a chunk instead of every text, and counts
words with numpy instead of tokenizing again. A chunk that has no words kept yet (new since
the last sweep, or stored before migration 0020) is tokenized once, at the next sweep.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import EFFICACY_TYPE, Database
from dreamcycle.store.timefmt import ms_from_iso, ms_in_sql

#: How a chunk's word numbers are stored: unsigned 32-bit, little-endian, ascending.
WORD_ID_DTYPE: Final = np.dtype("<u4")

_SWEEP_ROWS: Final = (
    "SELECT o.id, o.kind, o.importance, "
    f"{ms_in_sql('o.created_at')}, o.cold_at IS NOT NULL, w.word_ids "
    "FROM observations AS o INDEXED BY observations_sweep "
    "LEFT JOIN chunk_words AS w ON w.id = o.id "
    "WHERE o.deleted_at IS NULL AND o.admitted_seq IS NOT NULL "
    f"AND o.type != '{EFFICACY_TYPE}' ORDER BY o.id"
)


@dataclass(frozen=True)
class SweepRows:
    """Every admitted chunk that is not tombstoned, live or cold, as columns by label.
    `word_ids[i]` is None for a chunk whose words are not kept yet."""

    labels: npt.NDArray[np.int64]
    kinds: list[str]
    importance: npt.NDArray[np.float64]
    created_ms: npt.NDArray[np.int64]
    cold: npt.NDArray[np.bool_]
    word_ids: list[bytes | None]

    def keep(self, mask: npt.NDArray[np.bool_]) -> SweepRows:
        return SweepRows(
            labels=self.labels[mask],
            kinds=[kind for kind, kept in zip(self.kinds, mask.tolist(), strict=True) if kept],
            importance=self.importance[mask],
            created_ms=self.created_ms[mask],
            cold=self.cold[mask],
            word_ids=[w for w, kept in zip(self.word_ids, mask.tolist(), strict=True) if kept],
        )


def sweep_rows(db: Database) -> SweepRows:
    """Read through the sweep's index: no text, no embedding."""
    rows = db.fetch_all(_SWEEP_ROWS)
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return SweepRows(empty, [], np.zeros(0), empty, np.zeros(0, dtype=bool), [])
    labels, kinds, importance, created_ms, cold, word_ids = zip(*rows, strict=True)
    count = len(rows)
    if None in created_ms:
        # A date SQLite cannot read is read as the chunk's own code reads it (or refused).
        created_ms = tuple(
            _created_ms(db, label) if ms is None else ms
            for label, ms in zip(labels, created_ms, strict=True)
        )
    return SweepRows(
        labels=np.fromiter(labels, dtype=np.int64, count=count),
        kinds=list(kinds),
        importance=np.fromiter(importance, dtype=np.float64, count=count),
        created_ms=np.fromiter(created_ms, dtype=np.int64, count=count),
        cold=np.fromiter(cold, dtype=bool, count=count),
        word_ids=list(word_ids),
    )


def _created_ms(db: Database, label: int) -> int:
    row = db.fetch_one("SELECT created_at FROM observations WHERE id = ?", (label,))
    return ms_from_iso(str(row[0]) if row is not None else "")


def texts_of(db: Database, labels: Sequence[int]) -> dict[int, str]:
    """The content of each chunk in `labels`."""
    rows = db.fetch_all_in("SELECT id, content FROM observations WHERE id IN ({marks})", labels)
    return {int(rowid): str(content) for rowid, content in rows}


def keep_words(db: Database, words_of: Mapping[int, Sequence[str]]) -> dict[int, bytes]:
    """Number the chunks' words (a word keeps its number for good) and keep each chunk's
    numbers; inside the caller's transaction. Returns what was kept, by label."""
    distinct = sorted({word for words in words_of.values() for word in words})
    db.conn.executemany(
        "INSERT OR IGNORE INTO sweep_words (word) VALUES (?)", [(word,) for word in distinct]
    )
    kept = _encoded(words_of, _stored_numbers(db, distinct))
    db.conn.executemany(
        "INSERT OR REPLACE INTO chunk_words (id, word_ids) VALUES (?, ?)", list(kept.items())
    )
    return kept


def numbered_words(
    db: Database, words_of: Mapping[int, Sequence[str]], unseen: dict[str, int]
) -> dict[int, bytes]:
    """keep_words without writing: a word not numbered yet takes a number past the last,
    recorded in `unseen` so that later calls give it the same one."""
    distinct = sorted({word for words in words_of.values() for word in words})
    number = _stored_numbers(db, distinct)
    last = db.fetch_one("SELECT coalesce(max(id), 0) FROM sweep_words")
    fresh = max(int(last[0]) if last is not None else 0, max(unseen.values(), default=0))
    for word in distinct:
        if word in number:
            continue
        if word not in unseen:
            fresh += 1
            unseen[word] = fresh
        number[word] = unseen[word]
    return _encoded(words_of, number)


def _stored_numbers(db: Database, words: Sequence[str]) -> dict[str, int]:
    rows = db.fetch_all_in("SELECT word, id FROM sweep_words WHERE word IN ({marks})", words)
    return {str(word): int(word_id) for word, word_id in rows}


def _encoded(words_of: Mapping[int, Sequence[str]], number: Mapping[str, int]) -> dict[int, bytes]:
    if number and max(number.values()) > np.iinfo(WORD_ID_DTYPE).max:
        raise OverflowError("the sweep has numbered more than 2**32 distinct words")
    return {
        label: np.array(sorted(number[w] for w in words), dtype=WORD_ID_DTYPE).tobytes()
        for label, words in words_of.items()
    }


def word_arrays(word_ids: Sequence[bytes]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The chunks' word numbers one after another, and how many each chunk has."""
    lengths = np.fromiter(map(len, word_ids), dtype=np.int64, count=len(word_ids))
    lengths //= WORD_ID_DTYPE.itemsize
    joined = np.frombuffer(b"".join(word_ids), dtype=WORD_ID_DTYPE).astype(np.int64)
    return joined, lengths
