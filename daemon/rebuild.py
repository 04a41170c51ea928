"""Rebuild: re-derive salience and the index from the database and the applied log.

The journal records every applied step in order (chunk admitted, pulse,
tombstone, supersede, reconsolidate, downscale, sweep to the cold tier, revive). Replaying it against fresh
state, with the index growing exactly as it grew live, reproduces salience
bit for bit when the neighbours found are the same as they were.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from daemon.runtime import Runtime
from pulses.memory import InMemorySalience
from pulses.propagate import UpdateRule, propagate
from pulses.pulse import SalientPulse
from pulses.sweep import downscale
from store.index import HnswIndex


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


def replay(
    rt: Runtime, progress: Callable[[int], None] | None = None, rule: UpdateRule | None = None
) -> tuple[InMemorySalience, HnswIndex]:
    """Fresh salience and an in-memory index from the journal (nothing is written).

    `rule`, when given, propagates every pulse with that update rule instead of the
    journaled one: the same log under another rule, for an A/B of the two.
    """
    db, cfg = rt.db, rt.config
    index = HnswIndex.create(
        cfg.index_path,
        rt.embedder.dim,
        rt.embedder.index_version,
        m=cfg.index.m,
        ef_construction=cfg.index.ef_construction,
        ef=cfg.index.ef,
    )
    state = InMemorySalience()
    kinds: dict[int, str] = {}
    decayed_at: dict[int, int] = {}
    rowid_of = db.rowids_by_hash()
    for steps, (_seq, kind, ref, body, _at) in enumerate(db.journal_entries(), 1):
        if kind == "chunk":
            rowid = int(body["rowid"])
            vector = db.embedding_of_rowid(rowid)
            if vector is None:
                raise RebuildError(f"chunk {rowid} was admitted but has no stored embedding")
            # Journals written before salience started from importance say nothing: 1.0 then.
            state.add(rowid, float(body.get("initial", 1.0)))
            if body["pin_floor"] > 0:
                state.pin(rowid, float(body["pin_floor"]))
            kinds[rowid] = str(body["kind"])
            decayed_at[rowid] = int(body["decay_from_ms"])
            index.add(np.array([rowid], dtype=np.int64), vector[None, :])
        elif kind == "pulse":
            pulse = SalientPulse.from_json(body["pulse"])
            propagate(pulse, index, state, rule or UpdateRule(body["rule"]))
        elif kind in ("tombstone", "supersede"):
            if kind == "supersede":
                old, new = body["old"], body["new"]
                if old is not None and new is not None and _live(state, old) and _live(state, new):
                    state.set_salience(int(new), state.salience(int(old)))
                target = old
            else:
                target = rowid_of.get(ref)
            if target is not None and _live(state, int(target)):
                state.tombstone(int(target))
                index.mark_deleted(np.array([int(target)], dtype=np.int64))
        elif kind == "sweep":
            # Cold, not gone: it leaves the index (pulses cannot reach it) but keeps decaying.
            index.mark_deleted(np.array([int(body["rowid"])], dtype=np.int64))
        elif kind == "revive":
            rowid = int(body["rowid"])
            vector = db.embedding_of_rowid(rowid)
            if vector is None:
                raise RebuildError(f"chunk {rowid} was revived but has no stored embedding")
            index.restore(np.array([rowid], dtype=np.int64), vector[None, :])
        elif kind == "reconsolidate":
            # A chunk pinned before it was admitted carries the floor in its chunk step.
            if int(body["rowid"]) in state.labels():
                state.pin(int(body["rowid"]), float(body["pin_floor"]))
        elif kind == "downscale":
            now_ms = int(body["now_ms"])
            # The half-lives that downscale used; the current config only for older journals.
            half_lives = body.get("half_life_s", {})
            for label in state.labels():
                if state.is_tombstoned(label):
                    continue
                elapsed_s = (now_ms - decayed_at[label]) / 1000.0
                half_life = half_lives.get(kinds[label]) or cfg.downscale.half_life(kinds[label])
                value = downscale(
                    state.salience(label), state.pin_floor(label), elapsed_s, float(half_life)
                )
                state.set_salience(label, value)
                decayed_at[label] = now_ms
        if progress:
            progress(steps)
    return state, index


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
    index.save(db.change_stamp())
    counts = db.journal_counts()
    return RebuildReport(
        steps=sum(counts.values()),
        chunks=counts.get("chunk", 0),
        pulses=counts.get("pulse", 0),
        live=index.live_count,
        changed=len(differences),
        max_difference=max(differences.values(), default=0.0),
    )
