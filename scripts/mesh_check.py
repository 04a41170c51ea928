"""Checks of a mesh of daemons: nothing applied twice, and salience reproduced bit for bit.

Replaying a peer's order: its admitted chunks (from its journal, in admission order) are
indexed as the daemon indexed them, and the pulses it journaled are propagated in the order
it applied them, as the daemon does. The replay must give exactly the salience the peer
stored: then any difference between two peers holding the same chunks comes from the order
in which they applied the same pulses, and nothing else (floating-point sums in another
order, or a clamp at 1.0 or a pin floor that one order hits and the other does not).
Used by scripts/mesh_run.py, scripts/chaos.py and the tests of meshes of daemons.
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dreamcycle.pulses.memory import InMemorySalience
from dreamcycle.pulses.propagate import UpdateRule, propagate
from dreamcycle.pulses.pulse import SalientPulse
from dreamcycle.store.database import initial_salience
from dreamcycle.store.index import HnswIndex


class Replica(Protocol):
    """A peer whose database can be read."""

    @property
    def peer_id(self) -> str: ...

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def salience(self) -> dict[str, float]: ...


def journal_pulse_order(peer: Replica) -> list[str]:
    return [
        str(r[0]) for r in peer.query("SELECT ref FROM journal WHERE kind = 'pulse' ORDER BY seq")
    ]


@dataclass(frozen=True)
class Replay:
    salience: dict[str, float]  # content hash -> salience
    clamped: frozenset[str]  # chunks where at least one update was clamped


@dataclass(frozen=True)
class ReplicaComparison:
    same_order: bool
    differing: int
    explained_by_clamping: int
    rounding_only: int
    max_difference: float


def admitted_chunks(peer: Replica) -> list[tuple[int, str, float, bytes, str]]:
    """(rowid, content hash, pin floor, embedding blob, index version) in admission order."""
    rows = peer.query(
        "SELECT o.id, o.content_hash, o.pin_floor, o.embedding, o.index_version "
        "FROM journal j JOIN observations o ON o.id = json_extract(j.body, '$.rowid') "
        "WHERE j.kind = 'chunk' ORDER BY j.seq"
    )
    return [(int(r[0]), str(r[1]), float(r[2]), bytes(r[3]), str(r[4])) for r in rows]


def journal_pulses(peer: Replica) -> dict[str, SalientPulse]:
    rows = peer.query("SELECT ref, body FROM journal WHERE kind = 'pulse'")
    return {str(ref): SalientPulse.from_json(json.loads(body)["pulse"]) for ref, body in rows}


def replay(
    chunks_of: Replica, order: Sequence[str], pulses: Mapping[str, SalientPulse], workdir: Path
) -> Replay:
    """Build the index as `chunks_of` built it, then apply `order` as the daemon does."""
    chunks = admitted_chunks(chunks_of)
    vectors = np.stack([np.frombuffer(blob, dtype="<f4") for _, _, _, blob, _ in chunks])
    index = HnswIndex.create(
        workdir / f"replay-{uuid.uuid4().hex}.hnsw", vectors.shape[1], chunks[0][4]
    )
    state = InMemorySalience()
    importance = {
        int(i): int(v) for i, v in chunks_of.query("SELECT id, importance FROM observations")
    }
    for rowid, _, floor, _, _ in chunks:
        state.add(rowid, initial_salience(importance[rowid]))  # as ingest stored it
        if floor > 0:
            state.pin(rowid, floor)
    index.add(np.array([c[0] for c in chunks], dtype=np.int64), vectors.astype(np.float32))
    clamped: set[int] = set()
    for pulse_id in order:
        for change in propagate(pulses[pulse_id], index, state, UpdateRule.BFS).changes:
            if change.clamped:
                clamped.add(change.label)
    hash_of = {rowid: digest for rowid, digest, _, _, _ in chunks}
    return Replay(
        salience={hash_of[label]: state.salience(label) for label in hash_of},
        clamped=frozenset(hash_of[label] for label in clamped),
    )


def compare_replicas(reference: Replica, other: Replica, workdir: Path) -> ReplicaComparison:
    """Assert `other` agrees with `reference` bit for bit, except on chunks a clamp touched
    (there the order of application matters)."""
    ref_chunks, other_chunks = admitted_chunks(reference), admitted_chunks(other)
    assert [(c[1], c[2], c[3]) for c in ref_chunks] == [(c[1], c[2], c[3]) for c in other_chunks], (
        f"{reference.peer_id} and {other.peer_id} must admit the same chunks, with the same "
        "embeddings, in the same order (else their k-NN graphs differ)"
    )
    pulses = {**journal_pulses(reference), **journal_pulses(other)}
    ref_order, other_order = journal_pulse_order(reference), journal_pulse_order(other)
    stored_ref, stored_other = reference.salience(), other.salience()
    replay_ref = replay(reference, ref_order, pulses, workdir)
    replay_other = replay(reference, other_order, pulses, workdir)
    # The replays reproduce what each daemon stored, bit for bit: so any difference
    # between the peers comes from the order of application and nothing else.
    assert replay_ref.salience == stored_ref, f"replaying {reference.peer_id}'s order"
    assert replay_other.salience == stored_other, f"replaying {other.peer_id}'s order"
    differences = {
        digest: abs(stored_ref[digest] - stored_other[digest])
        for digest in stored_ref
        if stored_ref[digest] != stored_other[digest]
    }
    max_difference = max(differences.values(), default=0.0)
    clamped = replay_ref.clamped | replay_other.clamped
    rounding = {digest: diff for digest, diff in differences.items() if digest not in clamped}
    comparison = ReplicaComparison(
        same_order=ref_order == other_order,
        differing=len(differences),
        explained_by_clamping=len(differences) - len(rounding),
        rounding_only=len(rounding),
        max_difference=max_difference,
    )
    if comparison.same_order:
        assert max_difference == 0.0, f"same order, yet salience differs: {comparison}"
    assert rounding == {}, f"chunks that hit no clamp differ: {rounding}"
    return comparison


@dataclass(frozen=True)
class OnceReport:
    """What one peer applied of the pulses the mesh originated."""

    peer: str
    expected: int
    applied: int
    missing: int
    unexpected: int
    not_applied: dict[str, int]
    journaled_twice: int

    @property
    def exactly_once(self) -> bool:
        return self.missing == self.unexpected == self.journaled_twice == 0 and not self.not_applied


def originated_pulses(peers: Sequence[Replica]) -> set[str]:
    """Every pulse some peer of `peers` applied as its own origin: what each must apply."""
    return {
        str(row[0])
        for peer in peers
        for row in peer.query(
            "SELECT pulse_id FROM applied_pulses WHERE origin_peer = ? AND status = 'applied'",
            (peer.peer_id,),
        )
    }


def exactly_once(peer: Replica, expected: set[str]) -> OnceReport:
    """Whether `peer` applied each of `expected` once, and nothing else: every pulse it
    recorded is applied, and its journal holds each pulse once."""
    statuses = {
        str(p): str(s) for p, s in peer.query("SELECT pulse_id, status FROM applied_pulses")
    }
    applied = {p for p, s in statuses.items() if s == "applied"}
    not_applied: dict[str, int] = {}
    for status in statuses.values():
        if status != "applied":
            not_applied[status] = not_applied.get(status, 0) + 1
    order = journal_pulse_order(peer)
    return OnceReport(
        peer=peer.peer_id,
        expected=len(expected),
        applied=len(applied),
        missing=len(expected - applied),
        unexpected=len(applied - expected),
        not_applied=not_applied,
        journaled_twice=len(order) - len(set(order)),
    )


def bit_identical_replay(peer: Replica, workdir: Path) -> bool:
    """Whether replaying `peer`'s own order over its own chunks gives, bit for bit, the
    salience it stored."""
    return replay(peer, journal_pulse_order(peer), journal_pulses(peer), workdir).salience == (
        peer.salience()
    )


@dataclass(frozen=True)
class Agreement:
    """How far the peers' stored salience agrees on the chunks every one of them holds."""

    common: int
    #: Chunks whose salience is the same float on every peer.
    identical: int
    #: Per peer, the common chunks whose salience differs from the first peer's.
    differing: dict[str, int]
    max_difference: float


def agreement(peers: Sequence[Replica]) -> Agreement:
    """Compare the peers' salience, bit for bit, on the chunks all of them hold."""
    stored = {p.peer_id: p.salience() for p in peers}
    common = set.intersection(*(set(s) for s in stored.values()))
    reference = stored[peers[0].peer_id]
    differing = {
        peer: sum(1 for h in common if values[h] != reference[h]) for peer, values in stored.items()
    }
    spread = [
        max(s[h] for s in stored.values()) - min(s[h] for s in stored.values()) for h in common
    ]
    return Agreement(
        common=len(common),
        identical=sum(1 for d in spread if d == 0.0),
        differing=differing,
        max_difference=max(spread, default=0.0),
    )


def outbox_drained(peer: Replica) -> bool:
    """Whether `peer` has applied and published every entry it queued."""
    rows = peer.query("SELECT count(*) FROM outbox WHERE applied = 0 OR segment_seq IS NULL")
    return int(rows[0][0]) == 0


class Settled:
    """A probe of a mesh catching up, to poll until it holds: every peer applied and
    published what it queued, the pulses the peers originated (and `also()`) stopped
    growing for `polls` polls in a row, and every peer applied each of them. `expected` is
    the set the last poll found.

    A set that stays the same proves nothing while queues are full: on a loaded machine
    the peers may not have applied anything yet."""

    def __init__(
        self,
        peers: Callable[[], Sequence[Replica]],
        polls: int,
        also: Callable[[], set[str]] = set,
    ) -> None:
        self.peers = peers
        self.also = also
        self.polls = polls
        self.seen: deque[set[str]] = deque(maxlen=polls + 1)

    @property
    def expected(self) -> set[str]:
        return self.seen[-1] if self.seen else set()

    def __call__(self) -> bool:
        peers = self.peers()
        if not all(outbox_drained(p) for p in peers):
            self.seen.clear()
            return False
        expected = originated_pulses(peers) | self.also()
        self.seen.append(expected)
        stable = len(self.seen) > self.polls and self.seen[0] == expected
        return stable and all(exactly_once(p, expected).missing == 0 for p in peers)
