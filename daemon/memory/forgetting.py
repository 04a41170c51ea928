"""The percentile sweep as a state: chunks move to the cold tier, come back, and expire.

Each sweep ranks every chunk of a kind, live and cold together, by a value that
mixes learned salience with intrinsic worth (information content, declared
importance), and keeps the bottom percentile cold. Chunks younger than the
grace period, or revived within it, stay live. Before it commits, the prune gate replays recent
successful decisions as if the doomed chunks were already cold: any chunk a
replay would no longer find is spared, with the reason recorded. A cold chunk
comes back when its content is ingested again (or `dreamcycle forgotten
--revive` asks), or when a Reward is seeded at it; after the retention period
it becomes a permanent tombstone.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.information import distinct_words, information_of_words
from dreamcycle.pulses.sweep import SweepColumns, SweepPlan, plan_sweep_columns, spare
from dreamcycle.store import read_paths, sweep_words, tiers
from dreamcycle.store.salience import SalienceCache

SWEEP_REASON: Final = "percentile_sweep"
#: Chunks whose words a sweep reads and tokenizes at a time, when they are not kept yet: the
#: first sweep of a large store holds this many texts in memory, not all of them.
WORDS_BATCH: Final = 20_000
RETENTION_REASON: Final = "cold retention expired"
#: Chunks a sweep moves to the cold tier per statement.
MOVE_BATCH: Final = 10_000


@dataclass
class GateReport:
    """What the prune gate replayed, and what it spared."""

    decisions: int = 0
    found: int = 0
    still_found: int = 0
    spared: list[int] = field(default_factory=list)

    @property
    def replay_rate(self) -> float | None:
        return None if self.found == 0 else self.still_found / self.found


def sweep_columns(
    rt: Runtime,
    salience: SalienceCache,
    now_ms: int,
    *,
    keep_words: bool = True,
    min_population: int = 0,
    kept: sweep_words.KeptSweepRows | None = None,
) -> SweepColumns:
    """Every admitted chunk not tombstoned, live or cold, as the sweep ranks it.

    The grace period runs from a chunk's creation, and again from its revival: a chunk
    brought back (in this very cycle, with no grace) is not swept straight back. Chunks
    whose words are not kept yet are tokenized here, and their words kept unless
    `keep_words` is false (a dry run changes nothing; store/sweep_words.py). Below
    `min_population` sweepable chunks no sweep follows: words are neither read nor kept.
    With `kept`, the rows are read through it (only what changed since the last sweep)
    and kept there for the next one.
    """
    if kept is None:
        rows = sweep_words.sweep_rows(rt.db)
    else:
        rows = kept.read(rt.db, lambda labels: salience.sweep_view(labels)[3])
    saliences, pinned, protected, tombstoned = salience.sweep_view(rows.labels)
    if tombstoned.any():
        kept_rows = ~tombstoned
        rows = rows.keep(kept_rows)
        saliences, pinned, protected = (
            saliences[kept_rows],
            pinned[kept_rows],
            protected[kept_rows],
        )
    if np.count_nonzero(~(pinned | protected)) < min_population:
        information = np.zeros(len(rows.labels), dtype=np.float64)
    elif rows.information is not None:
        # Kept from the last sweep, and no chunk came or went since.
        information = rows.information
    else:
        information, rows = _information(rt, rows, keep_words=keep_words)
        rows = replace(rows, information=information)
        if kept is not None and keep_words:
            kept.remember(rt.db, rows)
    grace_ms = rt.config.sweep.grace_s * 1000
    revived = tiers.revived_since(rt.db, now_ms - int(grace_ms))
    eligible = now_ms - rows.created_ms >= grace_ms
    if revived:
        eligible &= ~np.isin(rows.labels, np.fromiter(revived, dtype=np.int64, count=len(revived)))
    return SweepColumns.of(
        labels=rows.labels,
        salience=saliences,
        pinned=pinned,
        protected=protected,
        kinds=rows.kinds,
        information=information,
        importance=rows.importance,
        cold=rows.cold,
        eligible=eligible,
    )


def _information(
    rt: Runtime, rows: sweep_words.SweepRows, *, keep_words: bool
) -> tuple[npt.NDArray[np.float64], sweep_words.SweepRows]:
    """Each chunk's information content, from its kept words or its text (read and
    tokenized WORDS_BATCH chunks at a time); and `rows` with every chunk's words."""
    # An array, sliced into lists batch by batch: a first sweep of a large store meets every
    # chunk here, and a million Python ints at once raised its peak memory.
    missing = rows.labels[rows.word_counts < 0]
    numbers_read: list[npt.NDArray[np.uint32]] = []
    counts_read: list[npt.NDArray[np.int64]] = []
    unseen: dict[str, int] = {}  # a dry run's numbers for words not numbered yet
    for start in range(0, len(missing), WORDS_BATCH):
        part: list[int] = missing[start : start + WORDS_BATCH].tolist()
        texts = sweep_words.texts_of(rt.db, part)
        words = {label: distinct_words(texts[label]) for label in part}
        if keep_words:
            with rt.db.transaction():
                numbered = sweep_words.keep_words(rt.db, words)
        else:
            numbered = sweep_words.numbered_words(rt.db, words, unseen)
        # As arrays at once, not a bytes object per chunk: the first sweep of a large store
        # meets every chunk here.
        ordered = [numbered[label] for label in part]
        numbers_read.append(np.frombuffer(b"".join(ordered), dtype=sweep_words.WORD_ID_DTYPE))
        counts_read.append(
            np.fromiter(
                (len(blob) // sweep_words.WORD_ID_DTYPE.itemsize for blob in ordered),
                dtype=np.int64,
                count=len(ordered),
            )
        )
    missing_numbers = _joined(numbers_read, sweep_words.WORD_ID_DTYPE)
    missing_counts = _joined(counts_read, np.dtype(np.int64))
    numbers, lengths = sweep_words.word_arrays(rows, missing_numbers, missing_counts)
    if len(missing):
        rows = replace(rows, word_numbers=numbers, word_counts=lengths)
    return information_of_words(numbers, lengths), rows


def _joined(parts: list[npt.NDArray[Any]], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """`parts` as one array, emptying the list as it copies: a first sweep of a large store
    reads every chunk's words, and the parts held beside their copy would double them."""
    joined = np.empty(sum(len(part) for part in parts), dtype=dtype)
    at = 0
    while parts:
        part = parts.pop(0)
        joined[at : at + len(part)] = part
        at += len(part)
    return joined


def plan(
    rt: Runtime,
    salience: SalienceCache,
    now_ms: int,
    *,
    keep_words: bool = True,
    kept: sweep_words.KeptSweepRows | None = None,
) -> SweepPlan:
    cfg = rt.config.sweep
    return plan_sweep_columns(
        sweep_columns(
            rt,
            salience,
            now_ms,
            keep_words=keep_words,
            min_population=cfg.min_population,
            kept=kept,
        ),
        percentile=cfg.percentile,
        min_population=cfg.min_population,
        mix=cfg.mix(),
    )


def prune_gate(peer: Peer, doomed: Iterable[int], now_ms: int) -> GateReport:
    """Replay recent successful decisions as if `doomed` were cold; report what they lose."""
    rt, cfg = peer.runtime, peer.config.sweep
    report = GateReport()
    doomed_set = frozenset(doomed)
    decisions = rt.db.successful_decisions(
        peer.peer_id, since_ms=now_ms - int(cfg.gate_window_s * 1000), limit=cfg.gate_decisions
    )
    spared: set[int] = set()
    for _digest, ranked, cited, query, vector in decisions:
        found_hashes = cited or ranked
        found = {
            obs.rowid
            for digest in found_hashes
            if (obs := rt.db.observation_by_hash(digest)) is not None and obs.live
        }
        if not found:
            continue
        hits = rank_query(
            rt, query or " ", vector, len(ranked), index=peer.index, assume_cold=doomed_set
        )
        again = {h.rowid for h in hits}
        report.decisions += 1
        report.found += len(found)
        report.still_found += len(found & again)
        spared.update(label for label in found - again if label in doomed_set)
    report.spared = sorted(spared)
    return report


def sweep(peer: Peer, now_ms: int, *, dry_run: bool = False) -> dict[str, object]:
    """Plan, gate and apply one sweep; returns its stats. A dry run moves nothing, but
    keeps the words it read (the peer is the store's writer, and any sweep keeps them):
    otherwise a peer sweeping dry would read every chunk's text again at each sweep, and
    hold every word not yet numbered in memory while it did."""
    cfg = peer.config.sweep
    planned = plan(peer.runtime, peer.salience, now_ms, kept=peer.sweep_rows)
    stats: dict[str, object] = {
        "population": planned.population,
        "threshold": planned.threshold,
        "already_cold": planned.already_cold,
        "doomed": len(planned.doomed),
    }
    if planned.skipped_reason is not None:
        stats["skipped"] = planned.skipped_reason
        return stats
    final = planned
    if cfg.prune_gate and planned.doomed:
        report = prune_gate(peer, planned.doomed, now_ms)
        final, spared = spare(planned, report.spared)
        stats.update(
            gate_decisions=report.decisions,
            gate_spared=len(spared),
            gate_replay_rate=report.replay_rate,
        )
    if dry_run:
        stats["dry_run"] = True
        return stats
    stats["cold"] = len(move_to_cold(peer, final, now_ms))
    return stats


def move_to_cold(peer: Peer, planned: SweepPlan, now_ms: int) -> list[int]:
    """Journal and apply the plan's moves; the index drops them after the commit."""
    db, cache = peer.db, peer.salience
    moved: list[int] = []
    doomed = sorted(planned.doomed)
    with _changing_tiers(peer, moved, cold=True):
        # MOVE_BATCH at a time: a first sweep of a large store moves most of it, and its
        # hashes, reasons and journal steps all at once raised the peak memory
        # scripts/bench_scale.py measures.
        for start in range(0, len(doomed), MOVE_BATCH):
            batch = tiers.kinds_and_hashes(db, doomed[start : start + MOVE_BATCH])
            now_cold = tiers.move_each_to_cold(
                db,
                {label: _why_cold(planned, label, kind) for label, (kind, _) in batch.items()},
                now_ms=now_ms,
            )
            db.journal_each(
                JournalKind.SWEEP,
                [(batch[label][1], {"rowid": label}) for label in now_cold],
                now_ms=now_ms,
            )
            for label in now_cold:
                cache.set_cold(label, True)
            moved += now_cold
    if moved:
        peer.index.set_cold(np.array(moved, dtype=np.int64))
    return moved


@contextmanager
def _changing_tiers(peer: Peer, changed: list[int], *, cold: bool) -> Iterator[None]:
    """A transaction that moves the chunks it adds to `changed` to the cold tier (or back).
    Once it commits, the peer's kept sweep rows follow, so that the next sweep need not
    read the cold tier's labels again; not from inside an outer transaction, which may yet
    roll the move back."""
    db = peer.db
    outermost = not read_paths.in_write_transaction(db)
    with db.transaction():
        before = tiers.epoch(db)
        yield
        after = tiers.epoch(db)
    if outermost and changed:
        peer.sweep_rows.moved(changed, cold=cold, tiers_before=before, tiers_after=after)


def _why_cold(planned: SweepPlan, label: int, kind: str) -> str:
    value = planned.values.get(label)
    threshold = planned.thresholds.get(kind)
    if value is None or threshold is None:
        return SWEEP_REASON
    return f"{SWEEP_REASON}: value {value:.3f} < {kind} threshold {threshold:.3f}"


def revive(peer: Peer, labels: Iterable[int], now_ms: int) -> list[int]:
    """Bring cold chunks back to the live tier and index (journaled)."""
    db, cache = peer.db, peer.salience
    revived: list[int] = []
    with _changing_tiers(peer, revived, cold=False):
        observations = db.observations(sorted(set(labels)))
        for label, obs in sorted(observations.items()):
            if tiers.revive(db, label):
                db.journal(JournalKind.REVIVE, obs.content_hash, {"rowid": label}, now_ms=now_ms)
                cache.set_cold(label, False)
                revived.append(label)
    if revived:
        # A chunk embedded by another model (before a change of model) is live again but,
        # as at the index's rebuild, not in this model's index.
        vectors = db.embeddings_of(revived, peer.embedder.index_version)
        held = [label for label in revived if label in vectors]
        if held:
            peer.index.restore(
                np.array(held, dtype=np.int64), np.stack([vectors[label] for label in held])
            )
    return revived


def revive_reingested(peer: Peer, now_ms: int) -> int:
    """Cold chunks whose content came in again since they went cold come back."""
    return len(revive(peer, tiers.reingested_cold(peer.db), now_ms))


def expire_cold(peer: Peer, now_ms: int) -> list[str]:
    """Hashes of cold chunks past retention: they become permanent tombstones."""
    retention_ms = int(peer.config.sweep.cold_retention_s * 1000)
    return tiers.expired_cold(peer.db, older_than_ms=now_ms - retention_ms)
