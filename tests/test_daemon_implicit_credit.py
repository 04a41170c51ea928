"""Credit from what agent sessions do, with no outcome reported, in-process on real text.

A decision remembers its session; the cycle reads what the session did next: a save that
reproduces a recalled chunk credits it, the same question asked again weakens the earlier
answer and lets the later success teach the earlier question too, and a result reported
for the whole session credits what its last recall found that the earlier ones had not.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Final

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome, emit_session_outcome
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory.implicit_credit import (
    REASONS,
    SAVES_CURSOR_META_KEY,
    SIGNAL_SAVED,
    reproduces,
    words,
)
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.retrieval_keys import SAME_KEY_SIMILARITY
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import NewObservation
from tests.test_daemon_learning import QUERY, START_MS, ask, open_peer, rowid_of, saliences

SESSION = "agent/session-1"
#: Asks for the same thing as QUERY, in other words.
AGAIN = "raising an exception to signal an error: how is it done"


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


@pytest.fixture
def peer(tmp_path: Path, clock: ManualClock) -> Iterator[Peer]:
    yield from open_peer(tmp_path, clock)


def credits(peer: Peer) -> list[tuple[str, str, str, float, str]]:
    return [
        tuple(row)
        for row in peer.db.conn.execute(
            "SELECT signal, decision_hash, chunk_hash, amount, status FROM implicit_credits "
            "ORDER BY signal, decision_hash, chunk_hash"
        )
    ]


def save(peer: Peer, content: str, session: str = SESSION) -> None:
    ingest(peer.runtime, [[NewObservation(content=content, session_id=session)]])


def note_of(content: str) -> str:
    return "Note: " + " ".join(sorted(words(content))[:14])


def key_queries(peer: Peer, digest: str) -> list[np.ndarray]:
    return [k.embedding for k in key_store.keys_of(peer.db, rowid_of(peer, digest))]


def test_a_save_that_reproduces_a_recalled_chunk_credits_it(peer: Peer) -> None:
    decision, hits = ask(peer, session_id=SESSION)
    used = hits[2]
    before = saliences(peer)
    save(peer, note_of(used.content))
    stats = run_cycle_blocking(peer).stats["salience_pulse_propagate"]
    assert stats["implicit_credits"] == 1
    assert credits(peer) == [
        (SIGNAL_SAVED, decision, used.content_hash, peer.config.learning.implicit_saved,
         "converted")
    ]  # fmt: skip
    assert saliences(peer)[used.content_hash] > before[used.content_hash]
    [key] = key_queries(peer, used.content_hash)
    assert float(np.dot(key, peer.embedder.embed_one(QUERY))) == pytest.approx(1.0, abs=1e-5)
    # The credited chunk now answers the question first.
    _, again = ask(peer)
    assert again[0].content_hash == used.content_hash
    # Shown with its reason.
    [shown] = peer.db.implicit_credits_of(used.content_hash, 5)
    assert shown.reason == REASONS[SIGNAL_SAVED]


LONG_CHUNK: Final = (
    "We moved the billing service to the new Postgres cluster on Tuesday after the "
    "failover drill; the replica lag stayed under two seconds, the connection pooler "
    "was resized to four hundred clients, and the old cluster is kept read-only until "
    "the end of the quarter for the auditors who still query it every morning."
)


def test_a_short_note_from_a_long_chunk_and_a_summary_naming_a_short_one_reproduce_it() -> None:
    chunk = words(LONG_CHUNK)
    note = words("Note: billing service moved Postgres cluster Tuesday replica lag")
    assert len(note & chunk) < 0.5 * len(chunk)  # few of the long chunk's words
    assert reproduces(note, chunk) == len(note & chunk)
    short = words("The pooler takes four hundred clients now.")
    summary = words(LONG_CHUNK + " Also: the pooler takes four hundred clients now.")
    assert reproduces(summary, short) == len(short)
    # Sharing a few words is not reproducing, whichever text is shorter.
    assert reproduces(words("Postgres lag alerts fire at night"), chunk) == 0
    assert reproduces(words("billing cluster Tuesday"), chunk) == 0


def test_a_save_in_another_session_or_in_none_credits_nothing(peer: Peer) -> None:
    _, hits = ask(peer, session_id=SESSION)
    save(peer, note_of(hits[1].content), session="agent/other")
    ingest(peer.runtime, [[NewObservation(content=note_of(hits[2].content) + " again")]])
    run_cycle_blocking(peer)
    assert credits(peer) == []


def test_asked_again_weakens_the_first_answer_and_the_later_success_teaches_both(
    peer: Peer,
) -> None:
    first, first_hits = ask(peer, session_id=SESSION)
    second, second_hits = ask(peer, AGAIN, session_id=SESSION)
    used = second_hits[3]
    save(peer, note_of(used.content))
    run_cycle_blocking(peer)
    found = {(s, d, c): (a, st) for s, d, c, a, st in credits(peer)}
    weak = peer.config.learning.implicit_asked_again
    assert found[("asked_again", first, first_hits[0].content_hash)] == (-weak, "converted")
    assert found[("saved", second, used.content_hash)][1] == "converted"
    # The chunk that served the rephrased question learned both questions (a question this
    # close to a key reinforces that key rather than adding one).
    learned = key_queries(peer, used.content_hash)
    for question in (QUERY, AGAIN):
        vector = peer.embedder.embed_one(question)
        assert max(float(np.dot(k, vector)) for k in learned) >= SAME_KEY_SIMILARITY
    [key] = key_store.keys_of(peer.db, rowid_of(peer, used.content_hash))
    assert key.weight == pytest.approx(2 * peer.config.learning.implicit_saved)


def test_a_session_result_credits_what_the_last_recall_found_that_the_first_had_not(
    peer: Peer,
) -> None:
    _, first_hits = ask(peer, session_id=SESSION, top_k=3)
    last, last_hits = ask(peer, AGAIN, session_id=SESSION, top_k=6)
    emit_session_outcome(peer.runtime, session=SESSION, reward=1.0, reason="tests/session")
    run_cycle_blocking(peer)
    shown = {h.content_hash for h in first_hits}
    new = next(h.content_hash for h in last_hits if h.content_hash not in shown)
    found = [(s, d, c) for s, d, c, _, _ in credits(peer) if s == "session"]
    assert found == [("session", last, new)]


def test_a_good_one_recall_session_credits_nothing_and_a_bad_one_weakens_its_top(
    peer: Peer,
) -> None:
    emit_session_outcome(peer.runtime, session=SESSION, reward=1.0, reason="tests/session")
    ask(peer, session_id=SESSION)
    run_cycle_blocking(peer)
    assert credits(peer) == []
    decision, hits = ask(peer, session_id="agent/failed")
    emit_session_outcome(peer.runtime, session="agent/failed", reward=-1.0, reason="tests/bad")
    run_cycle_blocking(peer)
    weight = peer.config.learning.implicit_session
    assert credits(peer) == [("session", decision, hits[0].content_hash, -weight, "converted")]


def test_an_outcome_of_the_decisions_own_supersedes_what_was_inferred(peer: Peer) -> None:
    decision, hits = ask(peer, session_id=SESSION)
    save(peer, note_of(hits[2].content))
    emit_outcome(
        peer.runtime, decision=decision, reward=1.0, reason="tests/explicit",
        cited=[hits[1].content_hash],
    )  # fmt: skip
    run_cycle_blocking(peer)
    assert [row[-1] for row in credits(peer)] == ["superseded"]
    assert key_store.keys_of(peer.db, rowid_of(peer, hits[2].content_hash)) == []
    assert key_store.keys_of(peer.db, rowid_of(peer, hits[1].content_hash))


@pytest.mark.parametrize(
    ("session", "reward", "message"),
    [("", 1.0, "session id is empty"), (SESSION, 0.0, "non-zero"), (SESSION, 2.0, "in \\[")],
)
def test_a_bad_session_result_is_refused(
    peer: Peer, session: str, reward: float, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        emit_session_outcome(peer.runtime, session=session, reward=reward, reason="tests/x")


def test_the_saves_cursor_passes_chunks_saved_outside_a_session(peer: Peer) -> None:
    # The store holds chunks, none saved in a session: a cycle reads them once, not again
    # every cycle (it read the whole table inside a transaction that saves wait for).
    newest = peer.db.newest_observation_id()
    assert newest > 0
    run_cycle_blocking(peer)
    assert peer.db.get_meta(SAVES_CURSOR_META_KEY) == str(newest)
    decision, hits = ask(peer, session_id=SESSION)
    save(peer, note_of(hits[0].content))
    run_cycle_blocking(peer)
    assert [(c[0], c[1], c[2]) for c in credits(peer)] == [
        (SIGNAL_SAVED, decision, hits[0].content_hash)
    ]
    assert peer.db.get_meta(SAVES_CURSOR_META_KEY) == str(peer.db.newest_observation_id())
