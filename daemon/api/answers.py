"""Store rows and cycle results shaped into the API's response models."""

from __future__ import annotations

import time

from dreamcycle.daemon.api import recall_models, report_models, views
from dreamcycle.daemon.api.errors import NotFound
from dreamcycle.daemon.recall.retrieve import Hit
from dreamcycle.pulses.context import Bundle, Member, Tier, render
from dreamcycle.store.database import EFFICACY_TYPE, Database


def memory_row(db: Database, ref: str) -> report_models.Memory:
    # A range on the indexed hash column: hex digits sort below "g".
    rows = db.fetch_all(
        "SELECT content_hash, title, content, type, kind, project, scope, topic_key, session_id, "
        "importance, pin_floor, deletion_policy, salience, created_at, deleted_at IS NOT NULL, "
        "cold_at IS NOT NULL, cold_reason, confidence, stability FROM observations "
        f"WHERE content_hash >= ? AND content_hash < ? AND type != '{EFFICACY_TYPE}' "
        "ORDER BY content_hash LIMIT 2",
        (ref, ref + "g"),
    )
    if not rows:
        raise NotFound(f"no chunk stored here has a hash starting {ref}")
    if len(rows) > 1:
        raise ValueError(f"{ref} is the start of more than one chunk hash: give more digits")
    (digest, title, content, type_, kind, project, scope, topic, session, importance, floor,
     policy, salience, created, tombstoned, cold, cold_reason, confidence,
     stability) = rows[0]  # fmt: skip
    return report_models.Memory(
        content_hash=digest,
        title=title,
        content=content,
        type=type_,
        kind=kind,
        project=project,
        scope=scope,
        topic_key=topic,
        session_id=session,
        importance=importance,
        pin_floor=floor,
        deletion_policy=policy,
        salience=salience,
        confidence=confidence,
        stability=stability,
        created_at=created,
        state="tombstoned" if tombstoned else "cold" if cold else "live",
        cold_reason=cold_reason,
    )


def recall_hit(hit: Hit, explain: bool) -> recall_models.RecallHit:
    factors = None
    if explain:
        factors = recall_models.RankingFactors(
            relevance=hit.relevance,
            similarity=hit.similarity,
            salience=hit.salience,
            cold=hit.cold,
            vector_rank=hit.vector_rank,
            lexical_rank=hit.lexical_rank,
            learned_rank=hit.learned_rank,
            key_similarity=hit.key_similarity,
            confidence=hit.confidence,
        )
    return recall_models.RecallHit(
        content_hash=hit.content_hash,
        title=hit.title,
        content=hit.content,
        score=hit.score,
        similarity=hit.similarity,
        salience=hit.salience,
        cold=hit.cold,
        confidence=hit.confidence,
        stability=hit.stability,
        factors=factors,
    )


def context_hit(held: views.Held, member: Member) -> Hit:
    candidate = held.candidate
    return Hit(
        rowid=held.rowid,
        content_hash=candidate.content_hash,
        title=candidate.title,
        content=candidate.content,
        similarity=0.0,
        salience=candidate.salience,
        score=member.rank_salience,
        cold=held.cold,
    )


def context_response(
    bundle: Bundle, digest: str | None, held: dict[str, views.Held], started: float
) -> recall_models.ContextResponse:
    def tier(which: Tier) -> list[recall_models.ContextMemory]:
        return [
            recall_models.ContextMemory(
                content_hash=m.candidate.content_hash,
                title=m.candidate.title,
                content=m.candidate.content,
                salience=m.candidate.salience,
                rank_salience=m.rank_salience,
                tokens=m.tokens,
                truncated=m.truncated,
                cold=held[m.candidate.content_hash].cold,
            )
            for m in bundle.tier(which)
        ]

    if not bundle.members:
        header = "No memory matches this."
    elif digest is None:
        header = "not recorded"
    else:
        header = f"decision {digest} (cite the [hashes] you use in mem_outcome)"
    return recall_models.ContextResponse(
        decision_hash=digest,
        tiers=recall_models.ContextTiers(
            pinned=tier(Tier.PINNED), outcomes=tier(Tier.OUTCOMES), relevant=tier(Tier.RELEVANT)
        ),
        tokens=recall_models.ContextTokens(
            pinned=bundle.tokens(Tier.PINNED),
            outcomes=bundle.tokens(Tier.OUTCOMES),
            relevant=bundle.tokens(Tier.RELEVANT),
            total=bundle.tokens(),
            budget=bundle.budget,
        ),
        overflow=[
            recall_models.Reference(content_hash=r.content_hash, title=r.title)
            for r in bundle.overflow
        ],
        dropped=bundle.dropped,
        text=render(bundle, header),
        latency_ms=(time.perf_counter() - started) * 1000.0,
    )
