"""Credit from what agents do, when they report no outcome.

Agents seldom call a feedback tool, but what a session does after a recall says what the
recall was worth. Four signals, each with its weight (`learning.implicit_*`, chosen by
scripts/efficacy.py):

* saved: a memory saved in a session, whose words reproduce a chunk that one of the
  session's recent decisions recalled: the agent used that chunk. A session summary
  (type `session_summary`) that names recalled content counts the same way, with its
  own weight.
* asked again: a recall in a session close to an earlier recall of the same session,
  soon after: the earlier answer did not serve, so its top result is weakened, and what
  then serves the later question is credited to the earlier question as well (the
  earlier question learns the key too: it asked for the same thing).
* session: a result an orchestrator reports once for a whole session (`pulse-emit
  outcome --session`). A positive result credits, in each chain of questions asked
  again, the best chunk of the last recall that the earlier ones had not returned; a
  negative result weakens each decision's top result. A one-recall session gets nothing
  from a positive result: which of its results served is unknown, and crediting them by
  rank taught the wrong chunks (pulses.credit).

The cycle infers these from rows the peer keeps anyway (attributions with their session,
new observations) and records each credit once per signal, decision and chunk, with the
reason `explain` shows. Converting one is converting an outcome (learning.
learn_from_credits): pulses at the chunk, the query as a key, recall's learned parts
judged on it first. A decision that has an outcome of its own is credited by that
outcome only: what the agent said beats what was inferred.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np

from dreamcycle.daemon.memory.learning import Lesson, learn_from_credits, log
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.credit import Credit
from dreamcycle.pulses.outcome import Outcome
from dreamcycle.store.attributions import AttributionRecord, outcomes_of_decision
from dreamcycle.store.timefmt import ms_from_iso
from dreamcycle.zeitgeist.hlc import COUNTER_BITS, COUNTER_MASK, hlc_from_ms

SIGNAL_SAVED: Final = "saved"
SIGNAL_SUMMARY: Final = "summary"
SIGNAL_ASKED_AGAIN: Final = "asked_again"
SIGNAL_SESSION: Final = "session"
REASONS: Final = {
    SIGNAL_SAVED: "implicit: saved text overlapped this chunk",
    SIGNAL_SUMMARY: "implicit: the session summary named this chunk",
    SIGNAL_ASKED_AGAIN: "implicit: the question was asked again; this answer did not serve",
    SIGNAL_SESSION: "implicit: the session's reported result",
}
SESSION_SUMMARY_TYPE: Final = "session_summary"
#: A saved text reproduces a chunk (or the chunk the text) when they share at least this
#: share of the shorter one's words, and at least SAVED_WORDS_MIN of them (a short text
#: shares its few words with anything).
SAVED_OVERLAP_MIN: Final = 0.5
SAVED_WORDS_MIN: Final = 4
#: Chunks one save can credit in one decision (the ones it reproduces most).
SAVED_CHUNKS_MAX: Final = 3
#: Words shorter than this, and these, say nothing about which chunk was used.
MIN_WORD_LENGTH: Final = 3
STOPWORDS: Final = frozenset(
    [
        "the",
        "and",
        "for",
        "are",
        "but",
        "not",
        "you",
        "your",
        "with",
        "this",
        "that",
        "from",
        "have",
        "has",
        "had",
        "was",
        "were",
        "been",
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "why",
        "how",
        "does",
        "did",
        "doing",
        "done",
        "can",
        "could",
        "would",
        "should",
        "will",
        "just",
        "about",
        "into",
        "over",
        "than",
        "then",
        "them",
        "they",
        "their",
        "there",
        "these",
        "those",
        "very",
        "also",
        "its",
        "it's",
        "our",
        "out",
        "all",
        "any",
        "some",
        "such",
        "only",
        "own",
        "same",
        "too",
        "more",
        "most",
        "other",
    ]
)
_WORD: Final = re.compile(r"[^\W_]+")
#: meta keys: the last observation and attribution the scans looked at.
SAVES_CURSOR_META_KEY: Final = "implicit_saves_cursor"
ASKS_CURSOR_META_KEY: Final = "implicit_asks_cursor"


def words(text: str) -> frozenset[str]:
    """The words of a text that can tell one chunk from another."""
    return frozenset(
        w
        for w in (m.group(0).lower() for m in _WORD.finditer(text))
        if (len(w) >= MIN_WORD_LENGTH or w.isdigit()) and w not in STOPWORDS
    )


def reproduces(saved: frozenset[str], chunk: frozenset[str]) -> int:
    """How many words the saved text and the chunk share, when that is enough to say one
    reproduces the other; else 0.

    Enough is SAVED_OVERLAP_MIN of the shorter one's words, and SAVED_WORDS_MIN at least:
    a long summary holds most of a short chunk it names, and a short note taken from a long
    chunk is mostly that chunk's words, though it keeps few of them.
    """
    shared = len(saved & chunk)
    if shared < SAVED_WORDS_MIN or shared < SAVED_OVERLAP_MIN * min(len(saved), len(chunk)):
        return 0
    return shared


@dataclass(frozen=True)
class Inferred:
    signal: str
    decision_hash: str
    chunk_hash: str
    amount: float


def run(peer: Peer, now_ms: int) -> tuple[int, Lesson]:
    """Infer this cycle's credits and convert every waiting one (inside the caller's
    transaction); how many were inferred, and what converting them taught."""
    inferred = infer(peer, now_ms)
    lesson = Lesson()
    convert(peer, now_ms, peer.db.change_stamp(), lesson)
    return inferred, lesson


def infer(peer: Peer, now_ms: int) -> int:
    """Record the credits the session signals imply since the last cycle; how many."""
    found = [*_from_saves(peer), *_from_asks(peer), *_from_session_outcomes(peer, now_ms)]
    recorded = 0
    for credit in found:
        recorded += peer.db.record_implicit_credit(
            credit.signal,
            credit.decision_hash,
            credit.chunk_hash,
            amount=credit.amount,
            reason=REASONS[credit.signal],
            created_ms=now_ms,
        )
    return recorded


def _window_hlcs(end_ms: int, window_s: float) -> tuple[int, int]:
    """The HLCs from `window_s` before `end_ms` to the end of that millisecond."""
    start = max(0, end_ms - int(window_s * 1000))
    return hlc_from_ms(start), hlc_from_ms(end_ms) | COUNTER_MASK


def _from_saves(peer: Peer) -> Iterable[Inferred]:
    db, cfg = peer.db, peer.config.learning
    after = int(db.get_meta(SAVES_CURSOR_META_KEY) or 0)
    # The cursor passes every chunk read, session save or not: held at the last save, it
    # made each cycle read every chunk stored since, in a transaction a save waits for.
    newest = db.newest_observation_id()
    if newest <= after:
        return
    saves = db.session_saves(after, newest, peer.peer_id)
    db.set_meta(SAVES_CURSOR_META_KEY, str(newest))
    for save in saves:
        summary = save.type == SESSION_SUMMARY_TYPE
        weight = cfg.implicit_summary if summary else cfg.implicit_saved
        if weight <= 0:
            continue
        start, end = _window_hlcs(ms_from_iso(save.created_at), cfg.implicit_window_s)
        saved = words(f"{save.title}\n{save.content}")
        for decision in db.session_decisions(
            save.session_id, peer.peer_id, from_hlc=start, to_hlc=end
        ):
            for chunk in _reproduced(peer, saved, decision.ranked):
                signal = SIGNAL_SUMMARY if summary else SIGNAL_SAVED
                yield Inferred(signal, decision.decision_hash, chunk, weight)


def _reproduced(peer: Peer, saved: frozenset[str], ranked: Sequence[str]) -> list[str]:
    """The recalled chunks the saved text reproduces, most reproduced first."""
    shared: dict[str, int] = {}
    for digest in ranked:
        obs = peer.db.observation_by_hash(digest)
        if obs is not None and (count := reproduces(saved, words(obs.content))):
            shared[digest] = count
    return sorted(shared, key=lambda d: -shared[d])[:SAVED_CHUNKS_MAX]


def _from_asks(peer: Peer) -> Iterable[Inferred]:
    db, cfg = peer.db, peer.config.learning
    after = int(db.get_meta(ASKS_CURSOR_META_KEY) or 0)
    asked = db.session_decisions_after(after, peer.peer_id)
    if asked:
        db.set_meta(ASKS_CURSOR_META_KEY, str(asked[-1].hlc))
    if cfg.implicit_asked_again <= 0 and cfg.implicit_session <= 0:
        return
    for later in asked:
        if later.query_embedding is None or later.session_id is None:
            continue
        start = _window_hlcs(later.hlc >> COUNTER_BITS, cfg.implicit_window_s)[0]
        for earlier in db.session_decisions(
            later.session_id, peer.peer_id, from_hlc=start, to_hlc=later.hlc - 1
        ):
            if not _asks_again(earlier, later, cfg.asked_again_similarity):
                continue
            db.record_rephrasing(earlier.decision_hash, later.decision_hash)
            if cfg.implicit_asked_again > 0 and earlier.ranked:
                yield Inferred(
                    SIGNAL_ASKED_AGAIN,
                    earlier.decision_hash,
                    earlier.ranked[0],
                    -cfg.implicit_asked_again,
                )


def _asks_again(earlier: AttributionRecord, later: AttributionRecord, similarity: float) -> bool:
    if earlier.query_embedding is None or later.query_embedding is None:
        return False
    if earlier.query_embedding.shape != later.query_embedding.shape:
        return False
    return float(np.dot(earlier.query_embedding, later.query_embedding)) >= similarity


def _from_session_outcomes(peer: Peer, now_ms: int) -> Iterable[Inferred]:
    db, cfg = peer.db, peer.config.learning
    for outcome in db.waiting_session_outcomes():
        db.settle_session_outcome(outcome.id)
        if cfg.implicit_session <= 0:
            continue
        start, end = _window_hlcs(outcome.ts_ms, cfg.session_window_s)
        decisions = db.session_decisions(
            outcome.session_id, peer.peer_id, from_hlc=start, to_hlc=end
        )
        amount = cfg.implicit_session * outcome.reward
        if amount < 0:
            for decision in decisions:
                if decision.ranked:
                    yield Inferred(
                        SIGNAL_SESSION, decision.decision_hash, decision.ranked[0], amount
                    )
            continue
        for last, chain in _chains(peer, decisions):
            seen = {digest for decision in chain for digest in decision.ranked}
            new = next((digest for digest in last.ranked if digest not in seen), None)
            if new is not None:
                yield Inferred(SIGNAL_SESSION, last.decision_hash, new, amount)


def _chains(
    peer: Peer, decisions: Sequence[AttributionRecord]
) -> list[tuple[AttributionRecord, list[AttributionRecord]]]:
    """Each decision that no later one asked again, with the earlier ones it asked again."""
    by_hash = {d.decision_hash: d for d in decisions}
    earlier_of: dict[str, list[str]] = defaultdict(list)
    asked_again: set[str] = set()
    for earlier, later in peer.db.rephrasings_among(list(by_hash)):
        earlier_of[later].append(earlier)
        asked_again.add(earlier)
    return [
        (d, [by_hash[e] for e in earlier_of[d.decision_hash] if e in by_hash])
        for d in decisions
        if d.decision_hash not in asked_again and earlier_of[d.decision_hash]
    ]


def convert(peer: Peer, now_ms: int, stamp: str, lesson: Lesson) -> int:
    """Convert waiting inferred credits into pulses and keys; how many decisions."""
    db = peer.db
    by_decision: dict[str, list[tuple[str, str, float, str]]] = defaultdict(list)
    for row in db.waiting_implicit_credits():
        by_decision[row.decision_hash].append((row.signal, row.chunk_hash, row.amount, row.reason))
    converted = 0
    for decision_hash, rows in by_decision.items():
        attribution = db.attribution(decision_hash)
        if attribution is None or outcomes_of_decision(db, decision_hash):
            db.settle_implicit_credits(decision_hash, "superseded")
            continue
        amounts: dict[str, float] = defaultdict(float)
        for _, chunk, amount, _ in rows:
            amounts[chunk] = max(-1.0, min(1.0, amounts[chunk] + amount))
        credits = [Credit(chunk, amount) for chunk, amount in amounts.items() if amount]
        if not credits:
            db.settle_implicit_credits(decision_hash, "converted")
            continue
        strongest = max(credits, key=lambda c: abs(c.amount))
        outcome = Outcome(
            decision_hash=decision_hash,
            reward=strongest.amount,
            observer_peer=peer.peer_id,
            ts=peer.clock.now(),
            reason=next(r for _, c, _, r in rows if c == strongest.chunk_hash),
        )
        earlier = [
            record
            for earlier_hash in db.earlier_rephrasings(decision_hash)
            if (record := db.attribution(earlier_hash)) is not None
        ]
        try:
            learn_from_credits(
                peer, outcome, attribution, credits, now_ms, stamp, lesson, also_keys_of=earlier
            )
        except ValueError as exc:  # pure validation: nothing was written
            log.warning(
                "implicit credit rejected", extra={"decision": decision_hash, "reason": str(exc)}
            )
            db.settle_implicit_credits(decision_hash, "rejected")
            continue
        db.settle_implicit_credits(decision_hash, "converted")
        converted += 1
    return converted
