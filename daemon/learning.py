"""Outcomes into learning: who gets credit, salience pulses, and retrieval keys.

Only the peer that made a decision knows what it recalled (in rank order) and
the query, so only it converts an outcome: credit by pulses.credit, Reward or
Decay pulses seeded at the credited chunks, and a retrieval key per credited
chunk. Pulses and keys are published, so every peer learns from one success.
Cited successes also teach how recall splits its trust between vectors and
words (pulses.fusion); that split is this peer's own and is not published.
"""

from __future__ import annotations

import json
import logging

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.config import Config
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses import fusion
from dreamcycle.pulses.credit import Credit, CreditRule, assign_credit
from dreamcycle.pulses.keys import LearnedKey, learn
from dreamcycle.pulses.outcome import Attribution, Outcome, outcome_to_pulses
from dreamcycle.store import keys as key_store
from dreamcycle.store.database import AttributionRecord, Database
from dreamcycle.store.lexical import search_lexical
from dreamcycle.zeitgeist.entries import PulseEntry, RetrievalKeyEntry, encode_entry

log = logging.getLogger("dreamcycle.learning")

#: meta key holding what cited successes taught about recall's vector/word split.
FUSION_META_KEY = "recall_fusion_scores"


def convert_outcomes(peer: Peer, now_ms: int) -> tuple[list[PulseEntry], int]:
    """Pulses (queued for publishing) and keys learned for waiting outcomes of our decisions.

    Returns the pulse entries and how many keys changed.
    """
    db, cfg = peer.db, peer.config.learning
    derived: list[PulseEntry] = []
    keys_changed = 0
    # Converting outcomes adds, removes and moves no chunk: one stamp serves them all.
    stamp: str | None = None
    for record in db.waiting_outcomes():
        attribution = db.attribution(record.decision_hash)
        if attribution is None:
            if record.expires_ms < now_ms:
                db.settle_outcome(record.outcome_id, "expired")
            continue
        if attribution.peer != peer.peer_id:
            db.settle_outcome(record.outcome_id, "foreign")
            continue
        outcome = Outcome(
            decision_hash=record.decision_hash,
            reward=record.reward,
            observer_peer=record.observer_peer,
            ts=record.hlc,
            reason=record.reason,
        )
        try:
            credits = assign_credit(
                attribution.ranked,
                record.cited,
                record.reward,
                CreditRule(cfg.credit_rule),
                miss_factor=cfg.miss_factor,
            )
            pulses = outcome_to_pulses(
                outcome,
                Attribution(
                    decision_hash=record.decision_hash,
                    chunk_hashes=tuple(attribution.chunk_hashes),
                    peer=attribution.peer,
                    ts=attribution.hlc,
                    decision_text=attribution.decision_text,
                ),
                lambda digest: db.embedding_of_hash(digest, peer.embedder.index_version),
                index_version=peer.embedder.index_version,
                credits=credits,
            )
        except ValueError as exc:  # pure validation: nothing was written
            log.warning(
                "outcome rejected", extra={"outcome": record.outcome_id, "reason": str(exc)}
            )
            db.settle_outcome(record.outcome_id, "rejected")
            continue
        for pulse in pulses:
            entry = PulseEntry(hlc=pulse.ts, origin=peer.peer_id, pulse=pulse)
            # Applied when it propagates: a crash before then leaves it for the next scan.
            if db.outbox_add(entry.id, entry.KIND, entry.hlc, encode_entry(entry), now_ms=now_ms):
                derived.append(entry)
        query = attribution.query_embedding
        if cfg.keys and query is not None:
            for credit in credits:
                if teach_key(
                    peer, credit.chunk_hash, query, attribution.query_text, credit.amount, now_ms
                ):
                    keys_changed += 1
                key_entry = RetrievalKeyEntry(
                    hlc=record.hlc,
                    origin=peer.peer_id,
                    decision_hash=record.decision_hash,
                    chunk_hash=credit.chunk_hash,
                    embedding=query,
                    text=attribution.query_text if cfg.share_key_text else None,
                    amount=credit.amount,
                )
                db.outbox_add(
                    key_entry.id,
                    key_entry.KIND,
                    key_entry.hlc,
                    encode_entry(key_entry),
                    now_ms=now_ms,
                    applied=True,
                )
        if _learns_fusion(peer.config):
            stamp = stamp or db.change_stamp()
            _learn_fusion(peer, attribution, credits, stamp)
        db.settle_outcome(record.outcome_id, "converted", len(pulses))
    return derived, keys_changed


def _learns_fusion(config: Config) -> bool:
    """A list configured off (weight 0) stays off: then there is no split to learn."""
    recall = config.recall
    return config.learning.fusion and recall.vector_weight > 0 and recall.lexical_weight > 0


def fusion_weights(db: Database, config: Config) -> tuple[float, float]:
    """(vector, lexical) weights of recall's fusion: configured, or learned from citations."""
    recall = config.recall
    if not _learns_fusion(config):
        return recall.vector_weight, recall.lexical_weight
    total = recall.vector_weight + recall.lexical_weight
    share = fusion.best_share(split_scores(db), recall.vector_weight / total)
    return fusion.split_weights(share, total)


def split_scores(db: Database) -> fusion.SplitScores:
    """What cited successes taught so far about the vector/word split (empty at first)."""
    stored = db.get_meta(FUSION_META_KEY)
    if stored is None:
        return fusion.SplitScores()
    try:
        data = json.loads(stored)
        return fusion.SplitScores(tuple(float(x) for x in data["scores"]), int(data["evidence"]))
    except (ValueError, KeyError, TypeError) as exc:
        # Derived state: unreadable means start again from the configured split.
        log.warning("fusion scores unreadable; starting again", extra={"reason": str(exc)})
        return fusion.SplitScores()


def _learn_fusion(
    peer: Peer, attribution: AttributionRecord, credits: list[Credit], stamp: str
) -> None:
    """Score every candidate split by where it would have ranked the chunks a success cited."""
    cited_hashes = [c.chunk_hash for c in credits if c.amount > 0]
    query = attribution.query_embedding
    if not cited_hashes or query is None or not attribution.query_text:
        return
    db, recall = peer.db, peer.config.recall
    cited = [obs.rowid for d in cited_hashes if (obs := db.observation_by_hash(d)) is not None]
    state = fusion.observe(
        split_scores(db),
        cited,
        _vector_list(peer, query, recall.candidates, stamp),
        search_lexical(db, attribution.query_text, recall.candidates, cold=None),
        rrf_k=recall.rrf_k,
    )
    db.set_meta(
        FUSION_META_KEY, json.dumps({"scores": list(state.scores), "evidence": state.evidence})
    )


def _vector_list(peer: Peer, query: npt.NDArray[np.float32], pool: int, stamp: str) -> list[int]:
    """The chunks nearest the query by their own embedding, live and cold alike, as recall
    searches them: judged on the live tier alone, a split was scored against a store
    with most of its answers swept away, and learned 0.4 where 0.2 is right."""
    labels, distances = peer.index.knn_many(query[None, :], pool)
    similarity = {
        int(label): 1.0 - float(d) for label, d in zip(labels[0], distances[0], strict=True)
    }
    cold_labels, cold_vectors = peer.runtime.cold_vectors(stamp)
    if len(cold_labels):
        cosines = cold_vectors @ query
        for i in np.argsort(-cosines, kind="stable")[:pool]:
            similarity[int(cold_labels[i])] = float(cosines[i])
    return sorted(similarity, key=lambda label: (-similarity[label], label))[:pool]


def teach_key(
    peer: Peer,
    chunk_hash: str,
    query: npt.NDArray[np.float32],
    text: str | None,
    amount: float,
    now_ms: int,
) -> bool:
    """Learn (amount > 0) or weaken (amount < 0) `query` as a key of the chunk, if held here."""
    db, cfg = peer.db, peer.config.learning
    obs = db.observation_by_hash(chunk_hash)
    # A query embedded by another model (recalled before a change of model) is no key to
    # compare this model's queries with.
    if (
        obs is None
        or obs.deleted_at is not None
        or amount == 0
        or query.shape != (peer.embedder.dim,)
    ):
        return False
    return _relearn(
        db, obs.rowid, query, text, amount, now_ms, cfg.max_keys_per_chunk, cfg.key_half_life_s
    )


def _relearn(
    db: Database,
    rowid: int,
    query: npt.NDArray[np.float32],
    text: str | None,
    amount: float,
    now_ms: int,
    max_keys: int,
    half_life_s: float,
) -> bool:
    before = [
        LearnedKey(embedding=k.embedding, weight=k.weight, updated_ms=k.updated_ms, text=k.text)
        # Keys of another width (another model's) cannot be compared: left out, so the
        # chunk's keys written below no longer hold them.
        for k in key_store.keys_of(db, rowid, dim=len(query))
    ]
    after = learn(
        before, query, amount, now_ms, text=text, max_keys=max_keys, half_life_s=half_life_s
    )
    unchanged = len(after) == len(before) and all(
        a.weight == b.weight and a.updated_ms == b.updated_ms
        for a, b in zip(after, before, strict=True)
    )
    if unchanged:
        return False
    key_store.replace_keys(
        db,
        rowid,
        [
            key_store.StoredKey(rowid, k.embedding, k.text, min(1.0, k.weight), k.updated_ms)
            for k in after
        ],
    )
    return True
