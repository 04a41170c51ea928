"""What the sweep reads of every chunk: the `observations_sweep` index and the words kept
in `sweep_words` and `chunk_words` (migration 0020).

A sweep ranks every chunk by, among other things, the summed rarity of its distinct words
(pulses/information.py: information_content). The words of each chunk are kept as numbers, once,
so that a sweep of a large store reads a few bytes a chunk instead of every text, and counts
words with numpy instead of tokenizing again. A chunk that has no words kept yet (new since
the last sweep, or stored before migration 0020) is tokenized once, at the next sweep.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.store.database import EFFICACY_TYPE, METADATA_EPOCH_META_KEY, Database
from dreamcycle.store.observations import COLD_ROWS
from dreamcycle.store.tiers import epoch as tier_epoch
from dreamcycle.store.timefmt import ms_from_iso, ms_in_sql

#: How a chunk's word numbers are stored: unsigned 32-bit, little-endian, ascending.
WORD_ID_DTYPE: Final = np.dtype("<u4")

_SWEEP_ROWS: Final = (
    "SELECT o.id, o.kind, o.importance, "
    f"{ms_in_sql('o.created_at')}, o.cold_at IS NOT NULL, w.word_ids "
    "FROM observations AS o INDEXED BY observations_sweep "
    "LEFT JOIN chunk_words AS w ON w.id = o.id "
    "WHERE o.deleted_at IS NULL AND o.admitted_seq IS NOT NULL "
    f"AND o.type != '{EFFICACY_TYPE}' AND o.id > ? ORDER BY o.id LIMIT ?"
)
_SWEEP_COUNT: Final = (
    "SELECT count(*) FROM observations INDEXED BY observations_sweep "
    f"WHERE deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != '{EFFICACY_TYPE}'"
)
_COLD_LABELS: Final = f"SELECT id {COLD_ROWS} ORDER BY id"
_FIRST_PENDING: Final = (
    "SELECT min(id) FROM observations INDEXED BY observations_pending WHERE admitted_seq IS NULL"
)
#: Rows read per query: bounds the rows held as Python tuples at once (a large store's
#: tuples held together raised the peak memory scripts/bench_scale.py measures).
READ_BATCH: Final = 50_000


@dataclass(frozen=True)
class SweepRows:
    """Every admitted chunk that is not tombstoned, live or cold, as columns by label.

    Kept word numbers are one array, chunk after chunk; `word_counts[i]` says how many are
    chunk i's, -1 for a chunk whose words are not kept yet. `information` is each chunk's
    information content over these rows, once computed (it depends on every row's words,
    so rows kept or joined have none).
    """

    labels: npt.NDArray[np.int64]
    kinds: list[str]
    importance: npt.NDArray[np.float64]
    created_ms: npt.NDArray[np.int64]
    cold: npt.NDArray[np.bool_]
    word_numbers: npt.NDArray[np.uint32]
    word_counts: npt.NDArray[np.int64]
    information: npt.NDArray[np.float64] | None = None

    def keep(self, mask: npt.NDArray[np.bool_]) -> SweepRows:
        return SweepRows(
            labels=self.labels[mask],
            kinds=[kind for kind, kept in zip(self.kinds, mask.tolist(), strict=True) if kept],
            importance=self.importance[mask],
            created_ms=self.created_ms[mask],
            cold=self.cold[mask],
            word_numbers=self.word_numbers[np.repeat(mask, np.maximum(self.word_counts, 0))],
            word_counts=self.word_counts[mask],
        )


def sweep_rows(db: Database, *, after: int = 0) -> SweepRows:
    """Read through the sweep's index (no text, no embedding): the rows past `after`."""
    parts: list[SweepRows] = []
    # One string object per kind, not per chunk.
    kind_names: dict[str, str] = {}
    while rows := db.fetch_all(_SWEEP_ROWS, (after, READ_BATCH)):
        parts.append(_columns(db, rows, kind_names))
        after = int(rows[-1][0])
    return _joined(parts)


def _joined(parts: Sequence[SweepRows]) -> SweepRows:
    # A settled store's kept rows and no new ones: the kept rows as they are, not a copy.
    parts = [part for part in parts if len(part.labels)]
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        words = np.zeros(0, WORD_ID_DTYPE)
        return SweepRows(empty, [], np.zeros(0), empty, np.zeros(0, dtype=bool), words, empty)
    if len(parts) == 1:
        return parts[0]
    return SweepRows(
        labels=np.concatenate([part.labels for part in parts]),
        kinds=[kind for part in parts for kind in part.kinds],
        importance=np.concatenate([part.importance for part in parts]),
        created_ms=np.concatenate([part.created_ms for part in parts]),
        cold=np.concatenate([part.cold for part in parts]),
        word_numbers=np.concatenate([part.word_numbers for part in parts]),
        word_counts=np.concatenate([part.word_counts for part in parts]),
    )


class KeptSweepRows:
    """One peer's sweep rows, kept from one sweep to the next: a sweep of a million chunks
    then reads the chunks admitted since, not every row again. The cold tier's labels are
    read again only when the tier epoch moved in a way the peer's own moves (`moved`) do
    not account for; the rows' information is kept while no chunk comes or goes.

    What is kept holds only while nothing it read changed behind it: a chunk's kind,
    creation and words never change (a text is never rewritten but for efficacy rows,
    which the sweep skips); a revision of importance moves the metadata epoch, and then
    every row is read again; a chunk pending admission is read once admitted; a chunk
    tombstoned since is dropped as `gone` says. Should the number of rows still differ
    from the store's, every row is read again.
    """

    def __init__(self) -> None:
        self._rows: SweepRows | None = None
        # Every row up to this rowid is kept; rows past it are read again.
        self._through = 0
        self._epoch: str | None = None
        # The tier epoch the kept rows' cold flags were read at (or brought up to by
        # `moved`), None when not known: the cold tier's labels are read again then.
        self._tiers_at: str | None = None

    def read(
        self, db: Database, gone: Callable[[npt.NDArray[np.int64]], npt.NDArray[np.bool_]]
    ) -> SweepRows:
        """The rows `sweep_rows` reads; `gone` says which of some labels are tombstoned."""
        epoch = db.get_meta(METADATA_EPOCH_META_KEY)
        kept = self._rows
        if kept is None or epoch != self._epoch:
            return self._read_all(db, epoch)
        if len(kept.labels) and kept.labels[-1] > self._through:
            kept = kept.keep(kept.labels <= self._through)
        tombstoned = gone(kept.labels)
        if tombstoned.any():
            kept = kept.keep(~tombstoned)
        # Read before the rows: a tier change meanwhile makes the next read read again.
        tiers_at = tier_epoch(db)
        rows = _joined([kept, sweep_rows(db, after=self._through)])
        if len(rows.labels) != _count(db, _SWEEP_COUNT):
            return self._read_all(db, epoch)
        if tiers_at != self._tiers_at:
            # Rows read now (past the kept ones) come with their tier as it is.
            cold = np.array([row[0] for row in db.fetch_all(_COLD_LABELS)], dtype=np.int64)
            rows = replace(rows, cold=np.isin(rows.labels, cold, assume_unique=True))
            self._tiers_at = tiers_at
        self.remember(db, rows)
        return rows

    def _read_all(self, db: Database, epoch: str | None) -> SweepRows:
        tiers_at = tier_epoch(db)
        rows = sweep_rows(db)
        self._epoch = epoch
        self._tiers_at = tiers_at
        self.remember(db, rows)
        return rows

    def moved(
        self, labels: Sequence[int], *, cold: bool, tiers_before: str, tiers_after: str
    ) -> None:
        """`labels` went to the cold tier (or came back from it), committed by one
        transaction that took the tier epoch from `tiers_before` to `tiers_after`: the kept
        rows follow, and the next sweep need not read the cold tier's labels again. Kept
        rows read at another epoch are left as they are (they are read again). Called by
        the thread that sweeps (every move between tiers is the cycle's)."""
        rows = self._rows
        if rows is None or self._tiers_at != tiers_before:
            return
        ids = np.asarray(labels, dtype=np.int64)
        at = np.searchsorted(rows.labels, ids)
        held = at < len(rows.labels)
        held[held] = rows.labels[at[held]] == ids[held]
        flags = rows.cold.copy()
        flags[at[held]] = cold
        self._rows = replace(rows, cold=flags)
        self._tiers_at = tiers_after

    def remember(self, db: Database, rows: SweepRows) -> None:
        """Keep `rows`, as read now (their words perhaps filled in since), for the next
        sweep."""
        pending = db.fetch_one(_FIRST_PENDING)
        through = int(rows.labels[-1]) if len(rows.labels) else 0
        if pending is not None and pending[0] is not None:
            through = min(through, int(pending[0]) - 1)
        self._rows = rows
        self._through = through

    def forget(self) -> None:
        """Read every row at the next sweep."""
        self._rows = None
        self._tiers_at = None


def _count(db: Database, sql: str) -> int:
    row = db.fetch_one(sql)
    return int(row[0]) if row is not None else 0


def _columns(db: Database, rows: list[Any], kind_names: dict[str, str]) -> SweepRows:
    labels, kinds, importance, created_ms, cold, word_ids = zip(*rows, strict=True)
    count = len(rows)
    if None in created_ms:
        # A date SQLite cannot read is read as the chunk's own code reads it (or refused).
        created_ms = tuple(
            _created_ms(db, label) if ms is None else ms
            for label, ms in zip(labels, created_ms, strict=True)
        )
    kept = [words for words in word_ids if words is not None]
    return SweepRows(
        labels=np.fromiter(labels, dtype=np.int64, count=count),
        kinds=[kind_names.setdefault(kind, kind) for kind in kinds],
        importance=np.fromiter(importance, dtype=np.float64, count=count),
        created_ms=np.fromiter(created_ms, dtype=np.int64, count=count),
        cold=np.fromiter(cold, dtype=bool, count=count),
        word_numbers=np.frombuffer(b"".join(kept), dtype=WORD_ID_DTYPE),
        word_counts=np.fromiter(
            (-1 if words is None else len(words) // WORD_ID_DTYPE.itemsize for words in word_ids),
            dtype=np.int64,
            count=count,
        ),
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


def word_arrays(
    rows: SweepRows, missing_numbers: npt.NDArray[np.uint32], missing_counts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """Every chunk's word numbers one after another, and how many each chunk has: those kept
    in `rows`, and for the chunks whose words are not kept there, in their order, those of
    `missing_numbers`, `missing_counts[i]` of them for the i-th."""
    counts = rows.word_counts
    absent = counts < 0
    if not absent.any():
        return rows.word_numbers, counts
    if absent.all():
        # A first sweep: every chunk's words were just read, and no copy joins them.
        return missing_numbers, missing_counts
    lengths = counts.copy()
    lengths[absent] = missing_counts
    # Both sequences keep their order: each fills its own positions of the whole.
    from_missing = np.repeat(absent, lengths)
    joined = np.empty(len(from_missing), dtype=WORD_ID_DTYPE)
    joined[~from_missing] = rows.word_numbers
    joined[from_missing] = missing_numbers
    return joined, lengths
