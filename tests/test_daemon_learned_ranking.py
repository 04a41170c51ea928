"""What recall learns, judged on the store's own new questions, in-process on real text.

A cited success is a held-back question first: before its keys are taught, its cited
chunks are ranked with the store's keys and without them (the gain is booked against the
similarity band of the query's closest key), and only a success no key helped find
teaches the vector/word split.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.recall.learned_ranking import (
    INTRINSIC_META_KEY,
    KEY_GATE_META_KEY,
    intrinsic_evidence,
    intrinsic_strength,
    key_gate,
    open_key_bands,
    split_evidence,
)
from dreamcycle.daemon.recall.retrieval_keys import KeyUse, key_scores_of
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.evidence import MIN_EVIDENCE, GridEvidence, PairedGain
from dreamcycle.pulses.intrinsic import STRENGTHS
from dreamcycle.pulses.key_gate import BAND_EDGES, KeyGate, band_of
from dreamcycle.store import retrieval_keys as key_store
from tests.test_daemon_learning import QUERY, START_MS, credit, open_peer, rowid_of


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def peer(tmp_path: Path, clock: ManualClock) -> Iterator[Peer]:
    yield from open_peer(tmp_path, clock)


def test_a_question_asked_again_books_what_its_key_did_in_the_top_band(peer: Peer) -> None:
    cited, _ = credit(peer, 1.0, cite=3)  # teaches QUERY as a key of the fourth hit
    assert key_gate(peer.db) == KeyGate()  # no key was near the first time: no evidence
    before = split_evidence(peer.db, peer.config).evidence
    rank = {use: _rank_of(peer, cited, use) for use in (KeyUse.ALL, KeyUse.NONE)}
    assert rank[KeyUse.ALL] == 1 < rank[KeyUse.NONE]
    again, _ = credit(peer, 1.0, cite=0)  # asked again: the key made that chunk first
    assert again == cited
    top = key_gate(peer.db).bands[band_of(1.0) or 0]
    assert top.n == 1
    assert top.mean == pytest.approx(1 - 1 / rank[KeyUse.NONE])
    # Found through a key, the success says nothing about which list finds answers.
    assert split_evidence(peer.db, peer.config).evidence == before


def _rank_of(peer: Peer, digest: str, keys: KeyUse) -> int:
    query = peer.embedder.embed_one(QUERY)
    pool = peer.config.recall.candidates
    hits = rank_query(peer.runtime, QUERY, query, pool, index=peer.index, keys=keys)
    return [h.content_hash for h in hits].index(digest) + 1


def _key_at(peer: Peer, rowid: int, query: np.ndarray, cosine: float) -> None:
    """Give chunk `rowid` one key exactly `cosine`-similar to `query`."""
    other = np.zeros_like(query)
    other[int(np.argmin(np.abs(query)))] = 1.0
    other -= float(np.dot(other, query)) * query
    other /= np.linalg.norm(other)
    key = (cosine * query + np.sqrt(1 - cosine**2) * other).astype(np.float32)
    with peer.db.transaction():
        key_store.replace_keys(
            peer.db, rowid, [key_store.StoredKey(rowid, key, None, 1.0, peer.now_ms())]
        )


def test_a_key_ranks_only_in_a_band_the_gate_opened(peer: Peer) -> None:
    query = peer.embedder.embed_one(QUERY)
    cited, _ = credit(peer, 1.0, cite=0)
    target = rowid_of(peer, cited)
    _key_at(peer, target, query, 0.91)  # a resembling question, not the same one
    stamp = peer.db.change_stamp()
    assert target in key_scores_of(peer.runtime, query, stamp, KeyUse.ALL)
    assert target not in key_scores_of(peer.runtime, query, stamp, KeyUse.GATED)
    # The store's new questions showed keys this close help: the band opens.
    gate = KeyGate()
    for i in range(MIN_EVIDENCE):
        gate = gate.observe(0.91, 0.3 if i % 2 else 0.2)
    peer.db.set_meta(KEY_GATE_META_KEY, json.dumps(gate.to_json()))
    assert open_key_bands(peer.db, peer.config)[BAND_EDGES.index(0.90)]
    assert target in key_scores_of(peer.runtime, query, stamp, KeyUse.GATED)
    assert key_scores_of(peer.runtime, query, stamp, KeyUse.NONE) == {}


def test_the_gate_off_uses_every_band_and_unreadable_starts_again(
    tmp_path: Path, clock: ManualClock
) -> None:
    for peer in open_peer(tmp_path, clock, **{"learning.key_gate": False}):
        assert all(open_key_bands(peer.db, peer.config))
        peer.config.learning.key_gate = True
        peer.db.set_meta(KEY_GATE_META_KEY, "{not json")
        assert key_gate(peer.db) == KeyGate()
        assert open_key_bands(peer.db, peer.config) == KeyGate().open_bands()


def test_a_success_no_key_found_judges_the_prior_over_sizes(peer: Peer) -> None:
    assert intrinsic_evidence(peer.db).evidence == 0
    credit(peer, 1.0, cite=2)
    assert intrinsic_evidence(peer.db).evidence == 1
    assert intrinsic_strength(peer.db, peer.config) == 0.0  # one question is no evidence
    # Clear evidence for the strongest prior: recall ranks with it.
    clear = GridEvidence(STRENGTHS, tuple(PairedGain(MIN_EVIDENCE, 0.3, 0.01) for _ in STRENGTHS))
    peer.db.set_meta(INTRINSIC_META_KEY, json.dumps(clear.to_json()))
    assert intrinsic_strength(peer.db, peer.config) == 0.05  # ties: the weaker
    peer.config.learning.intrinsic_prior = False
    assert intrinsic_strength(peer.db, peer.config) == 0.0
