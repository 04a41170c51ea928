"""Outcomes into learning: who gets credit, salience pulses, and retrieval keys.

Only the peer that made a decision knows what it recalled (in rank order) and
the query, so only it converts an outcome: credit by pulses.credit, Reward or
Decay pulses seeded at the credited chunks, and a retrieval key per credited
chunk. Pulses and keys are published, so every peer learns from one success.

Every cited success is first a held-back question: before it teaches anything,
the learned parts of recall are judged on it against the unlearned ranking.
Its cited chunks are ranked with the store's keys and without them, which
judges the keys' similarity band (pulses.key_gate); and, when no key helped
find them, every vector/word split is scored on it against the configured one
(pulses.fusion), every strength of the prior over candidates' sizes against none
(pulses.intrinsic) and, when `learning.cold_weight` is on (off by default: cited
chunks stay live, so they are no witnesses for the answers the sweep moved), every
weight of the cold tier against the configured one (pulses.cold_weight). The verdicts
are this peer's own and are not published.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import numpy.typing as npt

from dreamcycle.daemon.recall.candidates import candidate_pool, tier_sets_at
from dreamcycle.daemon.recall.learned_ranking import (
    COLD_META_KEY,
    INTRINSIC_META_KEY,
    cold_evidence,
    intrinsic_evidence,
    key_gate,
    learns_fusion,
    split_evidence,
    store_evidence,
    store_key_gate,
    store_split_evidence,
)
from dreamcycle.daemon.recall.retrieval_keys import KeyUse, key_scores_of
from dreamcycle.daemon.recall.retrieve import rank_query
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses import cold_weight, fusion, intrinsic
from dreamcycle.pulses.credit import Credit, CreditRule, assign_credit
from dreamcycle.pulses.evidence import reciprocal_rank_gain
from dreamcycle.pulses.outcome import Attribution, Outcome, outcome_to_pulses
from dreamcycle.pulses.ranking import rank_columns
from dreamcycle.pulses.retrieval_keys import LearnedKey, learn
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import AttributionRecord, Database
from dreamcycle.store.lexical import search_lexical
from dreamcycle.zeitgeist.entries import PulseEntry, RetrievalKeyEntry, encode_entry

log = logging.getLogger("dreamcycle.learning")


def convert_outcomes(peer: Peer, now_ms: int) -> tuple[list[PulseEntry], int]:
    """Pulses (queued for publishing) and keys learned for waiting outcomes of our decisions.

    Returns the pulse entries and how many keys changed.
    """
    db, cfg = peer.db, peer.config.learning
    lesson = Lesson()
    # Converting outcomes adds, removes and moves no chunk: one stamp serves them all.
    stamp = db.change_stamp()
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
            pulses = learn_from_credits(peer, outcome, attribution, credits, now_ms, stamp, lesson)
        except ValueError as exc:  # pure validation: nothing was written
            log.warning(
                "outcome rejected", extra={"outcome": record.outcome_id, "reason": str(exc)}
            )
            db.settle_outcome(record.outcome_id, "rejected")
            continue
        db.settle_outcome(record.outcome_id, "converted", pulses)
    return lesson.pulses, lesson.keys_changed


@dataclass
class Lesson:
    """What converting credits taught in one cycle: pulses queued, keys changed."""

    pulses: list[PulseEntry] = field(default_factory=list)
    keys_changed: int = 0


def learn_from_credits(
    peer: Peer,
    outcome: Outcome,
    attribution: AttributionRecord,
    credits: Sequence[Credit],
    now_ms: int,
    stamp: str,
    lesson: Lesson,
    *,
    also_keys_of: Sequence[AttributionRecord] = (),
) -> int:
    """Credits of one decision of ours into Reward / Decay pulses, judged learning and keys.

    The pulses are queued for publishing, and each credited chunk learns the decision's
    query as a key (published too); `also_keys_of` are earlier decisions asking for the
    same thing, whose queries the chunks positively credited learn as well. Raises
    ValueError (nothing written) when the outcome or the credits are invalid. Returns how
    many pulses were queued.
    """
    db, cfg = peer.db, peer.config.learning
    pulses = outcome_to_pulses(
        outcome,
        Attribution(
            decision_hash=outcome.decision_hash,
            chunk_hashes=tuple(attribution.chunk_hashes),
            peer=attribution.peer,
            ts=attribution.hlc,
            decision_text=attribution.decision_text,
        ),
        lambda digest: db.embedding_of_hash(digest, peer.embedder.index_version),
        index_version=peer.embedder.index_version,
        credits=credits,
    )
    for pulse in pulses:
        entry = PulseEntry(hlc=pulse.ts, origin=peer.peer_id, pulse=pulse)
        # Applied when it propagates: a crash before then leaves it for the next scan.
        if db.outbox_add(entry.id, entry.KIND, entry.hlc, encode_entry(entry), now_ms=now_ms):
            lesson.pulses.append(entry)
    _judge_learned_ranking(peer, attribution, credits, stamp)
    if not cfg.keys:
        return len(pulses)
    for asked, credited in _key_lessons(attribution, credits, also_keys_of):
        query = asked.query_embedding
        if query is None:
            continue
        for credit in credited:
            if teach_key(peer, credit.chunk_hash, query, asked.query_text, credit.amount, now_ms):
                lesson.keys_changed += 1
            key_entry = RetrievalKeyEntry(
                hlc=outcome.ts,
                origin=peer.peer_id,
                # Published under the decision whose recall returned the chunk, also for an
                # earlier question of the session: other peers take a key only for a chunk
                # the named decision's attribution returned (daemon/cycle/authority.py).
                decision_hash=outcome.decision_hash,
                chunk_hash=credit.chunk_hash,
                embedding=query,
                text=asked.query_text if cfg.share_key_text else None,
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
    return len(pulses)


def _key_lessons(
    attribution: AttributionRecord,
    credits: Sequence[Credit],
    earlier: Sequence[AttributionRecord],
) -> list[tuple[AttributionRecord, list[Credit]]]:
    """(attribution, credits): whose query each credited chunk learns."""
    lessons = [(attribution, list(credits))]
    helped = [c for c in credits if c.amount > 0]
    for record in earlier:
        if helped and record.decision_hash:
            lessons.append((record, helped))
    return lessons


def _judge_learned_ranking(
    peer: Peer, attribution: AttributionRecord, credits: Sequence[Credit], stamp: str
) -> None:
    """A cited success as a held-back question for the keys and for the split, before its
    own keys are learned (module docstring)."""
    query = attribution.query_embedding
    text = attribution.query_text
    db = peer.db
    cited = [
        obs.rowid
        for c in credits
        if c.amount > 0 and (obs := db.observation_by_hash(c.chunk_hash)) is not None
    ]
    if not cited or query is None or not text or query.shape != (peer.embedder.dim,):
        return
    rt = peer.runtime
    key_found = False
    if peer.config.learning.keys:
        near = key_scores_of(rt, query, stamp, KeyUse.ALL)
        if near:
            pool = peer.config.recall.candidates
            ranked = {
                use: [
                    h.rowid for h in rank_query(rt, text, query, pool, index=peer.index, keys=use)
                ]
                for use in (KeyUse.ALL, KeyUse.NONE)
            }
            gain = reciprocal_rank_gain(cited, ranked[KeyUse.ALL], ranked[KeyUse.NONE])
            if gain is not None:
                store_key_gate(db, key_gate(db).observe(max(near.values()), gain))
            gated = key_scores_of(rt, query, stamp, KeyUse.GATED)
            key_found = any(label in gated for label in cited)
    if key_found:
        return
    if learns_fusion(peer.config):
        _learn_fusion(peer, query, text, cited, stamp)
    if peer.config.learning.intrinsic_prior or peer.config.learning.cold_weight:
        _learn_rescoring(peer, query, text, cited)


def _learn_rescoring(
    peer: Peer, query: npt.NDArray[np.float32], text: str, cited: list[int]
) -> None:
    """Score every strength of the prior over sizes, and every weight of the cold tier, by
    where it would have ranked the chunks a success cited, among the candidates recall had
    for it without keys (each against the unlearned setting)."""
    learning = peer.config.learning
    pool = candidate_pool(
        peer.runtime, text, query, index=peer.index, keys=KeyUse.NONE, with_lengths=True
    )
    if pool is None:
        return
    columns = pool.columns
    lengths = columns.lengths
    assert lengths is not None  # asked for
    # Relevance before any multiplier: each setting is scored on the same footing.
    unprimed = replace(pool.weights, intrinsic_strength=0.0, cold_factor=1.0)
    by_label = {r.label: r.relevance for r in rank_columns(columns, unprimed, None)}
    relevance = np.array([by_label[label] for label in columns.labels.tolist()])
    db = peer.db
    if learning.intrinsic_prior:
        gains = intrinsic.gains_of_strengths(cited, columns.labels, relevance, lengths)
        if gains is not None:
            store_evidence(db, INTRINSIC_META_KEY, intrinsic_evidence(db).observe(gains))
    if learning.cold_weight and columns.cold.any():
        gains = cold_weight.gains_of_weights(
            cited, columns.labels, relevance, columns.cold, peer.config.recall.cold_factor
        )
        if gains is not None:
            store_evidence(db, COLD_META_KEY, cold_evidence(db).observe(gains))


def _learn_fusion(
    peer: Peer, query: npt.NDArray[np.float32], text: str, cited: list[int], stamp: str
) -> None:
    """Score every candidate split by where it would have ranked the chunks a success cited."""
    db, recall = peer.db, peer.config.recall
    evidence = fusion.observe(
        split_evidence(db, peer.config),
        cited,
        _vector_list(peer, query, recall.candidates, stamp),
        search_lexical(db, text, recall.candidates, cold=None),
        rrf_k=recall.rrf_k,
    )
    store_split_evidence(db, evidence)


def _vector_list(peer: Peer, query: npt.NDArray[np.float32], pool: int, stamp: str) -> list[int]:
    """The chunks nearest the query by their own embedding, live and cold alike, as recall
    searches them: judged on the live tier alone, a split was scored against a store
    with most of its answers swept away, and learned 0.4 where 0.2 is right."""
    labels, distances = peer.index.knn_many(query[None, :], pool)
    similarity = {
        int(label): 1.0 - float(d) for label, d in zip(labels[0], distances[0], strict=True)
    }
    rt = peer.runtime
    cold_search = recall_state(rt).cold_search
    cold = tier_sets_at(rt, stamp).cold
    if cold_search.through_index(rt, cold, peer.index):
        # The index's search measured each cosine.
        found = cold_search.start(rt, stamp, cold, query, pool, peer.index).finish()
        for label, cosine in zip(found.labels.tolist(), found.cosines.tolist(), strict=True):
            similarity[int(label)] = cosine
    else:
        cold_labels, cold_vectors = cold_search.cold_vectors(rt, stamp)
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
