"""The simulated agents of the efficacy benchmark: what an agent does with what it recalls.

Each agent asks the day's training questions (top 10 recalled, attribution recorded) and
then reports, or does not report, what happened:

* `cited`: an outcome for every question: +1 citing the evidence it found (a success), or
  -1 citing the top result (it relied on it and failed);
* `uncited`: the same outcomes without citations;
* `notes`: never an outcome. Each question is a session of its own; when the first recall
  finds nothing it asks again in other words, and when a recall finds the answer the agent
  saves a short note built from each chunk it used (what an agent writes down);
* `session`: never an outcome per decision, never a note: the same sessions, and a result
  reported once per session (+1 when its last recall found the answer, else -1).

Asking again uses the question's first paraphrase (generated corpus); real conversations
come without paraphrases, and there the agent keeps the question's content words only.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome, emit_session_outcome
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory.implicit_credit import STOPWORDS
from dreamcycle.daemon.recall.retrieve import RecallResult, recall
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.store.database import NewObservation
from dreamcycle.store.hashing import content_hash
from scripts.efficacy_corpus import Corpus, Question

#: Results recalled per training question: the agent uses what it finds among these.
TRAIN_TOP_K: Final = 10
REASON: Final = "efficacy/train"


@dataclass
class Simulation:
    """One configuration's run: the store, the clock and what the agent has done."""

    corpus: Corpus
    name: str
    rt: Runtime
    peer: Peer
    clock: ManualClock
    chunk_of_hash: dict[str, str]
    hash_of_chunk: dict[str, str]
    latencies_ms: list[float] = field(default_factory=list)
    salience_before: list[float] = field(default_factory=list)
    curve: list[dict[str, Any]] = field(default_factory=list)
    #: Content hashes of what the agent itself saved (left out of every measurement).
    agent_notes: set[str] = field(default_factory=set)
    agent_counts: Counter[str] = field(default_factory=Counter)


def observation(turn: Any) -> NewObservation:
    return NewObservation(
        content=turn.text,
        title=turn.title,
        kind=turn.kind,
        importance=turn.importance,
        session_id=turn.session,
    )


def found_evidence(sim: Simulation, question: Question, result: RecallResult) -> list[str]:
    """The evidence chunks among the results, by content hash, in rank order."""
    wanted = {sim.hash_of_chunk[c] for c in question.evidence if c in sim.hash_of_chunk}
    return [h.content_hash for h in result.hits if h.content_hash in wanted]


def ask(sim: Simulation, text: str, session: str | None = None) -> RecallResult:
    return recall(sim.rt, text, top_k=TRAIN_TOP_K, index=sim.peer.index, session_id=session)


#: Words an agent drops when it asks again in fewer words.
_QUESTION_WORDS: Final = frozenset(
    [
        "what",
        "when",
        "where",
        "which",
        "who",
        "whom",
        "whose",
        "why",
        "how",
        "did",
        "does",
        "do",
        "is",
        "are",
        "was",
        "were",
        "the",
        "a",
        "an",
        "of",
        "to",
        "in",
        "on",
        "at",
        "for",
        "with",
        "by",
        "about",
        "from",
        "and",
        "or",
    ]
)
#: Words of the used chunk a note keeps.
NOTE_WORDS: Final = 14


def rephrased(question: Question) -> str:
    """The question in other words: a paraphrase when the corpus has one, else its content
    words alone."""
    if question.paraphrases:
        return question.paraphrases[0]
    kept = [w for w in question.text.rstrip("?").split() if w.lower() not in _QUESTION_WORDS]
    return " ".join(kept) or question.text


def note_from(content: str) -> str:
    """A short note built from what the agent used: the chunk's own content words."""
    picked = [w for w in words_in_order(content) if w.lower() not in STOPWORDS]
    return "Note: " + " ".join(picked[:NOTE_WORDS])


def words_in_order(text: str) -> list[str]:
    return [w.strip(".,;:!?\"'()[]") for w in text.split() if w.strip(".,;:!?\"'()[]")]


def _session(question: Question, day: int) -> str:
    return f"agent/{question.qid}/day{day}"


def _until_found(
    sim: Simulation, question: Question, session: str
) -> tuple[RecallResult, list[str]]:
    """Ask; when nothing it finds answers, ask once more in other words."""
    result = ask(sim, question.text, session)
    found = found_evidence(sim, question, result)
    if not found:
        sim.agent_counts["asked_again"] += 1
        result = ask(sim, rephrased(question), session)
        found = found_evidence(sim, question, result)
    sim.agent_counts["success" if found else "failure"] += 1
    return result, found


def notes(sim: Simulation, day: int, questions: Sequence[Question]) -> None:
    saved: list[NewObservation] = []
    for question in questions:
        session = _session(question, day)
        result, found = _until_found(sim, question, session)
        if not found:
            continue
        # A note per chunk it used, as the cited agent cites each: a note of two chunks'
        # words keeps too few of either for the daemon to say which it reproduces.
        for used in (h for h in result.hits if h.content_hash in found):
            note = NewObservation(content=note_from(used.content), session_id=session)
            sim.agent_notes.add(content_hash(note.content))
            saved.append(note)
    if saved:
        ingest(sim.rt, [saved])


def session_results(sim: Simulation, day: int, questions: Sequence[Question]) -> None:
    for question in questions:
        session = _session(question, day)
        _, found = _until_found(sim, question, session)
        emit_session_outcome(sim.rt, session=session, reward=1.0 if found else -1.0, reason=REASON)


def cited(sim: Simulation, day: int, questions: Sequence[Question], *, cite: bool = True) -> None:
    for question in questions:
        result = ask(sim, question.text)
        if result.decision_hash is None:
            continue
        found = found_evidence(sim, question, result)
        success = bool(found)
        sim.agent_counts["success" if success else "failure"] += 1
        citations = (found if success else [result.hits[0].content_hash]) if cite else []
        emit_outcome(
            sim.rt,
            decision=result.decision_hash,
            reward=1.0 if success else -1.0,
            reason=REASON,
            cited=citations,
        )


def uncited(sim: Simulation, day: int, questions: Sequence[Question]) -> None:
    cited(sim, day, questions, cite=False)


Agent = Callable[[Simulation, int, Sequence[Question]], None]
AGENTS: Final[dict[str, Agent]] = {
    "cited": cited,
    "uncited": uncited,
    "notes": notes,
    "session": session_results,
}
