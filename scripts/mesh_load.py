"""What a mesh of daemons is given to do, and how long it took every peer to apply it.

Every peer holds the same chunks (paragraphs of the standard library's documentation), so
pulses reach the same neighbourhoods everywhere and salience can be compared bit for bit.
Pulses are small Reward and Decay pulses seeded at stored chunks (what reinforce and
penalize queue); outcomes follow a recall by a chunk's stored embedding, recorded, citing
its first hit (the origin turns each into Reward or Decay pulses in its next cycle). Both
are queued in this process through the functions `pulse-emit` and `recall` use, against
the peer's database while its daemon runs. Strengths are small so that thousands of pulses
leave salience away from the clamps at 0 and 1, where the order of application would
matter more than rounding.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from pydoc_data.topics import topics
from typing import Final

import apsw

from dreamcycle.daemon import defaults
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.recall.retrieve import rank_query, record_attribution
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.store.timefmt import ms_from_iso
from scripts.mesh_peers import MeshPeer

#: Paragraphs shorter than this are headings or fragments, not memories.
MIN_PARAGRAPH_CHARS: Final = 80
PULSE_STRENGTH: Final = (0.002, 0.01)
OUTCOME_REWARD: Final = 0.05
REASON: Final = "mesh/load"
HITS_PER_DECISION: Final = 3
BUSY_RETRIES: Final = 10
BUSY_RETRY_PAUSE_S: Final = 1.0


def documentation_rows(count: int) -> list[dict[str, str]]:
    """`count` distinct paragraphs of the standard library's documentation, as JSONL rows."""
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    for name in sorted(topics):
        for paragraph in topics[name].split("\n\n"):
            text = paragraph.strip()
            if len(text) >= MIN_PARAGRAPH_CHARS and text not in seen:
                seen.add(text)
                rows.append({"content": text, "title": name})
                if len(rows) == count:
                    return rows
    raise ValueError(f"the documentation has only {len(rows)} paragraphs, {count} asked for")


def write_rows(path: Path, rows: Sequence[dict[str, str]]) -> Path:
    import json

    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


class Emitter:
    """Queues pulses and outcomes on one peer, as `pulse-emit` would."""

    def __init__(self, peer: MeshPeer, seed: int) -> None:
        self.peer = peer
        self.rt: Runtime = peer.runtime()
        self.rng = random.Random(seed)
        self.hashes = [
            str(r[0])
            for r in self.rt.db.fetch_all(
                "SELECT content_hash FROM observations WHERE embedding IS NOT NULL "
                "AND admitted_seq IS NOT NULL AND type != 'efficacy' ORDER BY id"
            )
        ]
        self.sent = 0

    def pulse(self) -> str:
        return _retried(self._pulse)

    def outcome(self) -> str:
        """A recorded recall by a stored chunk's embedding, and its outcome."""
        return _retried(self._outcome)

    def _pulse(self) -> str:
        self.sent += 1
        request = PulseRequest(
            text="",
            kind=self.rng.choice((PulseKind.REWARD, PulseKind.DECAY)),
            strength=self.rng.uniform(*PULSE_STRENGTH),
            sigma=defaults.PULSE_SIGMA,
            k=defaults.PULSE_K,
            max_hops=defaults.PULSE_MAX_HOPS,
            decay_per_hop=defaults.PULSE_DECAY_PER_HOP,
            ttl_s=defaults.PULSE_TTL_S,
            reason=REASON,
            nonce=f"{self.peer.peer_id} {self.sent}",
            seed_chunk=self.rng.choice(self.hashes),
        )
        return emit_pulse(self.rt, request).entry_id

    def _outcome(self) -> str:
        self.sent += 1
        seed = self.rng.choice(self.hashes)
        vector = self.rt.db.embedding_of_hash(seed, self.rt.embedder.index_version)
        assert vector is not None
        query = f"mesh question {self.peer.peer_id} {self.sent}"
        hits = rank_query(self.rt, query, vector, HITS_PER_DECISION)
        decision = record_attribution(self.rt, hits, query, query, vector)
        reward = OUTCOME_REWARD if self.rng.random() < 0.5 else -OUTCOME_REWARD
        return emit_outcome(
            self.rt, decision=decision, reward=reward, reason=REASON, cited=[hits[0].content_hash]
        ).entry_id

    def close(self) -> None:
        self.rt.close()


def _retried(queue: Callable[[], str]) -> str:
    """`queue()`, again while the daemon holds the write lock past the busy timeout (on a
    loaded machine a phase's transaction can), as a user would run `pulse-emit` again."""
    for _ in range(BUSY_RETRIES - 1):
        try:
            return queue()
        except apsw.BusyError:
            time.sleep(BUSY_RETRY_PAUSE_S)
    return queue()


@dataclass(frozen=True)
class Delivery:
    """How long the pulses the mesh originated took to reach every peer."""

    pulses: int
    #: Per pulse, from its origin applying (and publishing) it to the last peer applying it.
    seconds_p50: float
    seconds_p99: float
    seconds_max: float
    #: Per pulse and peer, the cycles that peer started from the origin's applying it up to
    #: the one that applied it (1: the first poll after it was published).
    polls_p50: float
    polls_max: int


def delivery(peers: Sequence[MeshPeer], peer_ids: Sequence[str]) -> Delivery:
    """Delivery of every pulse that a peer of `peer_ids` originated, to those peers."""
    import numpy as np

    chosen = [p for p in peers if p.peer_id in peer_ids]
    applied: dict[str, dict[str, int]] = {}
    origin_of: dict[str, str] = {}
    starts: dict[str, list[int]] = {}
    for peer in chosen:
        rows = peer.query("SELECT pulse_id, applied_at, origin_peer FROM applied_pulses "
                          "WHERE status = 'applied'")  # fmt: skip
        applied[peer.peer_id] = {str(p): ms_from_iso(str(at)) for p, at, _ in rows}
        for pulse_id, _, origin in rows:
            if origin == peer.peer_id:
                origin_of[str(pulse_id)] = peer.peer_id
        starts[peer.peer_id] = sorted(
            ms_from_iso(str(r[0])) for r in peer.query("SELECT started_at FROM cycles")
        )
    spans, polls = [], []
    for pulse_id, origin in origin_of.items():
        published = applied[origin][pulse_id]
        last = published
        for peer in chosen:
            at = applied[peer.peer_id].get(pulse_id)
            if at is None or peer.peer_id == origin:
                continue
            last = max(last, at)
            began = starts[peer.peer_id]
            polls.append(sum(1 for s in began if published <= s <= at))
        spans.append((last - published) / 1000)
    if not spans:
        return Delivery(0, 0.0, 0.0, 0.0, 0.0, 0)
    return Delivery(
        pulses=len(spans),
        seconds_p50=float(np.percentile(spans, 50)),
        seconds_p99=float(np.percentile(spans, 99)),
        seconds_max=max(spans),
        polls_p50=float(np.percentile(polls, 50)) if polls else 0.0,
        polls_max=max(polls, default=0),
    )
