"""Open one peer's parts: database, embedder, index, salience cache, clock, log."""

from __future__ import annotations

import fcntl
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO

from dreamcycle.daemon.clock import Clock, clock_from_config
from dreamcycle.daemon.config import Config
from dreamcycle.daemon.defaults import STARTUP_PROBE_DEADLINE_S
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.observe.backend_health import BackendHealth, ObservedBackend
from dreamcycle.daemon.observe.backend_probe import probed_backend
from dreamcycle.daemon.signing_keys import EntryGate, open_keys
from dreamcycle.pulses.vectors import Labels
from dreamcycle.store.database import Database
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.index import HnswIndex, IndexUnusable, Unusable, open_or_rebuild
from dreamcycle.store.salience import SalienceCache
from dreamcycle.store.sweep_words import KeptSweepRows
from dreamcycle.zeitgeist.backend import LogBackend
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.log import Zeitgeist
from dreamcycle.zeitgeist.retry import RetryPolicy

log = logging.getLogger("dreamcycle.runtime")

#: meta key holding the highest HLC this peer has issued or read.
HLC_META_KEY = "hlc_high"
#: meta key holding the identity of the index save this database last recorded: a sound
#: index file of another save (an older copy, another peer's) is then not taken for it.
INDEX_IDENTITY_META_KEY = "index_identity"
#: How warnings and `dreamcycle_derived_file_rebuilds_total` name the index files.
INDEX_FILE_LABEL = "index"
#: What a command reading the daemon's index warns about: damage. Lagging behind the
#: database is normal while the daemon runs, and it saves again at the end of a cycle.
_INDEX_DAMAGE = frozenset({Unusable.CORRUPT, Unusable.SIZE, Unusable.CHECKSUM})


class AlreadyRunning(RuntimeError):
    """Another daemon holds this data directory."""


class DataDirUnlockable(RuntimeError):
    """The data directory's lock file cannot be opened (a read-only mount, permissions)."""


def open_backend(config: Config, retry: RetryPolicy | None = None) -> LogBackend:
    """The configured zeitgeist backend (imported lazily: each pulls its own client library);
    `retry` replaces the networked backends' retry policy (shorter, for a diagnosis)."""
    zg = config.zeitgeist
    if zg.backend == "dir":
        from dreamcycle.zeitgeist.directory import DirectoryBackend

        return DirectoryBackend(config.zeitgeist_dir)
    if zg.backend == "s3":
        from dreamcycle.zeitgeist.s3 import S3Backend

        return S3Backend(
            bucket=zg.s3.bucket,
            prefix=zg.s3.prefix,
            endpoint_url=zg.s3.endpoint_url or None,
            region=zg.s3.region,
            retry=retry,
        )
    from dreamcycle.zeitgeist.redis_streams import RedisStreamsBackend

    return RedisStreamsBackend(url=zg.redis.url, prefix=zg.redis.prefix, retry=retry)


def persistent_clock(db: Database, wall_ms: Callable[[], int]) -> HybridLogicalClock:
    """An HLC that resumes above everything this peer issued before a restart."""
    clock = HybridLogicalClock(wall_ms)
    high = db.get_meta(HLC_META_KEY)
    if high is not None:
        clock.observe(int(high))
    return clock


def save_index(db: Database, index: HnswIndex) -> None:
    """Save `index` as reflecting the database now, and record the save's identity.

    The file is written first: a crash before the record leaves an identity the database
    does not know, so the file is rebuilt rather than trusted.
    """
    stamp = db.change_stamp()
    # An unchanged index is not written again: a save holds the GIL for a time that grows
    # with the index, and most cycles of an idle store change nothing the index holds.
    if index.is_saved_at(stamp) and db.get_meta(INDEX_IDENTITY_META_KEY) == index.identity:
        return
    identity = index.save(stamp)
    with db.transaction():
        db.set_meta(INDEX_IDENTITY_META_KEY, identity)


def _count_refused(reason: str, count: int) -> None:
    """What the zeitgeist refused to read (a segment or line beyond its limits, a key from
    the future, an untrusted snapshot), counted beside the entries refused."""
    metrics.ENTRIES_REJECTED.labels(reason).inc(count)


def _warn_unusable_index(unusable: IndexUnusable, *, rebuilt: bool) -> None:
    # A stale index is routine (commands wrote the database while the daemon was
    # stopped); only damage, a foreign file or a lost save deserves a warning.
    level = logging.INFO if unusable.kind is Unusable.STALE else logging.WARNING
    log.log(
        level,
        "derived file unusable; rebuilding it from the database"
        if rebuilt
        else "derived file unusable; searching stored vectors until the daemon rebuilds it",
        extra={
            "file": INDEX_FILE_LABEL,
            "reason": unusable.kind.value,
            "detail": unusable.reason,
            "path": str(unusable.path),
        },
    )


def issue_hlc(db: Database, wall_ms: Callable[[], int]) -> int:
    """One HLC value for a short-lived process (CLI), persisted so the next is higher.

    Call inside a transaction: the read-modify-write of meta is then atomic
    against the daemon and other CLIs.
    """
    clock = persistent_clock(db, wall_ms)
    value = clock.now()
    db.set_meta(HLC_META_KEY, str(value))
    return value


@dataclass(eq=False)
class Runtime:
    """Database, embedder and wall clock: what every command needs. Compared and hashed
    by identity: what recall keeps between calls is found by its runtime
    (daemon/recall/state.py)."""

    config: Config
    db: Database
    embedder: Embedder
    #: Every "now" of this process; injected so tests and benchmarks can simulate time.
    clock: Clock
    _lock_file: IO[str] | None = field(default=None, repr=False)

    @property
    def peer_id(self) -> str:
        return self.config.peer.id

    @classmethod
    def open(cls, config: Config, clock: Clock | None = None) -> Runtime:
        """`clock` overrides `[clock]` (tests pass a ManualClock)."""
        # Before anything is opened: a bad clock file then leaves nothing to close.
        clock = clock if clock is not None else clock_from_config(config)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        db = Database(config.database_path)
        embedder = Embedder(
            config.embedding.model,
            batch_size=config.embedding.batch_size,
            threads=config.embedding.threads or None,
        )
        return cls(config=config, db=db, embedder=embedder, clock=clock)

    def lock_data_dir(self) -> None:
        """One daemon per data directory: a second one is refused, not interleaved."""
        try:
            handle = open(self.config.lock_path, "a+", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            reason = exc.strerror or exc
            raise DataDirUnlockable(f"{self.config.lock_path} cannot be opened: {reason}") from exc
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            handle.close()
            raise AlreadyRunning(
                f"{self.config.data_dir} is in use by {holder}; one daemon per data directory"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}\n")
        handle.flush()
        self._lock_file = handle

    def open_index(
        self,
        progress: Callable[[int, int], None] | None = None,
        *,
        while_hashing: Callable[[], None] = lambda: None,
    ) -> tuple[HnswIndex, str | None]:
        """The saved index, or one rebuilt from stored embeddings when unusable or stale.

        Returns the index and why it was rebuilt (None when loaded as saved). A rebuild
        other than the first (no save recorded, no file) is warned about and counted.
        `while_hashing` runs while a saved file is hashed, after the database's live labels
        are read (other reads of the database overlap the hash there, not the load).
        """
        version = self.embedder.index_version
        recorded = self.db.get_meta(INDEX_IDENTITY_META_KEY)

        def live_labels() -> Labels:
            labels = self.db.indexed_labels(version)
            while_hashing()
            return labels

        def rebuilding(unusable: IndexUnusable) -> None:
            if recorded is None and unusable.kind is Unusable.MISSING:
                return
            _warn_unusable_index(unusable, rebuilt=True)
            metrics.DERIVED_FILE_REBUILDS.labels(INDEX_FILE_LABEL, unusable.kind.value).inc()

        index, reason = open_or_rebuild(
            self.config.index_path,
            self.embedder.dim,
            version,
            expected_stamp=self.db.change_stamp(),
            load_all=lambda: self.db.index_contents(version, self.embedder.dim),
            expected_identity=recorded or "",
            live_labels=live_labels,
            on_unusable=rebuilding,
            progress=progress,
            m=self.config.index.m,
            ef_construction=self.config.index.ef_construction,
            ef=self.config.index.ef,
        )
        if reason is None and not index.cold_count:
            # A file saved when the engine marked cold chunks deleted: unmarked into the
            # cold tier, so that it is searched through the same graph (saved next cycle).
            index.set_cold(self.db.indexed_cold_labels(version))
        if reason is not None:
            assert index.identity is not None, "open_or_rebuild saves what it rebuilds"
            with self.db.transaction():
                self.db.set_meta(INDEX_IDENTITY_META_KEY, index.identity)
            level = logging.INFO if index.live_count else logging.DEBUG  # a new store's is no news
            log.log(level, "index rebuilt", extra={"reason": reason, "live": index.live_count})
        return index, reason

    def saved_index(self, stamp: str) -> HnswIndex | None:
        """The daemon's saved index if it is sound and reflects the database at `stamp`;
        None when it does not (search the stored vectors instead: the daemon owns the file)."""
        version = self.embedder.index_version
        try:
            return HnswIndex.load(
                self.config.index_path,
                self.embedder.dim,
                version,
                ef=self.config.index.ef,
                expected_stamp=stamp,
                expected_identity=self.db.get_meta(INDEX_IDENTITY_META_KEY) or "",
                live_labels=lambda: self.db.indexed_labels(version),
            )
        except IndexUnusable as unusable:
            if unusable.kind in _INDEX_DAMAGE:
                _warn_unusable_index(unusable, rebuilt=False)
            return None

    def open_peer(self) -> Peer:
        """Everything a dream cycle needs: index, salience, clock, the shared log."""
        read: list[SalienceCache] = []
        # Salience is read while the index file is hashed: both run mostly without the GIL.
        index, reason = self.open_index(
            progress=_log_rebuild_progress,
            while_hashing=lambda: read.append(SalienceCache(self.db)),
        )
        salience = read[0] if read else SalienceCache(self.db)
        inner = open_backend(self.config)
        metrics.count_store_requests(inner)
        backend_health = BackendHealth(inner.name)
        # Refuse a store that would silently overwrite log entries before writing any; one
        # that does not answer at start-up is probed again before its first write.
        backend = probed_backend(
            ObservedBackend(inner, backend_health, self.clock.now_ms),
            lambda: ObservedBackend(
                open_backend(self.config, retry=RetryPolicy(deadline_s=STARTUP_PROBE_DEADLINE_S)),
                backend_health,
                self.clock.now_ms,
            ),
        )
        hlc = persistent_clock(self.db, self.clock.now_ms)
        signer, verifier = open_keys(self.config)
        zeitgeist = Zeitgeist(
            backend,
            self.peer_id,
            hlc,
            window_ms=int(self.config.zeitgeist.window_s * 1000),
            liveness_timeout_ms=int(self.config.zeitgeist.liveness_timeout_s * 1000),
            wall_ms=self.clock.now_ms,
            signer=signer,
            verifier=verifier,
            segment_limits=self.config.zeitgeist.segment_limits(),
            snapshot_limits=self.config.zeitgeist.snapshot_limits(),
            on_refused=_count_refused,
        )
        if self.config.zeitgeist.rollups:  # every peer's reads, whatever the number of peers
            zeitgeist.configure_rollups(wait_ms=self.config.rollup_wait_ms())
        return Peer(
            self,
            index,
            salience,
            zeitgeist,
            hlc,
            EntryGate(verifier),
            reason,
            backend_health,
        )

    def close(self) -> None:
        self.db.close()
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None


def _log_rebuild_progress(done: int, total: int) -> None:
    """A rebuild of a large index takes minutes: say how far it got."""
    log.info("rebuilding index", extra={"added": done, "total": total})


@dataclass
class Peer:
    """A runtime opened for dream cycles."""

    runtime: Runtime
    index: HnswIndex
    salience: SalienceCache
    zeitgeist: Zeitgeist
    #: The hybrid logical clock stamping log entries (wall time is `now_ms()`).
    clock: HybridLogicalClock
    #: Checks the signatures of remote entries before they are applied.
    entry_gate: EntryGate
    index_rebuild_reason: str | None = None
    #: What the zeitgeist backend's last calls said (reachable, last poll and publish).
    backend_health: BackendHealth | None = None
    #: Read the newest snapshot before polling: at start-up and after the log was unreachable.
    snapshot_check_due: bool = True
    #: Held by whoever commits chunks and then adds them to the index (the API's `save`),
    #: and while the index is saved or replaced: a saved index's stamp then never names
    #: a commit whose chunks it lacks.
    index_writes: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: When this process last wrote the index (None: not yet).
    index_saved_ms: int | None = None
    #: The sweep's rows, kept from one sweep to the next (store/sweep_words.py).
    sweep_rows: KeptSweepRows = field(default_factory=KeptSweepRows, repr=False)
    #: True while a cycle's phases run (read by the API from its own threads: a running
    #: cycle takes a core that a request could otherwise use).
    cycling: bool = False

    @property
    def config(self) -> Config:
        return self.runtime.config

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def embedder(self) -> Embedder:
        return self.runtime.embedder

    @property
    def peer_id(self) -> str:
        return self.runtime.peer_id

    def now_ms(self) -> int:
        """The runtime's wall clock, which the phases read instead of the system time."""
        return self.runtime.clock.now_ms()

    def save_index(self) -> None:
        with self.index_writes:
            save_index(self.db, self.index)
        self.index_saved_ms = self.now_ms()

    def save_index_when_due(self, now_ms: int) -> bool:
        """Write the index if `index.save_interval_s` passed since this process last did
        (at once the first time); whether it was due. An unchanged index is not written."""
        last = self.index_saved_ms
        if last is not None and now_ms - last < self.config.index.save_interval_s * 1000:
            return False
        self.save_index()
        return True

    def reload(self) -> None:
        """Drop in-memory state that a failed phase may have left ahead of the database."""
        self.salience.reload()
        with self.index_writes:
            self.index, self.index_rebuild_reason = self.runtime.open_index()

    def close(self) -> None:
        self.zeitgeist.backend.close()
