"""Outcomes: this peer's account of how a decision turned out, and the chunks it cited.

An outcome is queued as an entry for every peer to credit; a result reported for a whole
agent session stays here, where the next cycle spreads it over the session's decisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dreamcycle.daemon.intake.emit import (
    CITED_PREFIX_MIN,
    HASH_PREFIX,
    UNKNOWN_HINT,
    WHOLE_HASH,
    Emitted,
    UnknownHash,
    check_reason,
    queue_entry,
    request_key,
    resolve_hash,
)
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.outcome import REWARD_MAX, REWARD_MIN, Outcome
from dreamcycle.pulses.pulse import check_text
from dreamcycle.store.database import outcomes_of_decision
from dreamcycle.zeitgeist.entries import OutcomeEntry


class ConflictingOutcome(ValueError):
    """A second outcome for a decision that has one: both would be credited."""


def emit_outcome(
    rt: Runtime,
    *,
    decision: str,
    reward: float,
    reason: str,
    cited: Sequence[str] = (),
    decided_elsewhere: bool = False,
) -> Emitted:
    """Queue an outcome of a decision recorded here; `cited` names the recalled chunks the
    decision used.

    `decision` and each cited hash are 64 lowercase hex digits, or a unique prefix of at
    least CITED_PREFIX_MIN of them; every cited chunk must be among the chunks the decision
    recalled. `decided_elsewhere` queues an outcome for a whole decision hash not recorded
    here (yet): it waits until the decision's attribution arrives, and its citations are
    checked then.
    """
    for given in cited:
        _check_cited_form(given)
    check_reason(reason)
    if HASH_PREFIX.match(decision):
        decision = resolve_hash(rt, "decision", decision)
    # The request's own form (hash, reward, reason) before whether the decision is known.
    Outcome(
        decision_hash=decision, reward=reward, observer_peer=rt.peer_id, ts=0, reason=reason
    ).validate()
    if not (decided_elsewhere and rt.db.attribution(decision) is None):
        decision = resolve_hash(rt, "decision", decision)
    chunks = resolve_cited(rt, decision, cited, decided_elsewhere=decided_elsewhere)
    Outcome(
        decision_hash=decision,
        reward=reward,
        observer_peer=rt.peer_id,
        ts=0,
        reason=reason,
        cited=chunks,
    ).validate()
    fields: dict[str, Any] = {"decision": decision, "reward": reward, "reason": reason}
    if chunks:  # requests without citations keep the key they always had
        fields["cited"] = list(chunks)
    key = request_key("outcome", **fields)

    def refuse_a_second_outcome() -> None:
        earlier = outcomes_of_decision(rt.db, decision)
        if earlier:
            entry, earlier_reward, earlier_reason = earlier[0]
            raise ConflictingOutcome(
                f"decision {decision} already has an outcome (entry {entry}: reward "
                f"{earlier_reward:g}, reason {earlier_reason!r}); both would be credited, so "
                "this one is refused. An outcome is final: there is no way to withdraw or "
                "replace it; to offset its credit, reinforce or penalize the chunks it cited"
            )

    return queue_entry(
        rt,
        key,
        lambda hlc: OutcomeEntry(
            hlc=hlc,
            origin=rt.peer_id,
            decision_hash=decision,
            reward=reward,
            observer_peer=rt.peer_id,
            reason=reason,
            cited=chunks,
        ),
        refuse_a_second_outcome,
    )


def emit_session_outcome(rt: Runtime, *, session: str, reward: float, reason: str) -> int:
    """Record a result reported once for a whole agent session; the next cycle credits the
    session's decisions from it (daemon.memory.implicit_credit). Returns its id."""
    check_text("the session id", session)
    if not session.strip():
        raise ValueError("the session id is empty")
    check_reason(reason)
    if not (math.isfinite(reward) and REWARD_MIN <= reward <= REWARD_MAX) or reward == 0:
        raise ValueError(
            f"a session's reward must be non-zero and in [{REWARD_MIN:g}, {REWARD_MAX:g}], "
            f"got {reward}"
        )
    with rt.db.transaction():
        return rt.db.record_session_outcome(
            session, reward=reward, reason=reason, ts_ms=rt.clock.now_ms()
        )


def resolve_cited(
    rt: Runtime, decision: str, cited: Sequence[str], *, decided_elsewhere: bool = False
) -> tuple[str, ...]:
    """Full cited hashes, sorted and unique, each among the chunks the decision (recorded
    here) recalled; ValueError names the first bad one. A decision `decided_elsewhere`, not
    recorded here, takes whole hashes only: nothing here can resolve a prefix."""
    if not cited:
        return ()
    attribution = rt.db.attribution(decision)
    if attribution is None:
        if not decided_elsewhere:
            raise UnknownHash(f"decision {decision} is {UNKNOWN_HINT['decision']}")
        for given in cited:
            _check_cited_form(given)
            if not WHOLE_HASH.match(given):
                raise ValueError(
                    f"cited chunk {given!r} is a prefix, and decision {decision} was not "
                    "recorded here to resolve it: give the full 64-digit hash"
                )
        return tuple(sorted(set(cited)))
    recalled = sorted(set(attribution.chunk_hashes))
    resolved: set[str] = set()
    for given in cited:
        _check_cited_form(given)
        matches = [h for h in recalled if h.startswith(given)]
        if len(matches) != 1:
            if WHOLE_HASH.match(given):
                raise ValueError(
                    f"cited chunk {given} is not among the chunks decision {decision} recalled"
                )
            raise ValueError(
                f"cited chunk {given!r} matches {'none' if not matches else len(matches)} of "
                f"the chunks decision {decision} recalled"
            )
        resolved.add(matches[0])
    return tuple(sorted(resolved))


def _check_cited_form(given: str) -> None:
    if not (WHOLE_HASH.match(given) or HASH_PREFIX.match(given)):
        raise ValueError(
            f"cited chunk {given!r} is not a chunk hash (64 lowercase hex digits, or a "
            f"unique prefix of at least {CITED_PREFIX_MIN})"
        )
