"""The three efficacy metrics of the learning loop, measured on this peer during dream cycles.

The math is pulses/efficacy.py; this module gathers its inputs. Decisions are
the attributions recorded in the look-back window; a chunk's credit is the sum
of the rewards of converted outcomes that cited it (or, when an outcome cited
nothing, that had it in context); salience is the live chunks' current value.
Counterfactual replay is the prune gate with nothing doomed: the successful
decisions of the window (at most `sweep.gate_decisions`, newest first) ranked
again against the current state.

Every `efficacy.interval_s` (the first time at the first cycle) `promote` calls
`maybe_record`: one observation of type EFFICACY_TYPE per metric and window,
updated in place, never admitted, embedded or recalled; and the gauge
`dreamcycle_efficacy{metric, window}`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final, cast

from dreamcycle.daemon.config import Config
from dreamcycle.daemon.memory.forgetting import prune_gate
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.efficacy import (
    ATTRIBUTION_CORRELATION,
    COUNTERFACTUAL_REPLAY,
    RECALL_HIT_RATE,
    attribution_correlation,
    recall_hit_rate,
)
from dreamcycle.store import efficacy_rows
from dreamcycle.store.database import Database
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.salience import SalienceCache
from dreamcycle.store.timefmt import iso_from_ms

log = logging.getLogger("dreamcycle.efficacy")

LAST_EFFICACY_META_KEY: Final = "last_efficacy_ms"
TOPIC_PREFIX: Final = "efficacy"

_DAY_S: Final = 86_400
_HOUR_S: Final = 3_600

#: What each metric's n counts.
_COUNTED: Final = {
    RECALL_HIT_RATE: "decisions",
    ATTRIBUTION_CORRELATION: "credited chunks",
    COUNTERFACTUAL_REPLAY: "successful decisions replayed",
}


@dataclass(frozen=True)
class Inputs:
    """What metrics 1 and 2 need from the log of decisions, as rowids of chunks held here."""

    #: Per decision in the window, the chunks it had in context (those stored here).
    contexts: list[list[int]]
    #: Summed reward of converted outcomes, per credited chunk stored here.
    credit: dict[int, float]


@dataclass(frozen=True)
class Measurement:
    metric: str
    value: float | None
    #: How many things it was measured over (see _COUNTED).
    n: int
    #: The look-back window, as a label ("7d").
    window: str

    def sentence(self, now_ms: int) -> str:
        value = "n/a (nothing to measure yet)" if self.value is None else f"{self.value:.3f}"
        return (
            f"Efficacy {self.metric} = {value} over {self.n} {_COUNTED[self.metric]} "
            f"in the last {self.window} (measured {iso_from_ms(now_ms)})."
        )


def window_label(window_s: float) -> str:
    """'7d', '12h' or '90s': days when whole days, else hours when whole hours, else seconds."""
    if window_s <= 0:
        raise ValueError(f"an efficacy window must be > 0 seconds, got {window_s}")
    if window_s != int(window_s):
        return f"{window_s:g}s"
    seconds = int(window_s)
    if seconds % _DAY_S == 0:
        return f"{seconds // _DAY_S}d"
    if seconds % _HOUR_S == 0:
        return f"{seconds // _HOUR_S}h"
    return f"{seconds}s"


def topic_key(metric: str, window: str) -> str:
    return f"{TOPIC_PREFIX}/{metric}/{window}"


# ---- inputs -----------------------------------------------------------------------------


def gather(db: Database, since_ms: int) -> Inputs:
    """Decisions recorded at or after `since_ms` and the credit their outcomes gave."""
    rowids: dict[str, int | None] = {}

    def rowid_of(digest: str) -> int | None:
        if digest not in rowids:
            obs = db.observation_by_hash(digest)
            rowids[digest] = None if obs is None else obs.rowid
        return rowids[digest]

    contexts = [
        [label for digest in chunks if (label := rowid_of(digest)) is not None]
        for _decision, chunks in efficacy_rows.attributions_since(db, since_ms)
    ]
    credit: dict[int, float] = {}
    for outcome in efficacy_rows.converted_outcomes_since(db, since_ms):
        for digest in outcome.cited or outcome.attributed:
            label = rowid_of(digest)
            if label is not None:
                credit[label] = credit.get(label, 0.0) + outcome.reward
    return Inputs(contexts=contexts, credit=credit)


def held_salience(cache: SalienceCache, db: Database) -> dict[int, float]:
    """Salience of the live chunks (neither tombstoned nor cold), efficacy rows left out."""
    recorded = efficacy_rows.efficacy_rowids(db)
    return {label: cache.salience(label) for label in cache.live() if label not in recorded}


def learned(inputs: Inputs, salience: Mapping[int, float], window: str) -> list[Measurement]:
    """Metrics 1 and 2 of `salience` (the current state's, or a replay's)."""
    decisions = sum(1 for context in inputs.contexts if any(c in salience for c in context))
    credited = sum(1 for label in inputs.credit if label in salience)
    return [
        Measurement(RECALL_HIT_RATE, recall_hit_rate(inputs.contexts, salience), decisions, window),
        Measurement(
            ATTRIBUTION_CORRELATION,
            attribution_correlation(inputs.credit, salience),
            credited,
            window,
        ),
    ]


def replayed(peer: Peer, now_ms: int, window_s: float) -> Measurement:
    """Metric 3: the share of chunks the window's successful decisions found that recall
    finds now (the prune gate, nothing doomed, looking back over `window_s`)."""
    config = replace(peer.config, sweep=replace(peer.config.sweep, gate_window_s=window_s))
    view = _ReadOnlyPeer(peer.runtime, peer.index, peer.salience, config)
    report = prune_gate(cast(Peer, view), doomed=[], now_ms=now_ms)
    return Measurement(
        COUNTERFACTUAL_REPLAY, report.replay_rate, report.decisions, window_label(window_s)
    )


def measure(peer: Peer, now_ms: int, window_s: float) -> list[Measurement]:
    """The three metrics of the current state, in pulses.efficacy.METRICS order."""
    window = window_label(window_s)
    inputs = gather(peer.db, now_ms - int(window_s * 1000))
    found = learned(inputs, held_salience(peer.salience, peer.db), window)
    found.append(replayed(peer, now_ms, window_s))
    return found


def compute(peer: Peer, now_ms: int, window_s: float) -> dict[str, float | None]:
    """Metric name -> value (None when there is nothing to measure)."""
    return {m.metric: m.value for m in measure(peer, now_ms, window_s)}


# ---- during cycles ----------------------------------------------------------------------


def maybe_record(peer: Peer, now_ms: int) -> dict[str, Any]:
    """When due, measure, record one observation per metric and set the gauges.

    A failure is logged and reported in the stats: a metric must not stop the cycle.
    """
    cfg = peer.config.efficacy
    if not cfg.enabled:
        return {"skipped": "disabled"}
    db = peer.db
    last = db.get_meta(LAST_EFFICACY_META_KEY)
    if last is not None and now_ms - int(last) < cfg.interval_s * 1000:
        return {"skipped": "not due"}
    window = window_label(cfg.window_s)
    try:
        found = measure(peer, now_ms, cfg.window_s)
        created = 0
        with db.transaction():
            for m in found:
                _rowid, new = efficacy_rows.record(
                    db,
                    topic_key=topic_key(m.metric, window),
                    title=m.metric,
                    content=m.sentence(now_ms),
                    origin_peer=peer.peer_id,
                    now_ms=now_ms,
                )
                created += new
            db.set_meta(LAST_EFFICACY_META_KEY, str(now_ms))
    except Exception as exc:
        log.warning("efficacy not measured", exc_info=True, extra={"error": str(exc)})
        return {"failed": f"{type(exc).__name__}: {exc}"}
    values = {m.metric: m.value for m in found}
    metrics.record_efficacy(values, window)
    return {
        "window": window,
        **values,
        "n": {m.metric: m.n for m in found},
        "created": created,
        "updated": len(found) - created,
    }


# ---- read-only access for the CLI ---------------------------------------------------------


@dataclass(frozen=True)
class _ReadOnlyPeer:
    """What the prune gate and `measure` read from a Peer, without opening the log.

    `Runtime.open_peer` probes the log (a write) and may save a rebuilt index over
    the daemon's; this view does neither, so the CLI is safe while the daemon runs.
    Its config may differ from the runtime's (the gate's window is the metric's).
    """

    runtime: Runtime
    index: HnswIndex
    salience: SalienceCache
    config: Config

    @property
    def db(self) -> Database:
        return self.runtime.db

    @property
    def peer_id(self) -> str:
        return self.runtime.peer_id


def read_only_peer(rt: Runtime) -> Peer:
    """A Peer for measuring only: the saved index if current, else one built in memory."""
    view = _ReadOnlyPeer(rt, _index_for_reading(rt), SalienceCache(rt.db), rt.config)
    return cast(Peer, view)


def _index_for_reading(rt: Runtime) -> HnswIndex:
    cfg, version, dim = rt.config, rt.embedder.index_version, rt.embedder.dim
    saved = rt.saved_index(rt.db.change_stamp())
    if saved is not None:
        return saved
    index = HnswIndex.create(
        cfg.index_path,
        dim,
        version,
        m=cfg.index.m,
        ef_construction=cfg.index.ef_construction,
        ef=cfg.index.ef,
    )
    live, vectors, _dead = rt.db.embeddings(version, dim)
    if len(live):
        index.add(live, vectors)
    return index  # never saved: the daemon owns the file
