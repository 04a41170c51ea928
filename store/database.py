"""The local SQLite database (apsw): observations, protocol tables, log state.

One `Database` per process. The daemon and the CLIs open the same file; WAL
and a busy timeout let `pulse-emit` and `recall` write while the daemon runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import apsw
import apsw.bestpractice
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.confidence import (
    InvalidConfidence,
    check_unit,
    default_confidence,
    default_stability,
)
from dreamcycle.store.hashing import content_hash, normalise_content
from dreamcycle.store.migrations import apply_migrations
from dreamcycle.store.timefmt import iso_from_ms

#: How long a writer waits for another process's transaction before failing.
BUSY_TIMEOUT_MS: Final = 10_000
#: Kinds of chunk; each has its own decay half-life (fact, preference, insight, summary, note).
CHUNK_KINDS: Final = ("fact", "preference", "insight", "summary", "note")
DELETION_POLICIES: Final = ("auto_prune", "manual_only", "never")
#: Metadata a `reconsolidate` entry may change without changing the chunk's content.
REVISABLE_COLUMNS: Final = ("title", "topic_key", "importance")
#: A new chunk's salience is INITIAL_SALIENCE_BASE + INITIAL_SALIENCE_PER_IMPORTANCE *
#: importance: 0.5 at the default importance 5, 0.75 at 10, always below the cap 1.0,
#: so a Reward can still lift it.
INITIAL_SALIENCE_BASE: Final = 0.25
INITIAL_SALIENCE_PER_IMPORTANCE: Final = 0.05
#: meta key counting moves between the live and the cold tier (part of the index's stamp).
TIER_EPOCH_META_KEY: Final = "tier_epoch"
#: meta key counting changes of the metadata recall filters on (project, scope, session,
#: tool, topic key), which the index's stamp does not see: part of the filters' stamp.
METADATA_EPOCH_META_KEY: Final = "metadata_epoch"
#: Metadata a peer may change here alone (re-ingest): filters read it, peers never see it.
LOCAL_METADATA_COLUMNS: Final = ("project", "scope", "session_id", "tool_name")
#: Observations of this type record the daemon's own efficacy; they are not memory to recall.
EFFICACY_TYPE: Final = "efficacy"


def initial_salience(importance: int) -> float:
    return INITIAL_SALIENCE_BASE + INITIAL_SALIENCE_PER_IMPORTANCE * importance


#: How long closing a connection may wait to refresh the planner's statistics: a command
#: ending under another process's lock does not wait out the busy timeout for them.
OPTIMIZE_TIMEOUT_MS: Final = 100


def connection_busy_timeout_first(connection: apsw.Connection) -> None:
    """The full busy timeout, before anything else touches the file: bestpractice's own is
    100 ms, and its set-up of a new connection already waits for locks."""
    connection.set_busy_timeout(BUSY_TIMEOUT_MS)


# bestpractice's `PRAGMA optimize` at open needs the write lock whenever statistics are
# stale: under another process's transaction every command failed after 100 ms. It runs
# when a connection closes instead (Database.close), and never waits long there.
apsw.bestpractice.apply(
    (
        connection_busy_timeout_first,
        *(
            setup
            for setup in apsw.bestpractice.recommended
            if setup
            not in (
                apsw.bestpractice.connection_busy_timeout,
                apsw.bestpractice.connection_optimize,
            )
        ),
    )
)


class DatabaseError(Exception):
    """The database file is unusable; the message names the file and the problem."""


class InvalidObservation(ValueError):
    """An observation that cannot be stored; the message names the field."""


@dataclass(frozen=True)
class NewObservation:
    content: str
    title: str = ""
    type: str = "manual"
    kind: str = "note"
    project: str | None = None
    scope: str = "project"
    topic_key: str | None = None
    session_id: str | None = None
    tool_name: str | None = None
    pin_floor: float = 0.0
    importance: int = 5
    deletion_policy: str = "auto_prune"
    origin_peer: str | None = None
    source_ref: str | None = None
    #: None: the default of the memory's type and kind (pulses/confidence.py).
    confidence: float | None = None
    #: None: the usual stability of the memory's kind.
    stability: float | None = None

    def validate(self) -> None:
        if not normalise_content(self.content):
            raise InvalidObservation("content is empty")
        if self.kind not in CHUNK_KINDS:
            raise InvalidObservation(f"kind {self.kind!r} is not one of {', '.join(CHUNK_KINDS)}")
        if not 0.0 <= self.pin_floor <= 1.0:
            raise InvalidObservation(f"pin_floor {self.pin_floor} is outside [0, 1]")
        if not 0 <= self.importance <= 10:
            raise InvalidObservation(f"importance {self.importance} is outside 0..10")
        if self.deletion_policy not in DELETION_POLICIES:
            raise InvalidObservation(
                f"deletion_policy {self.deletion_policy!r} is not one of {', '.join(DELETION_POLICIES)}"
            )
        for name in ("confidence", "stability"):
            value = getattr(self, name)
            if value is not None:
                try:
                    check_unit(name, value)
                except InvalidConfidence as exc:
                    raise InvalidObservation(str(exc)) from None

    def resolved_confidence(self) -> float:
        if self.confidence is not None:
            return self.confidence
        return default_confidence(self.type, self.kind)

    def resolved_stability(self) -> float:
        return self.stability if self.stability is not None else default_stability(self.kind)


@dataclass(frozen=True)
class Added:
    rowid: int
    content_hash: str
    created: bool  # False: the content was already stored (duplicate_count bumped)


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


@dataclass(frozen=True)
class Observation:
    rowid: int
    content_hash: str
    title: str
    content: str
    type: str
    kind: str
    topic_key: str | None
    project: str | None
    salience: float
    pin_floor: float
    deleted_at: str | None
    access_count: int
    deletion_policy: str
    created_at: str
    cold_at: str | None = None
    cold_reason: str | None = None
    importance: int = 5
    confidence: float = 1.0
    stability: float = 0.5

    @property
    def live(self) -> bool:
        return self.deleted_at is None and self.cold_at is None


_OBSERVATION_COLUMNS: Final = (
    "id, content_hash, title, content, type, kind, topic_key, project, salience, pin_floor, "
    "deleted_at, access_count, deletion_policy, created_at, cold_at, cold_reason, importance, "
    "confidence, stability"
)


@dataclass(frozen=True)
class SalienceRow:
    rowid: int
    salience: float
    pin_floor: float
    tombstoned: bool
    deletion_policy: str
    cold: bool


@dataclass(frozen=True)
class AttributionRecord:
    """A recorded decision: chunks best first (when known), who decided, and the query."""

    chunk_hashes: list[str]
    peer: str
    hlc: int
    decision_text: str
    ranked: list[str]
    query_text: str | None
    query_embedding: npt.NDArray[np.float32] | None


@dataclass(frozen=True)
class OutcomeRecord:
    outcome_id: str
    decision_hash: str
    reward: float
    observer_peer: str
    hlc: int
    reason: str
    expires_ms: int
    cited: list[str]


def vector_to_blob(vector: npt.NDArray[np.float32]) -> bytes:
    return np.ascontiguousarray(vector, dtype="<f4").tobytes()


def blob_to_vector(blob: bytes) -> npt.NDArray[np.float32]:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


class Database:
    def __init__(self, path: Path, *, prepare: bool = True, read_only: bool = False) -> None:
        """`prepare=False` opens another connection to a file this process has already
        checked and migrated (a server's per-thread readers): no integrity scan, no
        migrations. `read_only` opens an existing file for diagnosis: nothing is created,
        checked or migrated."""
        self.path = path
        if not read_only:
            path.parent.mkdir(parents=True, exist_ok=True)
        #: (data_version, total_changes) -> change_stamp: valid until anyone commits.
        self._stamp_memo: tuple[tuple[int, int], str] | None = None
        try:
            if read_only:
                self.conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
            else:
                self.conn = apsw.Connection(str(path))
            self.conn.set_busy_timeout(BUSY_TIMEOUT_MS)
            self.conn.execute("PRAGMA synchronous = FULL")
            if prepare and not read_only:
                self._check_integrity_quick()
                apply_migrations(self.conn)
        except apsw.NotADBError as exc:
            raise DatabaseError(f"{path} is not an SQLite database: {exc}") from None
        except apsw.CorruptError as exc:
            raise DatabaseError(f"{path} is corrupt: {exc}") from None

    def _check_integrity_quick(self) -> None:
        rows = self._all("PRAGMA quick_check(1)")
        if rows and rows[0][0] != "ok":
            raise DatabaseError(f"{self.path} failed its integrity check: {rows[0][0]}")

    def close(self) -> None:
        # Statistics are an optimisation: a lock, a full disk, a read-only file (or a
        # connection closed already) leaves them as they were.
        with suppress(apsw.Error):
            if not self.conn.readonly("main"):
                self.conn.set_busy_timeout(OPTIMIZE_TIMEOUT_MS)
                self.conn.execute("PRAGMA optimize")
        self.conn.close()

    # apsw types a column as a union of every SQLite type; callers know the schema.
    def _one(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.conn.execute(sql, params).fetchone()

    def _all(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    # The stores of other tables (tiers, keys, lexical) query through these.
    fetch_one = _one
    fetch_all = _all

    @contextmanager
    def transaction(self) -> Iterator[apsw.Connection]:
        """All-or-nothing: a crash inside leaves the database as before.

        The outermost level begins IMMEDIATE: it takes the write lock up front
        (waiting out the busy timeout). A deferred transaction that read first
        could not upgrade once another process (the daemon, pulse-emit) had
        committed meanwhile; SQLite would answer "database is locked" at once.
        Nested levels are savepoints.
        """
        if self.conn.in_transaction:
            with self.conn:
                yield self.conn
            return
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            yield self.conn
        except BaseException:
            self.conn.execute("ROLLBACK")
            raise
        self.conn.execute("COMMIT")

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one committed state of the database, whatever commits meanwhile."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN DEFERRED")
        try:
            yield
        finally:
            self.conn.execute("COMMIT")

    # ---- meta -----------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        row = self._one("SELECT value FROM meta WHERE key = ?", (key,))
        return None if row is None else str(row[0])

    def set_meta(self, key: str, value: str) -> None:
        self.conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def next_counter(self, key: str) -> int:
        """Increment and return an integer counter kept in meta (call inside a transaction)."""
        current = int(self.get_meta(key) or "0") + 1
        self.set_meta(key, str(current))
        return current

    # ---- observations -----------------------------------------------------------

    def add_observations(self, items: Sequence[NewObservation], *, now_ms: int) -> list[Added]:
        """Store chunks, deduplicated by content hash. Call inside a transaction."""
        now = iso_from_ms(now_ms)
        results: list[Added] = []
        for item in items:
            item.validate()
            digest = content_hash(item.content)
            row = self._one("SELECT id FROM observations WHERE content_hash = ?", (digest,))
            if row is not None:
                self.conn.execute(
                    "UPDATE observations SET duplicate_count = duplicate_count + 1, "
                    "last_seen_at = ? WHERE id = ?",
                    (now, row[0]),
                )
                results.append(Added(int(row[0]), digest, created=False))
                continue
            self.conn.execute(
                "INSERT INTO observations (session_id, type, title, content, tool_name, project, "
                "scope, topic_key, normalized_hash, created_at, updated_at, last_seen_at, "
                "last_decay_ts, pin_floor, salience, content_hash, kind, importance, "
                "deletion_policy, origin_peer, source_ref, confidence, stability) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    item.session_id,
                    item.type,
                    item.title,
                    item.content,
                    item.tool_name,
                    item.project,
                    item.scope,
                    item.topic_key,
                    digest,
                    now,
                    now,
                    now,
                    now,
                    item.pin_floor,
                    max(item.pin_floor, initial_salience(item.importance)),
                    digest,
                    item.kind,
                    item.importance,
                    item.deletion_policy,
                    item.origin_peer,
                    item.source_ref,
                    item.resolved_confidence(),
                    item.resolved_stability(),
                ),
            )
            results.append(Added(self.conn.last_insert_rowid(), digest, created=True))
        return results

    def unembedded(self, limit: int) -> list[tuple[int, str]]:
        """Live chunks without an embedding: (rowid, text to embed), oldest first."""
        rows = self._all(
            "SELECT id, title, content FROM observations "
            f"WHERE embedding IS NULL AND deleted_at IS NULL AND type != '{EFFICACY_TYPE}' "
            "ORDER BY id LIMIT ?",
            (limit,),
        )
        return [(int(r[0]), embedding_text(str(r[1]), str(r[2]))) for r in rows]

    def pending_admission(self, limit: int) -> list[PendingChunk]:
        """Live chunks the daemon has not indexed yet, oldest first, with any stored embedding."""
        # The few pending rows, from their own index: without statistics the planner
        # would rather read every live chunk by observations_live (0.16 s at 100k).
        return self._pending(
            "INDEXED BY observations_pending "
            "WHERE admitted_seq IS NULL AND deleted_at IS NULL ORDER BY id LIMIT ?",
            limit,
        )

    def pending_admission_of(self, rowid: int) -> PendingChunk:
        return self._pending("WHERE id = ?", rowid)[0]

    def _pending(self, condition: str, arg: int) -> list[PendingChunk]:
        rows = self._all(
            "SELECT id, title, content, embedding, index_version, pin_floor, kind, "
            "coalesce(last_decay_ts, created_at), origin_peer FROM observations " + condition,
            (arg,),
        )
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
        self.conn.execute(
            "UPDATE observations SET admitted_seq = ? WHERE id = ?", (journal_seq, rowid)
        )

    def set_embeddings(
        self,
        rowids: Sequence[int],
        vectors: npt.NDArray[np.float32],
        *,
        model_id: str,
        index_version: str,
    ) -> None:
        self.conn.executemany(
            "UPDATE observations SET embedding = ?, model_id = ?, index_version = ? WHERE id = ?",
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
        for rowid, blob, deleted in self._all(
            "SELECT id, embedding, coalesce(deleted_at, cold_at) FROM observations "
            "WHERE admitted_seq IS NOT NULL AND index_version = ? AND id > ? "
            f"AND type != '{EFFICACY_TYPE}' ORDER BY id",
            (index_version, after_rowid),
        ):
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

    def indexed_labels(self, index_version: str) -> npt.NDArray[np.int64]:
        """The labels a live index of `index_version` holds: what `embeddings` lists live."""
        rows = self._all(
            "SELECT id FROM observations WHERE admitted_seq IS NOT NULL AND index_version = ? "
            f"AND type != '{EFFICACY_TYPE}' AND deleted_at IS NULL AND cold_at IS NULL "
            "ORDER BY id",
            (index_version,),
        )
        return np.array([row[0] for row in rows], dtype=np.int64)

    def embedding_of_hash(self, digest: str) -> npt.NDArray[np.float32] | None:
        row = self._one("SELECT embedding FROM observations WHERE content_hash = ?", (digest,))
        return None if row is None or row[0] is None else blob_to_vector(bytes(row[0]))

    def observation(self, rowid: int) -> Observation | None:
        row = self._one(f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE id = ?", (rowid,))
        return None if row is None else _observation(row)

    def observation_by_hash(self, digest: str) -> Observation | None:
        row = self._one(
            f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE content_hash = ?", (digest,)
        )
        return None if row is None else _observation(row)

    def observations(self, rowids: Sequence[int]) -> dict[int, Observation]:
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        rows = self._all(
            f"SELECT {_OBSERVATION_COLUMNS} FROM observations WHERE id IN ({marks})", tuple(rowids)
        )
        return {int(r[0]): _observation(r) for r in rows}

    def bump_access(self, rowids: Sequence[int], *, now_ms: int) -> None:
        self.conn.executemany(
            # A cold chunk recalled by fallback is not thereby revived (see store.tiers).
            "UPDATE observations SET access_count = access_count + 1, "
            "last_seen_at = CASE WHEN cold_at IS NULL THEN ? ELSE last_seen_at END WHERE id = ?",
            [(iso_from_ms(now_ms), r) for r in rowids],
        )

    # ---- salience -----------------------------------------------------------------

    def salience_rows(self, *, after_rowid: int = 0) -> Iterator[SalienceRow]:
        """The salience state of every chunk, in rowid order."""
        for rowid, salience, floor, deleted, policy, cold in self._all(
            "SELECT id, salience, pin_floor, deleted_at IS NOT NULL, deletion_policy, "
            "cold_at IS NOT NULL FROM observations WHERE id > ? ORDER BY id",
            (after_rowid,),
        ):
            yield SalienceRow(
                int(rowid), float(salience), float(floor), bool(deleted), str(policy), bool(cold)
            )

    def write_salience(self, values: dict[int, float]) -> None:
        self.conn.executemany(
            "UPDATE observations SET salience = ? WHERE id = ?",
            [(value, rowid) for rowid, value in sorted(values.items())],
        )

    def decay_candidates(
        self, *, due_by_ms: int | None = None, limit: int | None = None
    ) -> list[tuple[int, str, str, float]]:
        """(rowid, kind, ISO time its decay counts from, stability) of live indexed chunks
        (cold ones too) whose decay counts from `due_by_ms` or earlier, the longest waiting
        first (ties: smaller rowid), at most `limit`: pulses.sweep.due_for_decay in SQL,
        read from the observations_decay index (migration 0011)."""
        decay_from = "coalesce(last_decay_ts, created_at)"
        where = f"deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != '{EFFICACY_TYPE}'"
        params: list[Any] = []
        if due_by_ms is not None:
            where += f" AND {decay_from} <= ?"
            params.append(iso_from_ms(due_by_ms))
        params.append(-1 if limit is None else limit)
        return [
            (int(r[0]), str(r[1]), str(r[2]), float(r[3]))
            for r in self._all(
                f"SELECT id, kind, {decay_from}, stability FROM observations WHERE {where} "
                f"ORDER BY {decay_from}, id LIMIT ?",
                tuple(params),
            )
        ]

    def stabilities(self) -> dict[int, float]:
        """Every chunk's stability, by rowid."""
        return {int(r[0]): float(r[1]) for r in self._all("SELECT id, stability FROM observations")}

    def mark_decayed(self, now_ms: int, rowids: Sequence[int]) -> None:
        """Record that these chunks were decayed up to `now_ms`."""
        stamp = iso_from_ms(now_ms)
        self.conn.executemany(
            "UPDATE observations SET last_decay_ts = ? WHERE id = ?", [(stamp, r) for r in rowids]
        )

    def set_pin_floor(self, rowid: int, floor: float, *, now_ms: int) -> None:
        self.conn.execute(
            "UPDATE observations SET pin_floor = ?, updated_at = ? WHERE id = ?",
            (floor, iso_from_ms(now_ms), rowid),
        )

    def revise(self, rowid: int, changes: dict[str, Any], *, now_ms: int) -> None:
        """Update metadata columns (title, topic_key, importance); counts a revision."""
        unknown = set(changes) - set(REVISABLE_COLUMNS)
        if unknown:
            raise InvalidObservation(f"cannot revise {', '.join(sorted(unknown))}")
        for column, value in sorted(changes.items()):
            self.conn.execute(
                f"UPDATE observations SET {column} = ?, updated_at = ?, "
                "revision_count = revision_count + 1 WHERE id = ?",
                (value, iso_from_ms(now_ms), rowid),
            )
        self.next_counter(METADATA_EPOCH_META_KEY)

    def update_local_metadata(self, rowid: int, changes: dict[str, Any]) -> None:
        """Change metadata of LOCAL_METADATA_COLUMNS here only; updated_at is left alone (it
        names the state a queued revision revises). Call inside a transaction."""
        unknown = set(changes) - set(LOCAL_METADATA_COLUMNS)
        if unknown:
            raise InvalidObservation(f"cannot change {', '.join(sorted(unknown))} here")
        for column, value in sorted(changes.items()):
            self.conn.execute(f"UPDATE observations SET {column} = ? WHERE id = ?", (value, rowid))
        self.next_counter(METADATA_EPOCH_META_KEY)

    def filter_stamp(self) -> str:
        """Changes whenever the chunks a recall filter matches may have: the index's stamp
        (chunks added, tombstoned, moved between tiers) and the metadata epoch."""
        return f"{self.change_stamp()}/{self.get_meta(METADATA_EPOCH_META_KEY) or '0'}"

    def rowids_by_hash(self) -> dict[str, int]:
        return {str(h): int(r) for r, h in self._all("SELECT id, content_hash FROM observations")}

    def embedding_of_rowid(self, rowid: int) -> npt.NDArray[np.float32] | None:
        return self.embeddings_of([rowid]).get(rowid)

    def embeddings_of(self, rowids: Sequence[int]) -> dict[int, npt.NDArray[np.float32]]:
        """Stored vectors of the given chunks (those that have one), in one query."""
        if not rowids:
            return {}
        marks = ",".join("?" * len(rowids))
        rows = self._all(
            f"SELECT id, embedding FROM observations WHERE id IN ({marks}) "
            "AND embedding IS NOT NULL",
            tuple(rowids),
        )
        return {int(r[0]): blob_to_vector(bytes(r[1])) for r in rows}

    def journal_counts(self) -> dict[str, int]:
        return {
            str(k): int(n) for k, n in self._all("SELECT kind, count(*) FROM journal GROUP BY kind")
        }

    # ---- tombstones -------------------------------------------------------------

    def tombstone(
        self,
        digest: str,
        *,
        reason: str,
        origin_peer: str,
        now_ms: int,
        collectable_after_ms: int | None,
        journal_seq: int | None,
    ) -> int | None:
        """Tombstone a chunk hash (known locally or not). Returns the rowid it hid, if any.

        A hash already tombstoned keeps its first tombstone: tombstones are permanent.
        """
        inserted = self._one(
            "INSERT INTO tombstones (hash, reason, origin_peer, ts, collectable_after, journal_seq) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (hash) DO NOTHING RETURNING hash",
            (
                digest,
                reason,
                origin_peer,
                iso_from_ms(now_ms),
                None if collectable_after_ms is None else iso_from_ms(collectable_after_ms),
                journal_seq,
            ),
        )
        if inserted is None:
            return None
        row = self._one(
            "UPDATE observations SET deleted_at = ?, updated_at = ? "
            "WHERE content_hash = ? AND deleted_at IS NULL RETURNING id",
            (iso_from_ms(now_ms), iso_from_ms(now_ms), digest),
        )
        if row is None:
            return None
        # Learned keys go with the chunk: nothing may recall a retracted chunk by them.
        self.conn.execute("DELETE FROM learned_keys WHERE chunk_id = ?", (row[0],))
        self.conn.execute("UPDATE recall_fts SET learned = '' WHERE rowid = ?", (row[0],))
        return int(row[0])

    def is_tombstoned_hash(self, digest: str) -> bool:
        return self._one("SELECT 1 FROM tombstones WHERE hash = ?", (digest,)) is not None

    # ---- journal (the applied log that rebuild replays) ------------------------

    def journal(self, kind: str, ref: str, body: dict[str, Any], *, now_ms: int) -> int:
        self.conn.execute(
            "INSERT INTO journal (kind, ref, body, at_ms) VALUES (?, ?, ?, ?)",
            (kind, ref, json.dumps(body, sort_keys=True, separators=(",", ":")), now_ms),
        )
        return self.conn.last_insert_rowid()

    def amend_journal(self, seq: int, changes: dict[str, Any]) -> None:
        """Add fields to a step's body (a step that ended early says where it stopped)."""
        row = self._one("SELECT body FROM journal WHERE seq = ?", (seq,))
        if row is None:
            raise KeyError(f"no journal step {seq}")
        body = {**json.loads(row[0]), **changes}
        self.conn.execute(
            "UPDATE journal SET body = ? WHERE seq = ?",
            (json.dumps(body, sort_keys=True, separators=(",", ":")), seq),
        )

    def journal_entries(self) -> Iterator[tuple[int, str, str, dict[str, Any], int]]:
        for seq, kind, ref, body, at_ms in self._all(
            "SELECT seq, kind, ref, body, at_ms FROM journal ORDER BY seq"
        ):
            yield int(seq), str(kind), str(ref), json.loads(body), int(at_ms)

    # ---- pulses -------------------------------------------------------------------

    def pulse_seen(self, pulse_id: str) -> bool:
        return self._one("SELECT 1 FROM applied_pulses WHERE pulse_id = ?", (pulse_id,)) is not None

    def record_pulse(
        self,
        pulse_id: str,
        *,
        status: str,
        origin_peer: str,
        reason: str | None,
        changed: int,
        journal_seq: int | None,
        now_ms: int,
    ) -> None:
        self.conn.execute(
            "INSERT INTO applied_pulses "
            "(pulse_id, applied_at, journal_seq, origin_peer, status, reason, changed) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (pulse_id, iso_from_ms(now_ms), journal_seq, origin_peer, status, reason, changed),
        )

    # ---- attributions and outcomes ---------------------------------------------

    def record_attribution(
        self,
        decision_hash: str,
        chunk_hashes: Sequence[str],
        *,
        peer: str,
        hlc: int,
        ts_ms: int,
        decision_text: str,
        ranked: Sequence[str] | None = None,
        query_text: str | None = None,
        query_embedding: npt.NDArray[np.float32] | None = None,
    ) -> bool:
        """False if the decision was already recorded (attributions are idempotent).

        `ranked` (best first), the query and its embedding are known only to the
        peer that recalled; they let an outcome credit by rank and teach keys.
        """
        row = self._one(
            "INSERT INTO attributions (decision_hash, chunk_hashes_json, peer, ts, hlc, "
            "decision_text, ranked_json, query_text, query_embedding) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (decision_hash) DO NOTHING RETURNING 1",
            (
                decision_hash,
                json.dumps(sorted(chunk_hashes)),
                peer,
                iso_from_ms(ts_ms),
                hlc,
                decision_text,
                None if ranked is None else json.dumps(list(ranked)),
                query_text,
                None if query_embedding is None else vector_to_blob(query_embedding),
            ),
        )
        return row is not None

    def attribution(self, decision_hash: str) -> AttributionRecord | None:
        row = self._one(
            "SELECT chunk_hashes_json, peer, hlc, decision_text, ranked_json, query_text, "
            "query_embedding FROM attributions WHERE decision_hash = ?",
            (decision_hash,),
        )
        if row is None:
            return None
        chunks = list(json.loads(row[0]))
        return AttributionRecord(
            chunk_hashes=chunks,
            peer=str(row[1]),
            hlc=int(row[2]),
            decision_text=str(row[3]),
            ranked=chunks if row[4] is None else list(json.loads(row[4])),
            query_text=row[5],
            query_embedding=None if row[6] is None else blob_to_vector(bytes(row[6])),
        )

    def successful_decisions(
        self, peer: str, *, since_ms: int, limit: int
    ) -> list[tuple[str, list[str], list[str], str, npt.NDArray[np.float32]]]:
        """Recent decisions of `peer` with a positive outcome, newest first:
        (decision hash, chunks best first, cited chunks, query, query embedding)."""
        rows = self._all(
            "SELECT a.decision_hash, coalesce(a.ranked_json, a.chunk_hashes_json), o.cited_json, "
            "a.query_text, a.query_embedding FROM outcomes o "
            "JOIN attributions a ON a.decision_hash = o.decision_hash "
            "WHERE o.reward > 0 AND a.peer = ? AND a.query_embedding IS NOT NULL AND a.ts >= ? "
            "GROUP BY a.decision_hash ORDER BY max(o.hlc) DESC LIMIT ?",
            (peer, iso_from_ms(since_ms), limit),
        )
        return [
            (
                str(d),
                list(json.loads(r)),
                list(json.loads(c)),
                str(q or ""),
                blob_to_vector(bytes(e)),
            )
            for d, r, c, q, e in rows
        ]

    def record_outcome(
        self,
        outcome_id: str,
        *,
        decision_hash: str,
        reward: float,
        observer_peer: str,
        hlc: int,
        reason: str,
        expires_ms: int,
        cited: Sequence[str] = (),
    ) -> bool:
        row = self._one(
            "INSERT INTO outcomes (outcome_id, decision_hash, reward, observer_peer, hlc, reason, "
            "status, expires_ms, cited_json) VALUES (?, ?, ?, ?, ?, ?, 'waiting', ?, ?) "
            "ON CONFLICT (outcome_id) DO NOTHING RETURNING 1",
            (
                outcome_id,
                decision_hash,
                reward,
                observer_peer,
                hlc,
                reason,
                expires_ms,
                json.dumps(list(cited)),
            ),
        )
        return row is not None

    def waiting_outcomes(self) -> list[OutcomeRecord]:
        """Outcomes not yet converted, oldest first."""
        rows = self._all(
            "SELECT outcome_id, decision_hash, reward, observer_peer, hlc, reason, expires_ms, "
            "cited_json FROM outcomes WHERE status = 'waiting' ORDER BY hlc, outcome_id"
        )
        return [
            OutcomeRecord(
                str(a), str(b), float(c), str(d), int(e), str(f), int(g), list(json.loads(h))
            )
            for a, b, c, d, e, f, g, h in rows
        ]

    def settle_outcome(self, outcome_id: str, status: str, pulses: int = 0) -> None:
        self.conn.execute(
            "UPDATE outcomes SET status = ?, pulses = ? WHERE outcome_id = ?",
            (status, pulses, outcome_id),
        )

    # ---- log state: segments read, entries seen, outbox, segments written -------

    def segment_applied(self, key: str) -> bool:
        return self._one("SELECT 1 FROM applied_segments WHERE key = ?", (key,)) is not None

    def record_segment(
        self, key: str, *, entries: int, rejected: int, skipped: int, now_ms: int
    ) -> None:
        self.conn.execute(
            "INSERT INTO applied_segments (key, applied_at, entries, rejected, skipped) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (key, iso_from_ms(now_ms), entries, rejected, skipped),
        )

    def entry_seen(self, entry_id: str) -> bool:
        return self._one("SELECT 1 FROM seen_entries WHERE entry_id = ?", (entry_id,)) is not None

    def record_entry(
        self, entry_id: str, *, kind: str, hlc: int, origin: str, status: str, reason: str | None
    ) -> None:
        self.conn.execute(
            "INSERT INTO seen_entries (entry_id, kind, hlc, origin, status, reason) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (entry_id) DO NOTHING",
            (entry_id, kind, hlc, origin, status, reason),
        )

    def outbox_add(
        self,
        entry_id: str,
        kind: str,
        hlc: int,
        body: dict[str, Any],
        *,
        now_ms: int,
        applied: bool = False,
        request_key: str | None = None,
    ) -> bool:
        """Queue one of this peer's entries. False if the same entry is already queued.

        `applied` says the entry's effect is already in this database (a local
        chunk's assert, say), so only publishing remains.
        """
        row = self._one(
            "INSERT INTO outbox (entry_id, kind, hlc, body, created_at, applied, request_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1",
            (
                entry_id,
                kind,
                hlc,
                json.dumps(body, sort_keys=True, separators=(",", ":")),
                iso_from_ms(now_ms),
                int(applied),
                request_key,
            ),
        )
        return row is not None

    def request_entry(self, request_key: str) -> str | None:
        """The entry id an earlier identical request queued, if any."""
        row = self._one("SELECT entry_id FROM outbox WHERE request_key = ?", (request_key,))
        return None if row is None else str(row[0])

    def outbox_unapplied(self) -> list[tuple[str, dict[str, Any]]]:
        rows = self._all(
            "SELECT entry_id, body FROM outbox WHERE applied = 0 ORDER BY hlc, entry_id"
        )
        return [(str(r[0]), json.loads(r[1])) for r in rows]

    def outbox_mark_applied(self, entry_ids: Sequence[str]) -> None:
        self.conn.executemany(
            "UPDATE outbox SET applied = 1 WHERE entry_id = ?", [(e,) for e in entry_ids]
        )

    def outbox_unpublished(self, limit: int) -> list[tuple[str, dict[str, Any]]]:
        rows = self._all(
            "SELECT entry_id, body FROM outbox WHERE segment_seq IS NULL AND applied = 1 "
            "ORDER BY hlc, entry_id LIMIT ?",
            (limit,),
        )
        return [(str(r[0]), json.loads(r[1])) for r in rows]

    def prepare_segment(
        self, seq: int, key: str, data: bytes, hlc: int, entry_ids: Sequence[str], *, now_ms: int
    ) -> None:
        self.conn.execute(
            "INSERT INTO segments_out (seq, key, data, hlc, status, created_at) "
            "VALUES (?, ?, ?, ?, 'prepared', ?)",
            (seq, key, data, hlc, iso_from_ms(now_ms)),
        )
        self.conn.executemany(
            "UPDATE outbox SET segment_seq = ? WHERE entry_id = ?", [(seq, e) for e in entry_ids]
        )

    def prepared_segments(self) -> list[tuple[int, str, bytes, int]]:
        rows = self._all(
            "SELECT seq, key, data, hlc FROM segments_out WHERE status = 'prepared' ORDER BY seq"
        )
        return [(int(r[0]), str(r[1]), bytes(r[2]), int(r[3])) for r in rows]

    def segment_written(self, key: str) -> bool:
        """Whether this store prepared the segment `key` (for publishing under its name)."""
        return self._one("SELECT 1 FROM segments_out WHERE key = ?", (key,)) is not None

    def finish_segment(self, seq: int, status: str) -> None:
        self.conn.execute("UPDATE segments_out SET status = ? WHERE seq = ?", (status, seq))

    # ---- cycles and status ---------------------------------------------------------

    def start_cycle(self, now_ms: int) -> int:
        self.conn.execute(
            "INSERT INTO cycles (started_at, status) VALUES (?, 'running')", (iso_from_ms(now_ms),)
        )
        return self.conn.last_insert_rowid()

    def finish_cycle(
        self, cycle_id: int, *, status: str, phases: dict[str, Any], now_ms: int
    ) -> None:
        self.conn.execute(
            "UPDATE cycles SET finished_at = ?, status = ?, phases_json = ? WHERE id = ?",
            (iso_from_ms(now_ms), status, json.dumps(phases, sort_keys=True), cycle_id),
        )

    def abandon_running_cycles(self) -> int:
        """Cycles left 'running' by a process that died: mark them 'interrupted'."""
        rows = self._all(
            "UPDATE cycles SET status = 'interrupted' WHERE status = 'running' RETURNING id"
        )
        return len(rows)

    def last_cycle(self) -> dict[str, Any] | None:
        row = self._one(
            "SELECT id, started_at, finished_at, status, phases_json FROM cycles "
            "ORDER BY id DESC LIMIT 1"
        )
        if row is None:
            return None
        return {
            "id": int(row[0]),
            "started_at": row[1],
            "finished_at": row[2],
            "status": row[3],
            "phases": json.loads(row[4]),
        }

    def live_and_tombstoned(self) -> tuple[int, int]:
        """The two counts the daemon reports after every cycle, cheaply."""
        # Not tombstoned, less the cold tier: each count read from an index alone (asking
        # for both conditions at once reads every live row, 0.13 s at 100k chunks).
        row = self._one(
            "SELECT (SELECT count(*) FROM observations WHERE deleted_at IS NULL) "
            "- (SELECT count(*) FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL), "
            "(SELECT count(*) FROM tombstones)"
        )
        return int(row[0]), int(row[1])

    def counts(self) -> dict[str, int]:
        def one(sql: str) -> int:
            row = self._one(sql)
            return int(row[0]) if row else 0

        return {
            "observations": one(
                f"SELECT count(*) FROM observations WHERE type != '{EFFICACY_TYPE}'"
            ),
            # Each count below is read from an index alone: asking for live and not cold
            # at once, or for pending, read every row (a quarter second each at 100k).
            "live": one(
                "SELECT (SELECT count(*) FROM observations "
                f"WHERE deleted_at IS NULL AND type != '{EFFICACY_TYPE}') - (SELECT count(*) "
                "FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL "
                f"AND type != '{EFFICACY_TYPE}')"
            ),
            "cold": one(
                "SELECT count(*) FROM observations WHERE deleted_at IS NULL AND cold_at IS NOT NULL"
            ),
            "learned_keys": one("SELECT count(*) FROM learned_keys"),
            "pinned": one(
                "SELECT count(*) FROM observations WHERE deleted_at IS NULL AND pin_floor > 0"
            ),
            "tombstones": one("SELECT count(*) FROM tombstones"),
            "pulses_applied": one("SELECT count(*) FROM applied_pulses WHERE status = 'applied'"),
            "pulses_rejected": one(
                "SELECT count(*) FROM applied_pulses WHERE status IN ('rejected', 'skipped')"
            ),
            "pulses_expired": one("SELECT count(*) FROM applied_pulses WHERE status = 'expired'"),
            "attributions": one("SELECT count(*) FROM attributions"),
            "outcomes_waiting": one("SELECT count(*) FROM outcomes WHERE status = 'waiting'"),
            "segments_applied": one("SELECT count(*) FROM applied_segments"),
            "outbox_unpublished": one("SELECT count(*) FROM outbox WHERE segment_seq IS NULL"),
            "pending_admission": one(
                "SELECT count(*) FROM observations INDEXED BY observations_pending "
                "WHERE admitted_seq IS NULL AND deleted_at IS NULL"
            ),
        }

    def tombstones_by_reason(self) -> dict[str, int]:
        return {
            str(reason): int(n)
            for reason, n in self._all(
                "SELECT coalesce(reason, ''), count(*) FROM tombstones GROUP BY 1 ORDER BY 2 DESC"
            )
        }

    def live_saliences(self) -> npt.NDArray[np.float64]:
        """The salience of every chunk neither tombstoned nor cold, in rowid order: read from
        observations_live and the cold tier's index, not from every row (0.4 s at 100k)."""
        rows = self._all(
            "SELECT id, salience FROM observations INDEXED BY observations_live "
            "WHERE deleted_at IS NULL"
        )
        cold = [
            r[0]
            for r in self._all(
                "SELECT id FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL"
            )
        ]
        table = np.array(rows, dtype=np.float64).reshape(len(rows), 2)
        table = table[~np.isin(table[:, 0], np.array(cold, dtype=np.float64))]
        ordered: npt.NDArray[np.float64] = table[np.argsort(table[:, 0], kind="stable"), 1]
        return ordered

    def change_stamp(self) -> str:
        """Changes whenever chunks are added, embedded, tombstoned, swept or revived: the
        index's freshness mark.

        Counting the rows scans the table (tens of ms at 100k chunks), so the value is
        kept until a commit by another connection (`PRAGMA data_version`) or a change
        through this one (`total_changes`) may have moved it.
        """
        if self.conn.txn_state("main") == apsw.SQLITE_TXN_WRITE:
            # Changes of an open write transaction may yet be rolled back: count them afresh.
            return self._count_stamp()
        version = (int(self._one("PRAGMA data_version")[0]), self.conn.total_changes())
        if self._stamp_memo is not None and self._stamp_memo[0] == version:
            return self._stamp_memo[1]
        stamp = self._count_stamp()
        self._stamp_memo = (version, stamp)
        return stamp

    def _count_stamp(self) -> str:
        # Each count is answered from an index (the table's rows carry embeddings, and a
        # column stored after one costs a read of its overflow pages): max(id), admitted
        # chunks as all rows less those pending, tombstoned rows, the tier epoch.
        row = self._one(
            "SELECT coalesce((SELECT max(id) FROM observations), 0), "
            "(SELECT count(*) FROM observations) "
            "- (SELECT count(*) FROM observations WHERE admitted_seq IS NULL), "
            "(SELECT count(*) FROM observations WHERE deleted_at IS NOT NULL), "
            "(SELECT coalesce(max(value), '0') FROM meta WHERE key = ?)",
            (TIER_EPOCH_META_KEY,),
        )
        return "-".join(str(v) for v in row) if row else "0-0-0-0"


def embedding_text(title: str, content: str) -> str:
    """What is embedded for a chunk: its title (if any) and its content."""
    return f"{title}\n{content}" if title else content


def _observation(row: Sequence[Any]) -> Observation:
    return Observation(
        rowid=int(row[0]),
        content_hash=str(row[1]),
        title=str(row[2]),
        content=str(row[3]),
        type=str(row[4]),
        kind=str(row[5]),
        topic_key=row[6],
        project=row[7],
        salience=float(row[8]),
        pin_floor=float(row[9]),
        deleted_at=row[10],
        access_count=int(row[11]),
        deletion_policy=str(row[12]),
        created_at=str(row[13]),
        cold_at=row[14],
        cold_reason=row[15],
        importance=int(row[16]),
        confidence=float(row[17]),
        stability=float(row[18]),
    )


# ---- what a hash or a prefix of one names ----------------------------------------------------

#: Hashes a reference may name, by what they are: chunks stored or tombstoned here (not the
#: daemon's own efficacy records), and decisions whose attribution is recorded here. Each
#: selects the hashes within [?1, ?2) (a prefix and the prefix followed by "g": hex digits
#: sort below it, so the range is a seek on the indexed column), at most ?3 of them.
_HASHES_WITH_PREFIX: Final = {
    "chunk": "SELECT content_hash FROM observations WHERE content_hash >= ?1 "
    f"AND content_hash < ?2 AND type != '{EFFICACY_TYPE}' "
    "UNION SELECT hash FROM tombstones WHERE hash >= ?1 AND hash < ?2 ORDER BY 1 LIMIT ?3",
    "decision": "SELECT decision_hash FROM attributions WHERE decision_hash >= ?1 "
    "AND decision_hash < ?2 ORDER BY 1 LIMIT ?3",
}


def hashes_with_prefix(db: Database, what: str, prefix: str, *, limit: int) -> list[str]:
    """The known `what` ("chunk" or "decision") hashes starting with `prefix`, in order, at
    most `limit`; a whole hash finds itself alone, or nothing."""
    return [
        str(r[0]) for r in db.fetch_all(_HASHES_WITH_PREFIX[what], (prefix, prefix + "g", limit))
    ]


def outcomes_of_decision(db: Database, decision_hash: str) -> list[tuple[str, float, str]]:
    """Outcomes reported for a decision, oldest first, as (entry id, reward, reason): those
    applied here (from any peer) and this peer's own still waiting in the outbox."""
    rows = db.fetch_all(
        "SELECT hlc, outcome_id, reward, reason FROM outcomes WHERE decision_hash = ?1 "
        "UNION ALL SELECT hlc, entry_id, json_extract(body, '$.reward'), "
        "json_extract(body, '$.reason') FROM outbox WHERE kind = 'outcome' "
        "AND json_extract(body, '$.decision_hash') = ?1 ORDER BY 1, 2",
        (decision_hash,),
    )
    # An outcome of this peer's, once applied, is in both tables under the same id.
    found = {str(entry): (float(reward), str(reason)) for _, entry, reward, reason in rows}
    return [(entry, reward, reason) for entry, (reward, reason) in found.items()]
