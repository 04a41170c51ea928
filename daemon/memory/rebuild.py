"""Rebuild: re-derive salience and the index from the database and the applied log.

The journal records every applied step in order (chunk admitted, pulse,
tombstone, supersede, reconsolidate, downscale, sweep to the cold tier, revive). Replaying it against fresh
state, with the index growing exactly as it grew live, reproduces salience
bit for bit when the neighbours found are the same as they were. Once steps older
than the audit retention were pruned, replay starts from the checkpoint that covers
them (store/checkpoints.py) and replays the steps after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.daemon.runtime import Runtime, save_index
from dreamcycle.pulses.decay import downscale, due_for_decay
from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.propagate import UpdateRule, propagate
from dreamcycle.pulses.pulse import SalientPulse
from dreamcycle.store import checkpoints
from dreamcycle.store.checkpoints import Checkpoint, ChunkState
from dreamcycle.store.index import HnswIndex


class RebuildError(RuntimeError):
    """The journal cannot be replayed; the message names the step."""


@dataclass(frozen=True)
class RebuildReport:
    steps: int
    chunks: int
    pulses: int
    live: int
    changed: int  # chunks whose stored salience differed from the replayed one
    max_difference: float


@dataclass
class Replayed:
    """What replay holds after a journal step: salience, what each chunk's decay needs, the
    order chunks joined the index, and the index itself."""

    state: InMemorySalience
    index: HnswIndex
    kinds: dict[int, str] = field(default_factory=dict)
    decayed_at: dict[int, int] = field(default_factory=dict)
    admitted_seq: dict[int, int] = field(default_factory=dict)
    started_after: int = 0  # the checkpoint replay started from; 0: the first step
    # Live chunks embedded by an earlier model: live, but outside this model's index.
    outside_index: set[int] = field(default_factory=set)

    def chunks(self) -> list[ChunkState]:
        """The state a checkpoint taken now would hold."""
        return [
            ChunkState(
                chunk_id=label,
                admitted_seq=self.admitted_seq[label],
                kind=self.kinds[label],
                salience=self.state.salience(label),
                pin_floor=self.state.pin_floor(label),
                decay_from_ms=self.decayed_at[label],
                tier="tombstoned"
                if self.state.is_tombstoned(label)
                else "live"
                if self.index.is_live(label) or label in self.outside_index
                else "cold",
            )
            for label in self.state.labels()
        ]


def replay(
    rt: Runtime, progress: Callable[[int], None] | None = None, rule: UpdateRule | None = None
) -> tuple[InMemorySalience, HnswIndex]:
    """Fresh salience and an in-memory index from the journal (nothing is written).

    `rule`, when given, propagates every pulse with that update rule instead of the
    journaled one: the same log under another rule, for an A/B of the two (from the
    checkpoint replay starts at, when older steps were pruned).
    """
    replayed = replay_steps(rt, progress, rule)
    return replayed.state, replayed.index


def replay_steps(
    rt: Runtime,
    progress: Callable[[int], None] | None = None,
    rule: UpdateRule | None = None,
    *,
    until_seq: int | None = None,
) -> Replayed:
    """Replay from the newest checkpoint at or below the oldest step the journal holds (or
    from nothing), through step `until_seq` when given."""
    db, cfg = rt.db, rt.config
    index = HnswIndex.create(
        cfg.index_path,
        rt.embedder.dim,
        rt.embedder.index_version,
        m=cfg.index.m,
        ef_construction=cfg.index.ef_construction,
        ef=cfg.index.ef,
    )
    replayed = Replayed(InMemorySalience(), index)
    start = checkpoints.replay_start(db)
    pruned = checkpoints.pruned_through(db)
    if start is not None and start.seq >= pruned:
        _restore(rt, replayed, start)
    elif pruned:
        raise RebuildError(
            f"journal steps up to {pruned} were pruned and no checkpoint covers them"
        )
    steps = _Steps(rt, replayed, rule)
    journal = takewhile(
        lambda step: until_seq is None or step[0] <= until_seq,
        checkpoints.journal_after(db, replayed.started_after),
    )
    for count, (seq, kind, ref, body, _at) in enumerate(journal, start=1):
        try:
            apply = STEPS[JournalKind(kind)]
        except ValueError:
            raise RebuildError(f"journal step {seq} has an unknown kind {kind!r}") from None
        apply(steps, seq, ref, body)
        if progress:
            progress(count)
    return replayed


class _Steps:
    """Replays one journal step of each kind onto `replayed`, as the live phase did it."""

    def __init__(self, rt: Runtime, replayed: Replayed, rule: UpdateRule | None) -> None:
        self.db, self.config = rt.db, rt.config
        self.index_version = rt.embedder.index_version
        self.replayed, self.rule = replayed, rule
        self.rowid_of = self.db.rowids_by_hash()
        self._stabilities: dict[int, float] | None = None

    def chunk(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        replayed, state = self.replayed, self.replayed.state
        rowid = int(body["rowid"])
        vector = self._vector(rowid, "admitted")
        if vector is None:
            # Its step ran in the vector space of another model, which this index is not.
            raise _other_model(seq, f"admits chunk {rowid}", self.index_version)
        # Journals written before salience started from importance say nothing: 1.0 then.
        state.add(rowid, float(body.get("initial", 1.0)))
        if body["pin_floor"] > 0:
            state.pin(rowid, float(body["pin_floor"]))
        replayed.kinds[rowid] = str(body["kind"])
        replayed.decayed_at[rowid] = int(body["decay_from_ms"])
        replayed.admitted_seq[rowid] = seq
        replayed.index.add(np.array([rowid], dtype=np.int64), vector[None, :])

    def pulse(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        pulse = SalientPulse.from_json(body["pulse"])
        if pulse.index_version != self.index_version:
            raise _other_model(seq, f"is a pulse of {pulse.index_version}", self.index_version)
        rule = self.rule or UpdateRule(body["rule"])
        propagate(pulse, self.replayed.index, self.replayed.state, rule)

    def tombstone(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        self._hide(self.rowid_of.get(ref))

    def supersede(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        state = self.replayed.state
        old, new = body["old"], body["new"]
        if old is not None and new is not None and _live(state, old) and _live(state, new):
            state.set_salience(int(new), state.salience(int(old)))
        self._hide(old)

    def _hide(self, target: int | None) -> None:
        if target is not None and _live(self.replayed.state, int(target)):
            self.replayed.state.tombstone(int(target))
            self._leave_index(int(target))

    def sweep(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        # Cold, not gone: it leaves live searches (pulses cannot reach it) but keeps decaying.
        label = int(body["rowid"])
        self.replayed.outside_index.discard(label)
        self.replayed.index.set_cold(np.array([label], dtype=np.int64))

    def revive(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        rowid = int(body["rowid"])
        vector = self._vector(rowid, "revived")
        if vector is None:
            # As live: a chunk of an earlier model comes back outside this model's index.
            self.replayed.outside_index.add(rowid)
            return
        self.replayed.index.restore(np.array([rowid], dtype=np.int64), vector[None, :])

    def _vector(self, rowid: int, step: str) -> npt.NDArray[np.float32] | None:
        """The chunk's vector in this index's space; None when another model embedded it."""
        vector = self.db.embeddings_of([rowid], self.index_version).get(rowid)
        if vector is None and not self.db.embeddings_of([rowid]):
            raise RebuildError(f"chunk {rowid} was {step} but has no stored embedding")
        return vector

    def _leave_index(self, label: int) -> None:
        self.replayed.outside_index.discard(label)
        self.replayed.index.mark_deleted(np.array([label], dtype=np.int64))

    def reconsolidate(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        # A chunk pinned before it was admitted carries the floor in its chunk step.
        if int(body["rowid"]) in self.replayed.state.labels():
            self.replayed.state.pin(int(body["rowid"]), float(body["pin_floor"]))

    def downscale(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        replayed, state = self.replayed, self.replayed.state
        now_ms = int(body["now_ms"])
        # The half-lives that downscale used; the current config only for older journals.
        half_lives = HalfLives.from_journal(body, self.config.downscale)
        if self._stabilities is None:
            # Set when a chunk is stored and never changed: today's value is the one then.
            self._stabilities = self.db.stabilities()
        # Journals written before the cadence existed decayed every chunk at every step.
        due = due_for_decay(
            {
                label: replayed.decayed_at[label]
                for label in state.labels()
                if not state.is_tombstoned(label)
            },
            now_ms,
            int(body.get("min_step_ms", 0)),
            body.get("max_chunks"),
        )[: body.get("decayed")]  # a step stopped between batches decayed the first ones
        for label in due:
            elapsed_s = (now_ms - replayed.decayed_at[label]) / 1000.0
            half_life = half_lives.of(replayed.kinds[label], self._stabilities[label])
            value = downscale(
                state.salience(label), state.pin_floor(label), elapsed_s, float(half_life)
            )
            state.set_salience(label, value)
            replayed.decayed_at[label] = now_ms

    def confidence(self, seq: int, ref: str, body: dict[str, Any]) -> None:
        """Confidence is not salience: recorded for explain, nothing to replay."""


#: One row per journal kind (daemon/journal_kinds.py): a new kind must say how it replays.
STEPS: Final[dict[JournalKind, Callable[[_Steps, int, str, dict[str, Any]], None]]] = {
    JournalKind.CHUNK: _Steps.chunk,
    JournalKind.PULSE: _Steps.pulse,
    JournalKind.TOMBSTONE: _Steps.tombstone,
    JournalKind.SUPERSEDE: _Steps.supersede,
    JournalKind.SWEEP: _Steps.sweep,
    JournalKind.REVIVE: _Steps.revive,
    JournalKind.RECONSOLIDATE: _Steps.reconsolidate,
    JournalKind.DOWNSCALE: _Steps.downscale,
    JournalKind.CONFIDENCE: _Steps.confidence,
}


def _restore(rt: Runtime, replayed: Replayed, start: Checkpoint) -> None:
    """Replay's state as of a checkpoint; live chunks join the index in the order they were
    admitted, as they did live (cold ones come back by their revive step, if any)."""
    ordered = sorted(start.chunks, key=lambda chunk: chunk.admitted_seq)
    live = [chunk.chunk_id for chunk in ordered if chunk.tier == "live"]
    vectors = rt.db.embeddings_of(live, rt.embedder.index_version)
    # Live chunks an earlier model embedded were outside the index when it was taken.
    outside = [label for label in live if label not in vectors]
    embedded = rt.db.embeddings_of(outside)
    missing = [label for label in outside if label not in embedded]
    if missing:
        raise RebuildError(
            f"chunk {missing[0]} is live in checkpoint {start.seq} but has no stored embedding"
        )
    replayed.outside_index.update(outside)
    live = [label for label in live if label in vectors]
    for chunk in ordered:
        replayed.state.add(chunk.chunk_id, chunk.salience)
        if chunk.pin_floor > 0:
            replayed.state.pin(chunk.chunk_id, chunk.pin_floor)
        if chunk.tier == "tombstoned":
            replayed.state.tombstone(chunk.chunk_id)
        replayed.kinds[chunk.chunk_id] = chunk.kind
        replayed.decayed_at[chunk.chunk_id] = chunk.decay_from_ms
        replayed.admitted_seq[chunk.chunk_id] = chunk.admitted_seq
    if live:
        replayed.index.add(np.array(live, dtype=np.int64), np.stack([vectors[i] for i in live]))
    replayed.started_after = start.seq


def _other_model(seq: int, what: str, index_version: str) -> RebuildError:
    return RebuildError(
        f"journal step {seq} {what}, applied in another model's vector space than this "
        f"index's ({index_version}): a replay cannot reproduce it after a change of "
        "embedding model, so the stored salience is kept as it is"
    )


def _live(state: InMemorySalience, label: int) -> bool:
    return label in state.labels() and not state.is_tombstoned(label)


def rebuild(rt: Runtime, *, progress: Callable[[int], None] | None = None) -> RebuildReport:
    """Replay the journal; write the replayed salience and the rebuilt index."""
    state, index = replay(rt, progress)
    replayed = state.snapshot()
    db = rt.db
    stored = {row.rowid: row.salience for row in db.salience_rows()}
    differences = {
        r: abs(stored[r] - v) for r, v in replayed.items() if r in stored and stored[r] != v
    }
    with db.transaction():
        db.write_salience({r: replayed[r] for r in differences})
    save_index(db, index)
    counts = db.journal_counts()
    return RebuildReport(
        steps=sum(counts.values()),
        chunks=counts.get("chunk", 0),
        pulses=counts.get("pulse", 0),
        live=index.live_count,
        changed=len(differences),
        max_difference=max(differences.values(), default=0.0),
    )
