"""The eight phases of one dream cycle, in order (ARCHITECTURE.md: one dream cycle).

scan -> classify -> interleave -> reconsolidate -> salience_pulse_propagate ->
downscale -> percentile_sweep -> promote

Each phase is a blocking function of (runtime, state) that runs in a worker
thread and commits its own transaction. Every applied entry is recorded in the
same transaction as its effect, and a segment is marked applied only once all
its entries are, so a crash between any two statements loses nothing and
applies nothing twice: the next cycle re-reads what was not recorded.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from dreamcycle.daemon import accounted, audit, authority, efficacy, hostile, metrics
from dreamcycle.daemon.admission import (
    admission_vectors,
    chunk_journal,
    persist_clock,
    record_admission,
)
from dreamcycle.daemon.confidence import HalfLives
from dreamcycle.daemon.defaults import (
    EMBEDDING_MATCH_MIN_COSINE,
    FORGED_CLAIMS_PER_PUBLISH,
    MAX_ENTRIES_PER_SEGMENT,
    PULSE_BUDGET_LOOKBACK_S,
    PULSE_BUDGET_WINDOW_S,
)
from dreamcycle.daemon.forgetting import RETENTION_REASON, expire_cold, revive, revive_reingested
from dreamcycle.daemon.forgetting import sweep as run_sweep
from dreamcycle.daemon.hlc_recovery import recover_hlc
from dreamcycle.daemon.keys import count_rejection
from dreamcycle.daemon.learning import convert_outcomes, teach_key
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.budget import admit_within_budget, cost_units
from dreamcycle.pulses.outcome import Attribution, Outcome
from dreamcycle.pulses.propagate import UpdateRule, propagate
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse
from dreamcycle.pulses.sweep import downscale
from dreamcycle.store import budget, tiers
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.hashing import content_hash
from dreamcycle.store.salience import SalienceCache
from dreamcycle.store.timefmt import ms_from_iso
from dreamcycle.zeitgeist.backend import BackendError
from dreamcycle.zeitgeist.entries import (
    AssertEntry,
    AttributionEntry,
    CorruptSegment,
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    RetrievalKeyEntry,
    SupersedeEntry,
    TombstoneEntry,
    decode_entry,
    decode_segment,
    entry_order_key,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.keys import claim_key, parse_segment_key, parse_snapshot_key
from dreamcycle.zeitgeist.log import ClaimTaken, FencedOut, Heartbeat, PreparedSegment
from dreamcycle.zeitgeist.signing import Rejection, Verdict

log = logging.getLogger("dreamcycle.cycle")

PHASES: Final = (
    "scan",
    "classify",
    "interleave",
    "reconsolidate",
    "salience_pulse_propagate",
    "downscale",
    "percentile_sweep",
    "promote",
)

CURSOR_META_KEY: Final = "cursor_hlc"
#: Pulses applied per transaction: other writers wait at most this long for the lock.
PULSES_PER_TRANSACTION: Final = 500
#: Chunks decayed per transaction (tens of milliseconds at most for a waiting writer).
DOWNSCALE_ROWS_PER_TRANSACTION: Final = 2000
#: Copies of a late segment written in one cycle at most (a slow store gets another cycle).
MAX_REPUBLISH: Final = 2
PUBLISH_SEQ_META_KEY: Final = "publish_seq"
LAST_SWEEP_META_KEY: Final = "last_sweep_ms"
LAST_COMPACTION_META_KEY: Final = "last_compaction_ms"
SUPERSEDED_REASON: Final = "superseded"
BUDGET_WINDOW_MS: Final = int(PULSE_BUDGET_WINDOW_S * 1000)
BUDGET_LOOKBACK_MS: Final = int(PULSE_BUDGET_LOOKBACK_S * 1000)


class FatalCycleError(RuntimeError):
    """The daemon must stop (another process owns this peer id, say)."""


@dataclass
class FetchedSegment:
    key: str
    entries: list[Entry]
    rejected: int
    skipped: int


@dataclass
class CycleState:
    now_ms: int
    segments: list[FetchedSegment] = field(default_factory=list)
    local: list[Entry] = field(default_factory=list)
    ordered: list[Entry] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # entry id -> reason
    own_keys: list[str] = field(default_factory=list)  # this peer's segments, listed
    seal_problems: dict[str, Verdict] = field(default_factory=dict)  # segment key -> why
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: True once SIGTERM / SIGINT asked the daemon to stop (read from the phase's thread):
    #: long phases return between batches, and what they did not commit waits for the
    #: next start.
    stop_requested: Callable[[], bool] = field(default=lambda: False, repr=False)
    #: The time decay and the sweep measure against (daemon/accounted.py), set once.
    accounted_ms: int | None = None


PhaseFn = Callable[[Peer, CycleState], dict[str, Any]]


# ---- scan -----------------------------------------------------------------------------


def scan(peer: Peer, st: CycleState) -> dict[str, Any]:
    """New log segments (after the cursor, inside the window) and local unapplied entries."""
    zg, db = peer.zeitgeist, peer.db
    fetched = rejected_lines = 0
    # Before anything is stamped this cycle: a wall clock back from a jump ahead.
    recover_hlc(peer, st.now_ms)
    try:
        if peer.snapshot_check_due:
            _read_snapshot(peer, st)
        keys = zg.poll(_cursor(peer), db.segment_applied)
    except BackendError as exc:
        # The log is unreachable: carry on with local work; read it again next cycle.
        log.warning("zeitgeist unreachable; cycle runs on local entries", extra={"error": str(exc)})
        peer.snapshot_check_due = True
        keys = []
    own = [k for k in keys if parse_segment_key(k).peer_id == peer.peer_id]
    own_set = set(own)
    for key in own:
        if not db.segment_written(key):
            # Never read (no peer applies its own segments from the log), but someone who
            # can write the bucket is publishing under this peer's name.
            count_rejection(Rejection.NOT_WRITTEN_HERE)
            log.warning("segment under this peer's name not written here", extra={"key": key})
    if own:
        with db.transaction():
            for key in own:
                db.record_segment(key, entries=0, rejected=0, skipped=0, now_ms=st.now_ms)
    foreign = [k for k in keys if k not in own_set]
    waiting = foreign[peer.config.cycle.max_segments :]
    for index, key in enumerate(foreign[: peer.config.cycle.max_segments]):
        try:
            decoded = zg.fetch(key)
        except CorruptSegment as exc:
            log.error("corrupt segment skipped", extra={"key": key, "error": str(exc)})
            with db.transaction():
                db.record_segment(key, entries=0, rejected=1, skipped=0, now_ms=st.now_ms)
            continue
        except KeyError:
            # Compacted away between LIST and GET: its entries are in the newest snapshot.
            peer.snapshot_check_due = True
            continue
        except BackendError as exc:
            log.warning("zeitgeist unreachable mid-scan", extra={"key": key, "error": str(exc)})
            peer.snapshot_check_due = True
            waiting = foreign[index:]
            break
        # Rejected lines were counted and logged, once per segment, by fetch.
        seal_problem = zg.seal_problem(key, decoded)
        if seal_problem is not None:
            st.seal_problems[key] = seal_problem
        st.segments.append(
            FetchedSegment(
                key, decoded.entries, len(decoded.rejected), sum(decoded.skipped.values())
            )
        )
        fetched += 1
        rejected_lines += len(decoded.rejected)
    # Own segments move the cursor too, but never past a foreign one still waiting.
    limit = _key_hlc(waiting[0]) if waiting else None
    st.own_keys = [k for k in own if limit is None or _key_hlc(k) < limit]
    for _entry_id, body in db.outbox_unapplied():
        st.local.append(decode_entry(body))
    new_chunks = peer.salience.refresh()
    return {
        "listed": len(keys),
        "fetched": fetched,
        "rejected_lines": rejected_lines,
        # Entries of unknown versions or kinds: skipped, counted, never fatal.
        "skipped_entries": sum(segment.skipped for segment in st.segments),
        "local": len(st.local),
        "new_chunks": new_chunks,
    }


def _read_snapshot(peer: Peer, st: CycleState) -> None:
    """Fold in the newest snapshot if not yet applied (first start, or back from an absence
    long enough that segments this peer never read may have been compacted away)."""
    snapshot = peer.zeitgeist.latest_snapshot()
    peer.snapshot_check_due = False
    if snapshot is None or peer.db.segment_applied(snapshot.key):
        return
    # Entries already applied are skipped by id in interleave; the rest are new here.
    st.segments.append(FetchedSegment(snapshot.key, list(snapshot.entries), 0, 0))


# ---- classify -------------------------------------------------------------------------


def classify(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Check signatures and pulses, embed new local chunks in batches, queue their asserts."""
    st.rejected.update(
        peer.entry_gate.screen(st.segments, st.seal_problems, (e.id for e in st.local))
    )
    for entry in _all_entries(st):
        if entry.id in st.rejected:
            continue
        if isinstance(entry, PulseEntry):
            reason = _pulse_problem(peer, entry.pulse)
            if reason is not None:
                st.rejected[entry.id] = reason
    admitted = _admit_pending(peer, st)
    return {"rejected_pulses": len(st.rejected), "admitted": admitted}


def _pulse_problem(peer: Peer, pulse: SalientPulse) -> str | None:
    try:
        pulse.validate()
    except InvalidPulse as exc:
        return f"invalid: {exc}"
    if pulse.seed_embedding.shape[0] != peer.embedder.dim:
        return f"dimension {pulse.seed_embedding.shape[0]} != local {peer.embedder.dim}"
    if pulse.index_version != peer.embedder.index_version:
        return f"index_version {pulse.index_version} != local {peer.embedder.index_version}"
    return None


def _admit_pending(peer: Peer, st: CycleState) -> int:
    """Embed (if `ingest` did not already) and index new chunks; queue asserts for local ones."""
    db = peer.db
    pending = db.pending_admission(peer.config.cycle.max_embed)
    # One embedding batch per transaction: a stop request waits for one batch, not all.
    step = peer.config.embedding.batch_size
    admitted = 0
    for start in range(0, len(pending), step):
        if st.stop_requested():
            break
        batch = pending[start : start + step]
        vectors, fresh = admission_vectors(peer.embedder, batch)
        with db.transaction():
            record_admission(peer, db, batch, vectors, fresh, st.now_ms)
        # After the commit: the index is derived state, and its stamp tells when it lags.
        peer.index.add(np.array([c.rowid for c in batch], dtype=np.int64), vectors)
        admitted += len(batch)
    if admitted:
        peer.salience.refresh()
    return admitted


# ---- interleave -----------------------------------------------------------------------


def interleave(peer: Peer, st: CycleState) -> dict[str, Any]:
    """One deterministic order for remote and local entries: (HLC, origin peer, id)."""
    seen: set[str] = set()
    merged: list[Entry] = []
    duplicates = 0
    horizon = hlc_from_ms(peer.now_ms() + peer.zeitgeist.max_future_ms)
    local_ids = {e.id for e in st.local}
    for entry in _all_entries(st):
        if entry.id in seen or peer.db.entry_seen(entry.id):
            duplicates += 1
            continue
        seen.add(entry.id)
        merged.append(entry)
        if entry.hlc > horizon:
            # Observing it would drag this peer's clock, and so its keys, into the future.
            # This host's own entries still apply: its own clock stamped them while the wall
            # clock was ahead (daemon/hlc_recovery.py); only other peers' are refused.
            if entry.id not in local_ids:
                st.rejected[entry.id] = f"hlc {entry.hlc:016x} is more than the allowed skew ahead"
            continue
        peer.clock.observe(entry.hlc)
    merged.sort(key=entry_order_key)
    st.ordered = merged
    return {"entries": len(merged), "duplicates": duplicates}


# ---- reconsolidate --------------------------------------------------------------------


def reconsolidate(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Apply assert / supersede / reconsolidate / tombstone / attribution / outcome entries."""
    db = peer.db
    counts: dict[str, int] = {}
    hidden: list[int] = []
    adopted: list[tuple[int, np.ndarray[Any, Any]]] = []
    local_ids = {e.id for e in st.local}
    # Outside the transaction: embedding is slow, and writers wait on the lock.
    expected = _embed_adoptable(peer, st)
    with db.transaction():
        for entry in st.ordered:
            if isinstance(entry, PulseEntry):
                continue
            status, reason = _isolated(
                peer,
                entry,
                # Judged against the store as the entries before it left it.
                st.rejected.get(entry.id)
                or authority.refusal(peer, entry, local=entry.id in local_ids),
                functools.partial(_apply_structural, peer, st, entry, hidden, adopted, expected),
                (hidden, adopted),
            )
            _record(db, entry, status, reason)
            counts[f"{entry.KIND}:{status}"] = counts.get(f"{entry.KIND}:{status}", 0) + 1
        db.outbox_mark_applied([e.id for e in st.local if not isinstance(e, PulseEntry)])
        peer.salience.flush()
    index = peer.index
    if adopted:
        index.add(
            np.array([r for r, _ in adopted], dtype=np.int64), np.stack([v for _, v in adopted])
        )
    if hidden:
        index.mark_deleted(np.array(hidden, dtype=np.int64))
    return counts


Outcome_ = tuple[str, str | None]


def _isolated(
    peer: Peer,
    entry: Entry,
    rejected: str | None,
    apply: Callable[[], Outcome_],
    side_effects: tuple[list[Any], ...] = (),
) -> Outcome_:
    """Apply one entry in a savepoint; a failure rejects that entry only, with its reason.

    A bad entry from any peer must not stall the cycle: rolled back and recorded as
    rejected, it is never retried, and the rest of its segment still applies.
    """
    if rejected is not None:
        return "rejected", rejected
    marks = [len(items) for items in side_effects]
    try:
        with peer.db.transaction(), peer.salience.atomic():
            return apply()
    except Exception as exc:
        for items, mark in zip(side_effects, marks, strict=True):
            del items[mark:]
        reason = f"{type(exc).__name__}: {exc}"
        log.warning(
            "entry rejected",
            extra={"entry": entry.id, "kind": entry.KIND, "origin": entry.origin, "reason": reason},
        )
        return "rejected", reason


def _record(db: Database, entry: Entry, status: str, reason: str | None) -> None:
    db.record_entry(
        entry.id, kind=entry.KIND, hlc=entry.hlc, origin=entry.origin, status=status, reason=reason
    )


def _apply_structural(
    peer: Peer,
    st: CycleState,
    entry: Entry,
    hidden: list[int],
    adopted: list[tuple[int, np.ndarray[Any, Any]]],
    expected: dict[str, np.ndarray[Any, Any]],
) -> tuple[str, str | None]:
    db, cache = peer.db, peer.salience
    if isinstance(entry, TombstoneEntry):
        journal_seq = db.journal(
            "tombstone", entry.content_hash, {"hash": entry.content_hash}, now_ms=st.now_ms
        )
        rowid = hide_chunk(
            db,
            cache,
            entry.content_hash,
            reason=entry.reason,
            origin_peer=entry.origin,
            now_ms=st.now_ms,
            journal_seq=journal_seq,
            collectable_after_ms=entry.collectable_after_ms,
        )
        if entry.forget_pulse is not None and not db.pulse_seen(entry.forget_pulse.pulse_id):
            db.record_pulse(
                entry.forget_pulse.pulse_id,
                status="applied",
                origin_peer=entry.origin,
                reason=entry.forget_pulse.reason,
                changed=0 if rowid is None else 1,
                journal_seq=journal_seq,
                now_ms=st.now_ms,
            )
        if rowid is not None:
            hidden.append(rowid)
        return "applied", None
    if isinstance(entry, SupersedeEntry):
        old = db.observation_by_hash(entry.old_hash)
        new = db.observation_by_hash(entry.new_hash)
        journal_seq = db.journal(
            "supersede",
            entry.old_hash,
            {
                "old": None if old is None else old.rowid,
                "new": None if new is None else new.rowid,
            },
            now_ms=st.now_ms,
        )
        if (
            old is not None
            and new is not None
            and old.deleted_at is None
            and new.deleted_at is None
        ):
            cache.set_salience(new.rowid, max(cache.salience(old.rowid), new.pin_floor))
        rowid = hide_chunk(
            db,
            cache,
            entry.old_hash,
            reason=SUPERSEDED_REASON,
            origin_peer=entry.origin,
            now_ms=st.now_ms,
            journal_seq=journal_seq,
        )
        if rowid is not None:
            hidden.append(rowid)
        return "applied", None
    if isinstance(entry, ReconsolidateEntry):
        return _reconsolidate_entry(peer, st, entry)
    if isinstance(entry, AssertEntry):
        return _adopt(peer, st, entry, adopted, expected.get(entry.id))
    if isinstance(entry, AttributionEntry):
        Attribution(
            decision_hash=entry.decision_hash,
            chunk_hashes=entry.chunk_hashes,
            peer=entry.origin,
            ts=entry.hlc,
            decision_text=entry.decision_text,
        ).validate()
        db.record_attribution(
            entry.decision_hash,
            entry.chunk_hashes,
            peer=entry.origin,
            hlc=entry.hlc,
            ts_ms=HybridLogicalClock.physical_ms(entry.hlc),
            decision_text=entry.decision_text,
        )
        return "applied", None
    if isinstance(entry, OutcomeEntry):
        Outcome(
            decision_hash=entry.decision_hash,
            reward=entry.reward,
            observer_peer=entry.observer_peer,
            ts=entry.hlc,
            reason=entry.reason,
            cited=entry.cited,
        ).validate()
        db.record_outcome(
            entry.id,
            decision_hash=entry.decision_hash,
            reward=entry.reward,
            observer_peer=entry.observer_peer,
            hlc=entry.hlc,
            reason=entry.reason,
            expires_ms=HybridLogicalClock.physical_ms(entry.hlc)
            + int(peer.config.pulses.outcome_wait_s * 1000),
            cited=entry.cited,
        )
        return "applied", None
    if isinstance(entry, RetrievalKeyEntry):
        return _apply_key(peer, st, entry)
    return "skipped", f"unhandled kind {entry.KIND}"


def _apply_key(peer: Peer, st: CycleState, entry: RetrievalKeyEntry) -> tuple[str, str | None]:
    """Another peer's credited outcome teaches (or unteaches) a chunk held here a key."""
    if entry.origin == peer.peer_id:
        return "applied", None  # learned when the outcome was converted here
    if not peer.config.learning.keys:
        return "skipped", "learning.keys is off"
    if entry.embedding.shape != (peer.embedder.dim,):
        return "rejected", f"embedding shape {entry.embedding.shape} != ({peer.embedder.dim},)"
    if not teach_key(peer, entry.chunk_hash, entry.embedding, entry.text, entry.amount, st.now_ms):
        return "skipped", "chunk not held here or key unchanged"
    return "applied", None


def _reconsolidate_entry(
    peer: Peer, st: CycleState, entry: ReconsolidateEntry
) -> tuple[str, str | None]:
    db = peer.db
    obs = db.observation_by_hash(entry.content_hash)
    if obs is None or obs.deleted_at is not None:
        return "skipped", "chunk not held here"
    changes = dict(entry.changes)
    if "pin_floor" in changes:
        floor = float(changes.pop("pin_floor") or 0.0)
        db.set_pin_floor(obs.rowid, floor, now_ms=st.now_ms)
        db.journal(
            "reconsolidate",
            obs.content_hash,
            {"rowid": obs.rowid, "pin_floor": floor},
            now_ms=st.now_ms,
        )
        cache = peer.salience
        cache.set_pin_floor(obs.rowid, floor)
        if cache.salience(obs.rowid) < floor:
            cache.set_salience(obs.rowid, floor)
    if changes:
        db.revise(obs.rowid, changes, now_ms=st.now_ms)
    return "applied", None


def _adoption_problem(peer: Peer, entry: AssertEntry) -> Outcome_ | None:
    """Why a remote assert is not adopted before its embedding is checked, if so."""
    if entry.origin == peer.peer_id:
        return "applied", None
    if not peer.config.zeitgeist.adopt_remote_chunks:
        return "skipped", "adopt_remote_chunks is off"
    if entry.index_version != peer.embedder.index_version:
        # Another model's vectors cannot be compared with this one's: not adopted at all.
        return "skipped", f"index_version {entry.index_version} != local"
    if content_hash(entry.content) != entry.content_hash:
        return "rejected", "content_hash does not match the content"
    if entry.embedding.shape != (peer.embedder.dim,):
        return "rejected", f"embedding shape {entry.embedding.shape} != ({peer.embedder.dim},)"
    if peer.db.is_tombstoned_hash(entry.content_hash):
        return "skipped", "tombstoned here"
    return None


def _embed_adoptable(peer: Peer, st: CycleState) -> dict[str, np.ndarray[Any, Any]]:
    """Entry id -> this peer's embedding of the content, for every remote assert that may be
    adopted: one batch per cycle. A chunk already held needs none (nothing is adopted)."""
    db = peer.db
    wanted = [
        entry
        for entry in st.ordered
        if isinstance(entry, AssertEntry)
        and entry.id not in st.rejected
        and _adoption_problem(peer, entry) is None
        and db.observation_by_hash(entry.content_hash) is None
    ]
    if not wanted:
        return {}
    started = time.perf_counter()
    vectors = peer.embedder.embed([entry.content for entry in wanted])
    metrics.PHASE_EVENTS.labels("reconsolidate", "asserts_embedded").inc(len(wanted))
    log.debug(
        "asserts embedded for comparison",
        extra={"asserts": len(wanted), "seconds": round(time.perf_counter() - started, 3)},
    )
    return {entry.id: vector for entry, vector in zip(wanted, vectors, strict=True)}


def embedding_mismatch(claimed: np.ndarray[Any, Any], local: np.ndarray[Any, Any]) -> str | None:
    """Why an assert's embedding is not its content's under this model, if so."""
    norm = float(np.linalg.norm(claimed)) * float(np.linalg.norm(local))
    cosine = float(np.dot(claimed, local)) / norm if norm > 0 and np.isfinite(norm) else 0.0
    if cosine >= EMBEDDING_MATCH_MIN_COSINE:
        return None
    return (
        f"{hostile.EMBEDDING_MISMATCH}: cosine {cosine:.4f} to this peer's embedding of "
        f"the content, below {EMBEDDING_MATCH_MIN_COSINE}"
    )


def _adopt(
    peer: Peer,
    st: CycleState,
    entry: AssertEntry,
    adopted: list[tuple[int, np.ndarray[Any, Any]]],
    local_vector: np.ndarray[Any, Any] | None,
) -> tuple[str, str | None]:
    """Take a remote chunk into the local store, when this peer is configured to and its
    embedding is what this peer's model makes of its content."""
    problem = _adoption_problem(peer, entry)
    if problem is not None:
        return problem
    db = peer.db
    if local_vector is None and db.observation_by_hash(entry.content_hash) is None:
        local_vector = peer.embedder.embed_one(entry.content)  # not foreseen by the batch
    if local_vector is not None:
        mismatch = embedding_mismatch(np.asarray(entry.embedding, dtype=np.float32), local_vector)
        if mismatch is not None:
            hostile.count(hostile.EMBEDDING_MISMATCH)
            return "rejected", mismatch
    added = db.add_observations(
        [
            NewObservation(
                content=entry.content,
                title=entry.title,
                type=entry.obs_type,
                kind=entry.chunk_kind,
                project=entry.project,
                topic_key=entry.topic_key,
                pin_floor=entry.pin_floor,
                origin_peer=entry.origin,
            )
        ],
        now_ms=st.now_ms,
    )[0]
    if not added.created:
        return "applied", "already held"
    vector = np.asarray(entry.embedding, dtype=np.float32)
    db.set_embeddings(
        [added.rowid], vector[None, :], model_id=entry.model_id, index_version=entry.index_version
    )
    chunk = db.pending_admission_of(added.rowid)
    held = db.observation(added.rowid)
    initial = held.salience if held is not None else 1.0
    db.mark_admitted(
        added.rowid,
        db.journal("chunk", entry.content_hash, chunk_journal(chunk, initial), now_ms=st.now_ms),
    )
    adopted.append((added.rowid, vector))
    # Later entries of this cycle (a pin, a supersede) may name the chunk already.
    peer.salience.refresh()
    return "applied", None


# ---- salience_pulse_propagate ---------------------------------------------------------


def salience_pulse_propagate(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Outcomes become pulses (where the attribution is ours), then every pulse propagates.

    Pulses commit in batches so that pulse-emit, recall and ingest never wait on one
    long transaction; a crash between batches re-reads the segments next cycle and
    skips the pulses already recorded.
    """
    db = peer.db
    stats = dict.fromkeys(
        ("applied", "rejected", "expired", "skipped", "duplicate", "changed", "knn_queries"), 0
    )
    with db.transaction():
        derived, keys_changed = convert_outcomes(peer, st.now_ms)
    stats["from_outcomes"] = len(derived)
    stats["keys_changed"] = keys_changed
    queued_here = {e.id for e in st.local} | {e.id for e in derived}
    pulses = sorted(
        [e for e in st.ordered if isinstance(e, PulseEntry)] + derived, key=entry_order_key
    )
    charges = _charge_budgets(peer, st, pulses, queued_here)
    stats["over_budget"] = sum(not c.admitted for c in charges.values())
    for start in range(0, len(pulses), PULSES_PER_TRANSACTION):
        batch = pulses[start : start + PULSES_PER_TRANSACTION]
        done: list[PulseEntry] = []
        with db.transaction():
            for entry in batch:
                # Checked before every pulse (a batch of wide pulses takes seconds): the
                # pulses applied so far commit as a smaller batch would have.
                if st.stop_requested():
                    break
                _apply_pulse_entry(peer, st, entry, stats, local=entry.id in queued_here)
                if entry.id in charges:
                    budget.record_charge(db, entry.pulse.pulse_id, charges[entry.id])
                done.append(entry)
            peer.salience.flush()
            db.outbox_mark_applied([e.id for e in done if e.id in queued_here])
        if len(done) < len(batch):
            # Segments and the cursor stay unrecorded: the next start reads them again
            # and skips the pulses applied.
            return {**stats, "interrupted": True}
    with db.transaction():
        db.outbox_mark_applied([e.id for e in st.local])
        cursor = _cursor(peer)
        for segment in st.segments:
            db.record_segment(
                segment.key,
                entries=len(segment.entries),
                rejected=segment.rejected,
                skipped=segment.skipped,
                now_ms=st.now_ms,
            )
            cursor = max(cursor, peer.zeitgeist.cursor_for(_key_hlc(segment.key)))
        for key in st.own_keys:
            cursor = max(cursor, peer.zeitgeist.cursor_for(_key_hlc(key)))
        db.set_meta(CURSOR_META_KEY, str(cursor))
        _persist_clock(peer)
        budget.forget_windows_before(db, _budget_window(st.now_ms - BUDGET_LOOKBACK_MS, st.now_ms))
    return stats


def _budget_window(ts_ms: int, now_ms: int) -> int:
    """The start of the window a pulse stamped `ts_ms` is charged to: its own, unless it
    is older than the look-back (then the current one, so backdating buys no budget)."""
    charged_ms = ts_ms if ts_ms >= now_ms - BUDGET_LOOKBACK_MS else now_ms
    return charged_ms - charged_ms % BUDGET_WINDOW_MS


def _charge_budgets(
    peer: Peer, st: CycleState, pulses: list[PulseEntry], queued_here: set[str]
) -> dict[str, budget.Charge]:
    """Entry id -> its charge, for other peers' pulses that would apply; those past their
    origin's budget for their window are rejected here (recorded with the reason, counted).

    Windows are of the origin's own pulse timestamps, not of this peer's cycles: a peer
    that reads ten windows' pulses at once after an outage admits each window's within
    budget, and what a window admitted or closed in earlier cycles counts (stored per window).
    An expired pulse is charged too, so a peer that reads it late admits what one that read
    it in time did, unless it is past the look-back (it would only close the present window).
    """
    db, allowance = peer.db, peer.config.pulses.origin_budget
    groups: dict[tuple[str, int], list[PulseEntry]] = {}
    for entry in pulses:
        pulse = entry.pulse
        pulse_ms = HybridLogicalClock.physical_ms(pulse.ts)
        if (
            entry.id in st.rejected
            or entry.id in queued_here
            or pulse.origin_peer == peer.peer_id
            # Signed by another peer than it names: refused by authority, and charging it
            # would spend the named peer's budget.
            or pulse.origin_peer != entry.origin
            or pulse.kind is PulseKind.FORGET
            or (pulse.is_expired(st.now_ms) and pulse_ms < st.now_ms - BUDGET_LOOKBACK_MS)
            or db.pulse_seen(pulse.pulse_id)
        ):
            continue
        window = _budget_window(pulse_ms, st.now_ms)
        groups.setdefault((pulse.origin_peer, window), []).append(entry)
    charges: dict[str, budget.Charge] = {}
    for (origin, window), entries in groups.items():
        before = budget.window_state(db, origin, window)
        by_pulse = {e.pulse.pulse_id: e for e in entries}
        verdict = admit_within_budget(
            (e.pulse for e in by_pulse.values()), allowance, windows={origin: before}
        )
        admitted = {p.pulse_id for p in verdict.admitted}
        closed_by = verdict.windows[origin].closed_by
        refused = 0
        for pulse_id, entry in by_pulse.items():
            ok = pulse_id in admitted
            cost = (cost_units(entry.pulse) or 0) if ok else 0
            # Only a refusal closes the window: recorded with an admitted pulse, a crash
            # before the rest were recorded would refuse them next cycle.
            charges[entry.id] = budget.Charge(origin, window, cost, ok, None if ok else closed_by)
            if not ok:
                refused += 1
                hostile.count(hostile.OVER_BUDGET)
                st.rejected[entry.id] = (
                    f"{hostile.OVER_BUDGET}: origin {origin} may move {allowance:g} salience "
                    f"per {BUDGET_WINDOW_MS // 1000} s of its pulses' time; the window from "
                    f"{window} ms had {before.spent:.3g} admitted before this cycle"
                )
        if refused and hostile.LOGGED.first_time(f"budget/{origin}/{window}"):
            log.warning(
                "pulses over their origin's budget refused",
                extra={"origin": origin, "window_start_ms": window, "refused": refused},
            )
    return charges


def _apply_pulse_entry(
    peer: Peer, st: CycleState, entry: PulseEntry, stats: dict[str, int], *, local: bool
) -> None:
    db, pulse = peer.db, entry.pulse
    if db.pulse_seen(pulse.pulse_id):
        stats["duplicate"] += 1
        _record(db, entry, "duplicate", None)
        return
    changes: list[int] = []

    def apply() -> Outcome_:
        if pulse.is_expired(st.now_ms):
            return "expired", "ts + ttl < now"
        if pulse.kind is PulseKind.FORGET:
            return "skipped", "forget pulses travel with their tombstone"
        if pulse.kind is PulseKind.REWARD and pulse.seed_hash and peer.salience.any_cold():
            # A Reward seeded at a swept chunk brings it back before it is credited.
            cold = tiers.cold_rowid_of_hash(db, pulse.seed_hash)
            if cold is not None:
                revive(peer, [cold], st.now_ms)
        rule = UpdateRule(peer.config.pulses.update_rule)
        result = propagate(pulse, peer.index, peer.salience, rule)
        body = {"pulse": pulse.to_json(), "rule": rule.value}
        journal_seq = db.journal("pulse", pulse.pulse_id, body, now_ms=st.now_ms)
        db.record_pulse(
            pulse.pulse_id,
            status="applied",
            origin_peer=pulse.origin_peer,
            reason=pulse.reason,
            changed=len(result.changes),
            journal_seq=journal_seq,
            now_ms=st.now_ms,
        )
        changes.append(len(result.changes))
        stats["knn_queries"] += result.knn_queries
        return "applied", None

    rejected = st.rejected.get(entry.id) or authority.refusal(peer, entry, local=local)
    status, reason = _isolated(peer, entry, rejected, apply)
    if status != "applied":
        db.record_pulse(
            pulse.pulse_id,
            status=status,
            origin_peer=pulse.origin_peer,
            reason=reason,
            changed=0,
            journal_seq=None,
            now_ms=st.now_ms,
        )
    stats[status] += 1
    stats["changed"] += sum(changes)
    _record(db, entry, status, reason)


# ---- downscale ------------------------------------------------------------------------


def downscale_phase(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Time decay since each chunk's last decay, half-life by kind, pin floors respected.

    Only chunks last decayed `downscale.min_step_s` or more ago are decayed, the longest
    waiting first and `downscale.max_chunks_per_cycle` at most (pulses.sweep.due_for_decay):
    decay composes, so the others lose nothing by waiting for a later cycle. "Now" is the
    cycle's accounted time, so a clock stepped forward decays one bounded step per cycle
    and a clock stepped back decays nothing until it passes the time already accounted.

    Chunks commit in batches, so a save through the API waits for one batch, not for
    every chunk decayed. The step is journaled with the first batch, with the rule's
    numbers, and replay applies the same rule to the chunks live then; a chunk saved
    between batches is not among them and decays from its creation later, as the replay
    has it. A crash between batches leaves the rest to decay later from their own last
    decay.
    """
    if not peer.config.downscale.enabled:
        return {"skipped": "disabled"}
    db = peer.db
    config = peer.config.downscale
    changed = 0
    # Journaled with the half-lives and cadence used, so a replay decays alike whatever
    # the config is then.
    half_lives = HalfLives.from_config(config)
    min_step_ms = round(config.min_step_s * 1000)
    with db.transaction():
        now_ms = accounted_now(peer, st)
        # "now_ms" is the accounted time replay decays to; "observed_ms" what the clock
        # said, for the audit trail (steps journaled before accounted time carry the clock).
        body = {
            "now_ms": now_ms,
            "observed_ms": st.now_ms,
            **half_lives.journal(),
            "min_step_ms": min_step_ms,
            "max_chunks": config.max_chunks_per_cycle,
        }
        seq = db.journal("downscale", str(now_ms), body, now_ms=st.now_ms)
        rows = db.decay_candidates(
            due_by_ms=now_ms - min_step_ms, limit=config.max_chunks_per_cycle
        )
        first = rows[:DOWNSCALE_ROWS_PER_TRANSACTION]
        changed += _downscale_batch(peer, now_ms, first, half_lives)
    decayed = len(first)
    for start in range(DOWNSCALE_ROWS_PER_TRANSACTION, len(rows), DOWNSCALE_ROWS_PER_TRANSACTION):
        batch = rows[start : start + DOWNSCALE_ROWS_PER_TRANSACTION]
        with db.transaction():
            if st.stop_requested():
                # Stopped between batches: the step says how many it decayed, so replay
                # decays the same ones and leaves the rest to the next step, as here.
                db.amend_journal(seq, {"decayed": decayed})
                break
            changed += _downscale_batch(peer, now_ms, batch, half_lives)
            decayed += len(batch)
    return {"decayed": decayed, "changed": changed, "accounted_lag_ms": st.now_ms - now_ms}


def accounted_now(peer: Peer, st: CycleState) -> int:
    """The cycle's accounted time, advanced once per cycle by whichever phase asks first
    (in the caller's transaction if there is one)."""
    if st.accounted_ms is None:
        with peer.db.transaction():
            st.accounted_ms = accounted.advance(peer.db, st.now_ms, peer.config.clock.max_step_s)
    return st.accounted_ms


def _downscale_batch(
    peer: Peer, now_ms: int, rows: list[tuple[int, str, str, float]], half_lives: HalfLives
) -> int:
    """Decay these chunks up to `now_ms` and record them decayed (inside the caller's
    transaction)."""
    cache = peer.salience
    changed = 0
    for rowid, kind, decay_from, stability in rows:
        elapsed_s = (now_ms - ms_from_iso(decay_from)) / 1000.0
        before = cache.salience(rowid)
        half_life = half_lives.of(kind, stability)
        after = downscale(before, cache.pin_floor(rowid), elapsed_s, half_life)
        if after != before:
            cache.set_salience(rowid, after)
            changed += 1
    cache.flush()
    peer.db.mark_decayed(now_ms, [row[0] for row in rows])
    return changed


# ---- percentile_sweep -----------------------------------------------------------------


def percentile_sweep(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Revive re-ingested cold chunks; expire cold ones past retention; when due, sweep the
    bottom percentile into the cold tier (local curation; not published).

    The interval, the grace period and retention are measured in accounted time, so a clock
    stepped forward brings none of them closer than one bounded step per cycle, and a
    clock stepped back brings nothing at all.
    """
    sweep = peer.config.sweep
    db = peer.db
    now_ms = accounted_now(peer, st)
    result: dict[str, Any] = {"revived": revive_reingested(peer, now_ms)}
    expired = expire_cold(peer, now_ms)
    if expired:
        result["expired"] = len(
            tombstone_hashes(peer, expired, reason=RETENTION_REASON, now_ms=now_ms)
        )
    if not sweep.enabled:
        return {**result, "skipped": "disabled"}
    last = db.get_meta(LAST_SWEEP_META_KEY)
    if last is None and sweep.interval_s > 0:
        # The interval starts with the first cycle: a fresh store is not swept at once.
        with db.transaction():
            db.set_meta(LAST_SWEEP_META_KEY, str(now_ms))
        return {**result, "skipped": "first interval"}
    if sweep.interval_s > 0 and now_ms - int(last or "0") < sweep.interval_s * 1000:
        return {**result, "skipped": "interval"}
    if not sweep.dry_run:
        # Recorded first: a crash between the two skips one sweep instead of sweeping twice.
        with db.transaction():
            db.set_meta(LAST_SWEEP_META_KEY, str(now_ms))
    return {**result, **run_sweep(peer, now_ms, dry_run=sweep.dry_run)}


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
            seq = db.journal("tombstone", digest, {"hash": digest}, now_ms=now_ms)
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


# ---- promote --------------------------------------------------------------------------


def promote(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Publish this cycle's own entries, heartbeat, compact when due, checkpoint the
    journal and prune it when due, and write the index when it changed and
    `index.save_interval_s` passed (the service writes it at stop too).

    While the log is unreachable, entries wait in the outbox (prepared segments
    are retried byte for byte) and the index is still saved.
    """
    stats: dict[str, Any] = {"published_entries": 0, "segments": 0, "republished": 0}
    try:
        _publish_outbox(peer, st, stats)
        _heartbeat(peer)
        stats["compacted"] = _maybe_compact(peer, st)
    except BackendError as exc:
        log.warning("publishing stalled; entries stay queued", extra={"error": str(exc)})
        peer.snapshot_check_due = True
        stats["stalled"] = str(exc)
    stats["efficacy"] = efficacy.maybe_record(peer, st.now_ms)
    stats["audit"] = audit.maybe_checkpoint(peer, st.now_ms)
    stats["index_saved"] = peer.save_index_when_due(st.now_ms)
    return stats


def _publish_outbox(peer: Peer, st: CycleState, stats: dict[str, Any]) -> None:
    db = peer.db
    # Segments prepared before a crash or an outage go first, byte for byte.
    for seq, key, data, hlc in db.prepared_segments():
        _publish(peer, PreparedSegment(key=key, data=data, hlc=hlc, seq=seq), stats)
    while not st.stop_requested() and (pending := db.outbox_unpublished(MAX_ENTRIES_PER_SEGMENT)):
        entries = [decode_entry(body) for _, body in pending]
        prepared = _prepare(peer, entries, [entry_id for entry_id, _ in pending], st.now_ms)
        started = time.monotonic()
        _publish(peer, prepared, stats)
        metrics.PUBLISH_SECONDS.observe(time.monotonic() - started)
        stats["published_entries"] += len(pending)


def _publish(peer: Peer, prepared: PreparedSegment, stats: dict[str, Any]) -> None:
    """Write a prepared segment. One that lands late (readers may have moved past its
    key's time) gets a copy under a fresh key, prepared in the same transaction that
    marks the original published, so a crash cannot lose the copy. Entries are
    idempotent: the copy is harmless."""
    db, current = peer.db, prepared
    forged_claims = 0
    attempt = 0
    while attempt <= MAX_REPUBLISH:
        try:
            result = peer.zeitgeist.publish(current)
        except FencedOut as exc:
            raise FatalCycleError(str(exc)) from exc
        except ClaimTaken as exc:
            forged_claims += 1
            current = _skip_forged_claim(peer, current, exc)
            if forged_claims >= FORGED_CLAIMS_PER_PUBLISH:
                return  # the copy stays prepared and goes out first next cycle
            continue
        attempt += 1
        stats["segments"] += 1
        with db.transaction():
            db.finish_segment(current.seq, "published")
            if not result.late:
                return
            current = _prepare(peer, decode_segment(current.data).entries, [], peer.now_ms())
        stats["republished"] += 1
    # Still late: the last copy stays prepared and goes out first next cycle.


def _skip_forged_claim(peer: Peer, current: PreparedSegment, taken: ClaimTaken) -> PreparedSegment:
    """Prepare the segment's entries again under the next sequence number: a claim this
    peer's key did not seal is a forgery, and fencing on it would let anyone who can write
    the bucket stop this peer. The forged claim is counted and logged once."""
    hostile.count(hostile.FORGED_CLAIM)
    claim = claim_key(peer.peer_id, taken.seq)
    if hostile.LOGGED.first_time(claim):
        log.warning(
            "claim under this peer's name not written here; publishing under the next sequence",
            extra={"key": claim, "reason": str(taken.verdict)},
        )
    entries = decode_segment(current.data).entries
    with peer.db.transaction():
        peer.db.finish_segment(current.seq, "superseded")
        return _prepare(peer, entries, [e.id for e in entries], peer.now_ms())


def _heartbeat(peer: Peer) -> None:
    peer.zeitgeist.heartbeat(
        Heartbeat(
            peer_id=peer.peer_id,
            cursor_hlc=_cursor(peer),
            last_seen_ms=peer.now_ms(),
            index_version=peer.embedder.index_version,
            public_key=None if peer.zeitgeist.signer is None else peer.zeitgeist.signer.public_key,
            seq=int(peer.db.get_meta(PUBLISH_SEQ_META_KEY) or "0"),
        )
    )


def _prepare(
    peer: Peer, entries: list[Entry], entry_ids: list[str], now_ms: int
) -> PreparedSegment:
    db, zg = peer.db, peer.zeitgeist
    with db.transaction():
        seq = db.next_counter(PUBLISH_SEQ_META_KEY)
        prepared = zg.prepare(entries, seq)
        db.prepare_segment(seq, prepared.key, prepared.data, prepared.hlc, entry_ids, now_ms=now_ms)
        _persist_clock(peer)
    return prepared


def _maybe_compact(peer: Peer, st: CycleState) -> int:
    db = peer.db
    last = int(db.get_meta(LAST_COMPACTION_META_KEY) or "0")
    if st.now_ms - last < peer.config.zeitgeist.compaction_interval_s * 1000:
        return 0
    report = peer.zeitgeist.compact(st.now_ms)
    with db.transaction():
        db.set_meta(LAST_COMPACTION_META_KEY, str(st.now_ms))
    return 0 if report is None else int(report.segments_folded)


# ---- helpers --------------------------------------------------------------------------

PHASE_FUNCTIONS: Final[dict[str, PhaseFn]] = {
    "scan": scan,
    "classify": classify,
    "interleave": interleave,
    "reconsolidate": reconsolidate,
    "salience_pulse_propagate": salience_pulse_propagate,
    "downscale": downscale_phase,
    "percentile_sweep": percentile_sweep,
    "promote": promote,
}


def _all_entries(st: CycleState) -> list[Entry]:
    return [e for segment in st.segments for e in segment.entries] + st.local


def _key_hlc(key: str) -> int:
    """The HLC a segment or snapshot key carries: how far the log has been read."""
    if key.startswith("snap/"):
        return parse_snapshot_key(key).hlc
    return parse_segment_key(key).hlc


def _cursor(peer: Peer) -> int:
    return int(peer.db.get_meta(CURSOR_META_KEY) or "0")


def _persist_clock(peer: Peer) -> None:
    persist_clock(peer.db, peer.clock)


def record_cycle_start(rt: Runtime, now_ms: int) -> int:
    """A 'running' row in `cycles`: one a crash leaves behind is marked interrupted at start-up."""
    with rt.db.transaction():
        return rt.db.start_cycle(now_ms)


def record_cycle_end(rt: Runtime, cycle_id: int, status: str, st: CycleState) -> None:
    """Close the cycle's row with its phases' stats and refresh the gauges `status` mirrors."""
    finished_ms = rt.clock.now_ms()
    with rt.db.transaction():
        rt.db.finish_cycle(cycle_id, status=status, phases=st.stats, now_ms=finished_ms)
    metrics.CYCLES.labels(status).inc()
    live, tombstones = rt.db.live_and_tombstoned()
    metrics.LIVE_CHUNKS.set(live)
    metrics.TOMBSTONES.set(tombstones)
    metrics.LAST_CYCLE.set(finished_ms / 1000)


def _failure_status(exc: Exception) -> str:
    """'fatal' when the daemon must stop, 'failed' when the next cycle retries."""
    return "fatal" if isinstance(exc, FatalCycleError) else "failed"


def run_cycle_blocking(peer: Peer) -> CycleState:
    """All eight phases in order, in this thread (for CLIs, tests and benchmarks), recorded
    in `cycles` like the service's cycles.

    A phase that raises is recorded and re-raised; the caller decides whether to reload.
    A BaseException (an interrupt, a simulated kill) records nothing, as a real crash would.
    """
    st = CycleState(now_ms=peer.now_ms())
    cycle_id = record_cycle_start(peer.runtime, st.now_ms)
    try:
        for name in PHASES:
            st.stats[name] = {**st.stats.get(name, {}), **PHASE_FUNCTIONS[name](peer, st)}
    except Exception as exc:
        record_cycle_end(peer.runtime, cycle_id, _failure_status(exc), st)
        raise
    record_cycle_end(peer.runtime, cycle_id, "done", st)
    return st
