"""The efficacy corpora: the generated one's promises, and exactly what the loaders read.

One file: it tests one module, scripts/efficacy_corpus.py, section by section in that file's
order, on small corpus files it writes itself.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from statistics import mean
from typing import Any

import pytest

from scripts.efficacy_corpus import (
    SPLIT_TEST,
    SPLIT_TRAIN,
    Corpus,
    CorpusError,
    Question,
    generated_corpus,
    load_corpus,
    load_locomo,
    load_longmemeval,
    split_questions,
)

# ---- fixtures -------------------------------------------------------------------------------


def _utterance(speaker: str, dia_id: str, text: str) -> dict[str, Any]:
    return {"speaker": speaker, "dia_id": dia_id, "text": text}


LOCOMO: list[dict[str, Any]] = [
    {
        "sample_id": "conv-1",
        "conversation": {
            "speaker_a": "Ann",
            "speaker_b": "Bo",
            "session_1_date_time": "1:56 pm on 8 May, 2023",
            "session_1": [
                _utterance("Ann", "D1:1", "I adopted a cat."),
                _utterance("Bo", "D1:2", "What is its name?"),
                _utterance("Ann", "D1:3", "Miso."),
            ],
            "session_2_date_time": "10:00 am on 15 May, 2023",
            "session_2": [
                _utterance("Bo", "D2:1", "I started pottery."),
                _utterance("Ann", "D2:2", "Since when?"),
            ],
        },
        "qa": [
            {
                "question": "What is Ann's cat called?",
                "answer": "Miso",
                "evidence": ["D1:3"],
                "category": 1,
            },
            {"question": "How many cats?", "answer": 1, "evidence": ["D1:1"], "category": 2},
            {
                "question": "Hobby and pet?",
                "answer": "pottery, cat",
                "evidence": ["D2:1; D1:1"],
                "category": 3,
            },
            {
                "question": "Bo's dog?",
                "adversarial_answer": "Rex",
                "evidence": ["D1:2"],
                "category": 5,
            },
            {"question": "No evidence?", "answer": "x", "evidence": [], "category": 4},
            {"question": "Missing turn?", "answer": "x", "evidence": ["D7:1"], "category": 4},
        ],
    },
    {
        "sample_id": "conv-2",
        "conversation": {
            "speaker_a": "Cy",
            "speaker_b": "Di",
            # Out of order, with session 10 after 9 (not after 1) and one date unreadable:
            # the sample falls back to session numbers.
            "session_10": [_utterance("Di", "D10:1", "Back from Oslo.")],
            "session_10_date_time": "sometime in June",
            "session_9": [_utterance("Cy", "D9:1", "Flying to Oslo tomorrow.")],
            "session_9_date_time": "9:00 am on 1 June, 2023",
        },
        "qa": [
            {
                "question": "Where did Cy go?",
                "answer": "Oslo",
                "evidence": ["D9:1 ", "D10:1"],
                "category": 1,
            },
        ],
    },
]


def _message(role: str, content: str, has_answer: bool = False) -> dict[str, Any]:
    return {"role": role, "content": content, "has_answer": has_answer}


SESSION_SHARED = [
    _message("user", "My sister lives in Porto.", True),
    _message("assistant", "Nice city!"),
]
SESSION_A = [_message("user", "hello"), _message("user", "I bought a blue bike.", True)]
SESSION_B = [_message("user", "hello"), _message("user", "The bike is great.")]

LONGMEMEVAL: list[dict[str, Any]] = [
    {
        "question_id": "q-sister",
        "question_type": "single-session-user",
        "question": "Where does my sister live?",
        "answer": "Porto",
        "question_date": "2023/05/30 (Tue) 10:00",
        "haystack_session_ids": ["s-shared", "s-a"],
        "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 09:00"],
        "haystack_sessions": [SESSION_SHARED, SESSION_A],
        "answer_session_ids": ["s-shared"],
    },
    {
        "question_id": "q-bike",
        "question_type": "multi-session",
        "question": "What bike did I buy and how is it?",
        "answer": "blue; great",
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_session_ids": ["s-shared", "s-b", "s-a"],
        "haystack_dates": [
            "2023/05/20 (Sat) 02:21",
            "2023/05/25 (Thu) 12:00",
            "2023/05/22 (Mon) 09:00",
        ],
        "haystack_sessions": [SESSION_SHARED, SESSION_B, SESSION_A],
        # s-b marks no answer turn and s-a does: only s-a's marked turn is evidence.
        "answer_session_ids": ["s-a", "s-b"],
    },
    {
        "question_id": "q-b-whole",
        "question_type": "temporal-reasoning",
        "question": "When did I write about the bike?",
        "answer": "May 25",
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_session_ids": ["s-b"],
        "haystack_dates": ["2023/05/25 (Thu) 12:00"],
        "haystack_sessions": [SESSION_B],
        "answer_session_ids": ["s-b"],
    },
    {
        "question_id": "q-pet_abs",
        "question_type": "single-session-user",
        "question": "What is my dog called?",
        "answer": "You never mentioned a dog.",
        "question_date": "2023/06/30 (Fri) 10:00",
        "haystack_session_ids": ["s-a"],
        "haystack_dates": ["2023/05/22 (Mon) 09:00"],
        "haystack_sessions": [SESSION_A],
        "answer_session_ids": [],
    },
]


def _write(tmp_path: Path, name: str, data: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _by_qid(corpus: Corpus) -> dict[str, Question]:
    return {q.qid: q for q in corpus.questions}


# ---- LoCoMo ---------------------------------------------------------------------------------


def test_locomo_turns_ids_sessions_and_days(tmp_path: Path) -> None:
    corpus = load_locomo(_write(tmp_path, "locomo10.json", LOCOMO))
    turns = {t.chunk_id: t for t in corpus.turns}
    assert len(corpus.turns) == 7
    assert turns["conv-1/D1:3"].text == "Ann: Miso."
    assert turns["conv-1/D1:3"].session == "conv-1/session_1"
    assert turns["conv-1/D1:1"].day == 0
    assert turns["conv-1/D2:1"].day == 7  # 8 May -> 15 May
    # conv-2 has an unreadable date: days are session numbers from its first session.
    assert turns["conv-2/D9:1"].day == 0
    assert turns["conv-2/D10:1"].day == 1
    assert [t.day for t in corpus.turns] == sorted(t.day for t in corpus.turns)


def test_locomo_questions_evidence_and_skips(tmp_path: Path) -> None:
    corpus = load_locomo(_write(tmp_path, "locomo10.json", LOCOMO))
    questions = _by_qid(corpus)
    assert set(questions) == {"conv-1/q0", "conv-1/q1", "conv-1/q2", "conv-2/q0"}
    assert questions["conv-1/q0"].evidence == ("conv-1/D1:3",)
    assert questions["conv-1/q0"].day == 1
    assert questions["conv-1/q0"].category == "1"
    assert questions["conv-1/q0"].group == "conv-1"
    assert questions["conv-1/q1"].evidence == ("conv-1/D1:1",)  # a number answer is fine
    assert questions["conv-1/q2"].evidence == ("conv-1/D2:1", "conv-1/D1:1")  # "D2:1; D1:1"
    assert questions["conv-1/q2"].day == 8
    assert questions["conv-2/q0"].evidence == ("conv-2/D9:1", "conv-2/D10:1")
    assert questions["conv-2/q0"].day == 2
    stats = corpus.stats()
    assert stats["qa_adversarial"] == 1
    assert stats["qa_skipped"] == 2
    assert stats["sessions_undated"] == 1
    assert stats["turns"] == 7 and stats["sessions"] == 4 and stats["groups"] == 2
    assert stats["train"] + stats["test"] == 4


def test_locomo_split_is_stable_and_seeded(tmp_path: Path) -> None:
    path = _write(tmp_path, "locomo10.json", LOCOMO)
    assert load_locomo(path, seed=3) == load_locomo(path, seed=3)
    splits = {tuple(q.split for q in load_locomo(path, seed=s).questions) for s in range(12)}
    assert len(splits) > 1


# ---- LongMemEval ----------------------------------------------------------------------------


def test_longmemeval_dedupes_sessions_and_texts(tmp_path: Path) -> None:
    corpus = load_longmemeval(_write(tmp_path, "longmemeval_s.json", LONGMEMEVAL))
    ids = [t.chunk_id for t in corpus.turns]
    # s-shared appears in two items, "user: hello" in two sessions: each stored once.
    assert sorted(ids) == ["s-a:0", "s-a:1", "s-b:1", "s-shared:0", "s-shared:1"]
    turns = {t.chunk_id: t for t in corpus.turns}
    assert turns["s-shared:0"].text == "user: My sister lives in Porto."
    assert turns["s-shared:0"].day == 0
    assert turns["s-a:0"].day == 2
    assert turns["s-b:1"].day == 5
    assert corpus.stats()["turns_duplicate_text"] == 1


def test_longmemeval_evidence_and_skips(tmp_path: Path) -> None:
    corpus = load_longmemeval(_write(tmp_path, "longmemeval_s.json", LONGMEMEVAL))
    questions = _by_qid(corpus)
    assert set(questions) == {"q-sister", "q-bike", "q-b-whole"}
    assert questions["q-sister"].evidence == ("s-shared:0",)
    assert questions["q-sister"].day == 1
    assert questions["q-sister"].category == "single-session-user"
    assert questions["q-sister"].group == "q-sister"
    assert questions["q-bike"].evidence == ("s-a:1",)
    # No marked turn in s-b: the whole session, its "hello" mapped to the kept copy.
    assert questions["q-b-whole"].evidence == ("s-a:0", "s-b:1")
    assert questions["q-b-whole"].day == 6
    stats = corpus.stats()
    assert stats["qa_abstention"] == 1
    assert stats["evidence_whole_session"] == 1


# ---- errors and dispatch --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not JSON"),
        (json.dumps({"sample_id": "x"}), "expected a JSON list"),
        (json.dumps([{"sample_id": "a", "qa": []}]), "sample 0 (a): missing key 'conversation'"),
        (json.dumps([LOCOMO[0], {"conversation": {}}]), "sample 1: missing key 'sample_id'"),
        (json.dumps([{"sample_id": "a", "conversation": {}, "qa": {}}]), "'qa' should be a list"),
    ],
)
def test_bad_locomo_files_name_file_and_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(CorpusError, match=re.escape(message)) as raised:
        load_corpus(path, "locomo")
    assert str(path) in str(raised.value)


def test_bad_longmemeval_item_is_named(tmp_path: Path) -> None:
    broken = [LONGMEMEVAL[0], {k: v for k, v in LONGMEMEVAL[1].items() if k != "haystack_dates"}]
    with pytest.raises(CorpusError, match=r"item 1: missing key 'haystack_dates'"):
        load_corpus(_write(tmp_path, "lme.json", broken), "longmemeval")
    with pytest.raises(CorpusError, match="cannot read"):
        load_corpus(tmp_path / "absent.json", "longmemeval")


def test_load_corpus_dispatch(tmp_path: Path) -> None:
    assert load_corpus(None, "generated", seed=2, size="small") == generated_corpus(seed=2)
    assert load_corpus(_write(tmp_path, "l.json", LOCOMO), "locomo").name.startswith("locomo")
    with pytest.raises(CorpusError, match="unknown corpus format 'csv'"):
        load_corpus(None, "csv")
    with pytest.raises(CorpusError, match="needs a corpus file"):
        load_corpus(None, "longmemeval")


# ---- the split ------------------------------------------------------------------------------


def test_split_keeps_same_evidence_together_and_honours_fraction() -> None:
    questions = [
        Question(f"q{i}", f"text {i}", (f"c{i // 2}",), "g", 1, SPLIT_TRAIN, category=str(i % 3))
        for i in range(60)
    ]
    split = split_questions(questions, 0.4, seed=1)
    assert [q.qid for q in split] == [q.qid for q in questions]
    assert split == split_questions(questions, 0.4, seed=1)
    assert split != split_questions(questions, 0.4, seed=2)
    sides: dict[tuple[str, ...], set[str]] = {}
    for q in split:
        sides.setdefault(q.evidence, set()).add(q.split)
    assert all(len(s) == 1 for s in sides.values())
    assert sum(q.split == SPLIT_TEST for q in split) == pytest.approx(24, abs=2)
    with pytest.raises(ValueError, match="test_fraction"):
        split_questions(questions, 1.0)


# ---- the generated corpus -------------------------------------------------------------------

STOP_WORDS = frozenset(
    {
        "a", "an", "the", "of", "to", "in", "on", "for", "at", "by", "is", "are", "was", "be",
        "do", "does", "did", "i", "my", "me", "we", "you", "it", "its", "this", "that", "what",
        "which", "who", "whom", "whose", "when", "where", "how", "why", "if", "so", "should",
        "would", "could", "can", "must", "get", "with", "from", "and", "or", "as", "they",
        "them", "there", "about", "s",
    }
)  # fmt: skip


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


@pytest.fixture(scope="module")
def small() -> Corpus:
    return generated_corpus(seed=7, size="small")


def test_generated_is_deterministic(small: Corpus) -> None:
    assert generated_corpus(seed=7, size="small") == small
    assert repr(generated_corpus(seed=7, size="small")) == repr(small)
    assert generated_corpus(seed=8, size="small") != small


def test_generated_small_sizes(small: Corpus) -> None:
    stats = small.stats()
    assert 300 <= stats["turns"] <= 400
    assert 100 <= stats["questions"] <= 140
    assert stats["test"] == pytest.approx(0.4 * stats["questions"], abs=3)
    assert len({t.chunk_id for t in small.turns}) == len(small.turns)
    assert len({t.text for t in small.turns}) == len(small.turns)
    assert {q.category for q in small.questions} == {"fact", "preference", "changed"}


def test_generated_evidence_days_and_supersedes(small: Corpus) -> None:
    turns = {t.chunk_id: t for t in small.turns}
    for q in small.questions:
        assert q.evidence and all(e in turns for e in q.evidence)
        assert q.day > max(turns[e].day for e in q.evidence)
    assert len({q.evidence for q in small.questions}) == len(small.questions)
    newest = {new for _, new in small.supersedes}
    assert small.supersedes
    for old, new in small.supersedes:
        assert turns[old].day < turns[new].day
        assert turns[old].title == turns[new].title
    # A changed fact is asked about its new value, never the stale one.
    changed = [q for q in small.questions if q.category == "changed"]
    assert len(changed) == len(small.supersedes)
    assert all(q.evidence[0] in newest for q in changed)


def test_generated_paraphrases(small: Corpus) -> None:
    for q in small.questions:
        assert len(q.paraphrases) == 2
        assert len({q.text, *q.paraphrases}) == 3


def test_generated_filler_and_kinds(small: Corpus) -> None:
    filler = [t for t in small.turns if not t.title]
    assert 0.4 <= len(filler) / len(small.turns) <= 0.7
    assert small.stats()["filler"] == len(filler)
    evidence = {e for q in small.questions for e in q.evidence}
    assert not evidence & {t.chunk_id for t in filler}
    kinds = Counter(t.kind for t in small.turns)
    assert set(kinds) == {"fact", "preference", "summary", "note"}
    for turn in small.turns:
        if turn.chunk_id in evidence:
            assert turn.kind in ("fact", "preference") and 5 <= turn.importance <= 8
        elif not turn.title:
            assert 3 <= turn.importance <= 5


def test_generated_has_near_duplicates_of_the_entity(small: Corpus) -> None:
    """Each entity's name is in many chunks, so the name alone cannot find the answer."""
    turns = {t.chunk_id: t for t in small.turns}
    per_title = Counter(t.title for t in small.turns if t.title)
    entity_mentions = [per_title[turns[q.evidence[0]].title] for q in small.questions]
    assert mean(entity_mentions) >= 3


def test_generated_questions_are_worded_unlike_their_evidence(small: Corpus) -> None:
    turns = {t.chunk_id: t for t in small.turns}
    overlaps = []
    for q in small.questions:
        evidence = [turns[e] for e in q.evidence]
        entity = set(_words(evidence[0].title))
        content = [w for w in _words(q.text) if w not in STOP_WORDS and w not in entity]
        found = {w for e in evidence for w in _words(e.text)}
        assert content, q.text
        overlaps.append(sum(w in found for w in content) / len(content))
    assert mean(overlaps) < 0.5


def test_generated_sizes_by_number_and_refusals() -> None:
    corpus = generated_corpus(seed=1, size=600)
    assert 500 <= len(corpus.turns) <= 700
    # Beyond the documentation's distinct passages, filler is still unique and in share.
    big = generated_corpus(seed=1, size=5000)
    assert 4500 <= len(big.turns) <= 5500
    assert len({t.text for t in big.turns}) == len(big.turns)
    assert 0.5 <= big.stats()["filler"] / len(big.turns) <= 0.65
    with pytest.raises(ValueError, match="size"):
        generated_corpus(size="medium")
    with pytest.raises(ValueError, match="at least"):
        generated_corpus(size=10)
