"""Corpora for the efficacy benchmark: memory chunks, the questions they answer, and a split.

The benchmark asks whether outcome learning makes recall better on questions it never
trained on, so a corpus has to be hard in the ways agent memory is hard: many chunks share
the subject of a question, the question is worded differently from the chunk that answers
it, near-duplicates compete with the answer, some facts change, and most of what is stored
is low-information chatter. Three sources give that:

* `generated_corpus` invents one from a seed, with only the standard library, so CI and
  anyone without the public data sets can run the benchmark and get identical input.
* `load_locomo` reads LoCoMo's `locomo10.json` (long two-person conversations).
* `load_longmemeval` reads LongMemEval's `longmemeval_s.json` (chat histories with
  the answering turns marked).

Every question names the chunk ids that answer it (its evidence) and the first simulated
day on which it can be asked, so a run can ingest day by day and never ask before the
answer exists. `split_questions` divides questions into training and held-out sets.

One module: every source (LoCoMo, LongMemEval and the generator, which is most of the file)
yields the one Corpus type and the split over it, which the benchmark imports through
load_corpus.
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from functools import cache
from pathlib import Path
from pydoc_data.topics import topics as PYDOC_TOPICS
from typing import Any, Final

# ---- vocabulary of the types ----------------------------------------------------------------

SPLIT_TRAIN: Final = "train"
SPLIT_TEST: Final = "test"
KIND_FACT: Final = "fact"
KIND_PREFERENCE: Final = "preference"
KIND_INSIGHT: Final = "insight"
KIND_SUMMARY: Final = "summary"
KIND_NOTE: Final = "note"
KINDS: Final = (KIND_FACT, KIND_PREFERENCE, KIND_INSIGHT, KIND_SUMMARY, KIND_NOTE)
IMPORTANCE_RANGE: Final = range(0, 11)
DEFAULT_IMPORTANCE: Final = 5

DEFAULT_SEED: Final = 7
DEFAULT_TEST_FRACTION: Final = 0.4

FORMAT_GENERATED: Final = "generated"
FORMAT_LOCOMO: Final = "locomo"
FORMAT_LONGMEMEVAL: Final = "longmemeval"
FORMATS: Final = (FORMAT_GENERATED, FORMAT_LOCOMO, FORMAT_LONGMEMEVAL)


class CorpusError(ValueError):
    """A corpus file cannot be used; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class Turn:
    """One memory chunk, as the daemon would store it."""

    chunk_id: str
    text: str
    session: str
    day: int
    kind: str = KIND_NOTE
    importance: int = DEFAULT_IMPORTANCE
    title: str = ""


@dataclass(frozen=True)
class Question:
    """A recall query and the chunks that answer it.

    `day` is the earliest simulated day the question can be asked: every evidence turn
    exists by then. `paraphrases` are other wordings of the same need, to test whether
    what was learnt from one wording carries over to another.
    """

    qid: str
    text: str
    evidence: tuple[str, ...]
    group: str
    day: int
    split: str
    paraphrases: tuple[str, ...] = ()
    category: str = ""


@dataclass(frozen=True)
class Corpus:
    """Turns in chronological order, questions, and facts that were later restated.

    `counts` carries what a loader dropped or patched (skipped questions, fallbacks), so a
    report can say how much of the source it actually measured.
    """

    name: str
    turns: tuple[Turn, ...]
    questions: tuple[Question, ...]
    supersedes: tuple[tuple[str, str], ...] = ()
    counts: tuple[tuple[str, int], ...] = ()

    def train(self) -> list[Question]:
        return [q for q in self.questions if q.split == SPLIT_TRAIN]

    def test(self) -> list[Question]:
        return [q for q in self.questions if q.split == SPLIT_TEST]

    def stats(self) -> dict[str, int]:
        """Sizes for the report header, plus the loader's own counts."""
        kinds = Counter(turn.kind for turn in self.turns)
        days = [turn.day for turn in self.turns] + [q.day for q in self.questions]
        stats = {
            "turns": len(self.turns),
            "sessions": len({turn.session for turn in self.turns}),
            "days": (max(days) + 1) if days else 0,
            "questions": len(self.questions),
            "train": len(self.train()),
            "test": len(self.test()),
            "groups": len({q.group for q in self.questions}),
            "evidence_chunks": len({c for q in self.questions for c in q.evidence}),
            "paraphrases": sum(len(q.paraphrases) for q in self.questions),
            "supersedes": len(self.supersedes),
        }
        stats.update({f"kind_{kind}": kinds[kind] for kind in KINDS if kinds[kind]})
        stats.update(dict(self.counts))
        return stats


# ---- the split ------------------------------------------------------------------------------


def split_questions(
    questions: Sequence[Question],
    test_fraction: float = DEFAULT_TEST_FRACTION,
    seed: int = DEFAULT_SEED,
) -> tuple[Question, ...]:
    """The same questions, in the same order, each marked train or test.

    Questions with the same group and the same evidence go to the same side: otherwise a
    "held-out" question could be a reworded training question whose answer was rewarded,
    and the held-out score would measure memorisation. Units are shuffled within each
    category so both sides see every category in proportion.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be between 0 and 1, not {test_fraction}")
    units: dict[tuple[str, frozenset[str]], list[int]] = {}
    for position, question in enumerate(questions):
        units.setdefault((question.group, frozenset(question.evidence)), []).append(position)
    by_category: dict[str, list[tuple[str, frozenset[str]]]] = defaultdict(list)
    for key, positions in units.items():
        by_category[questions[positions[0]].category].append(key)
    rng = random.Random(seed)
    held_out: set[int] = set()
    for category in sorted(by_category):
        keys = sorted(by_category[category], key=lambda k: (k[0], sorted(k[1])))
        rng.shuffle(keys)
        for key in keys[: round(len(keys) * test_fraction)]:
            held_out.update(units[key])
    return tuple(
        replace(q, split=SPLIT_TEST if i in held_out else SPLIT_TRAIN)
        for i, q in enumerate(questions)
    )


# ---- shared by the loaders ------------------------------------------------------------------


class _Builder:
    """Collects turns and questions for a loader, and the counts of what it had to drop.

    Both public data sets need the same care: turn ids must stay unique, a question's day
    follows from its evidence, and nothing is silently discarded.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.turns: dict[str, Turn] = {}
        self.questions: list[Question] = []
        self.counts: Counter[str] = Counter()
        self._by_text: dict[str, str] = {}

    def add_turn(self, turn: Turn, *, dedupe_text: bool = False) -> str:
        """Store `turn` unless it is already there; the id that stands for it either way."""
        if turn.chunk_id in self.turns:
            return turn.chunk_id
        if dedupe_text:
            earlier = self._by_text.get(turn.text)
            if earlier is not None:
                self.counts["turns_duplicate_text"] += 1
                return earlier
            self._by_text[turn.text] = turn.chunk_id
        self.turns[turn.chunk_id] = turn
        return turn.chunk_id

    def add_question(
        self, qid: str, text: str, evidence: Iterable[str], group: str, category: str
    ) -> None:
        """Asked the day after its last evidence: the earliest day a memory could answer it."""
        unique = tuple(dict.fromkeys(evidence))
        day = max(self.turns[chunk].day for chunk in unique) + 1
        self.questions.append(
            Question(qid, text, unique, group, day, split=SPLIT_TRAIN, category=category)
        )

    def build(self, *, seed: int, test_fraction: float) -> Corpus:
        turns = sorted(self.turns.values(), key=lambda t: t.day)
        questions = sorted(self.questions, key=lambda q: q.day)
        return Corpus(
            name=self.name,
            turns=tuple(turns),
            questions=split_questions(questions, test_fraction, seed),
            counts=tuple(sorted((key, value) for key, value in self.counts.items() if value)),
        )


class _Source:
    """A JSON file being read: where each error message points."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise CorpusError(f"{path}: cannot read: {error.strerror or error}") from None
        try:
            self.data: Any = json.loads(text)
        except json.JSONDecodeError as error:
            raise CorpusError(f"{path}: not JSON: {error}") from None

    def error(self, where: str, problem: str) -> CorpusError:
        return CorpusError(f"{self.path}: {where}: {problem}")

    def items(self, what: str) -> list[dict[str, Any]]:
        """The top-level list of objects both data sets use."""
        if not isinstance(self.data, list):
            raise CorpusError(
                f"{self.path}: expected a JSON list of {what}, found {type(self.data).__name__}"
            )
        for index, item in enumerate(self.data):
            if not isinstance(item, dict):
                raise self.error(f"{what} {index}", f"expected an object, found {_kind(item)}")
        return list(self.data)

    def get(
        self, obj: Mapping[str, Any], key: str, where: str, expected: type[object] | None = None
    ) -> Any:
        if key not in obj:
            raise self.error(where, f"missing key {key!r}")
        value = obj[key]
        if expected is not None and not isinstance(value, expected):
            raise self.error(
                where, f"{key!r} should be a {expected.__name__}, found {_kind(value)}"
            )
        return value


def _kind(value: object) -> str:
    return type(value).__name__


def _day_offsets(dates: Mapping[str, datetime]) -> dict[str, int]:
    """Whole days since the earliest date, so the simulation starts on day 0."""
    if not dates:
        return {}
    start = min(dates.values()).date()
    return {key: (value.date() - start).days for key, value in dates.items()}


def _parse_date(text: object, formats: Sequence[str]) -> datetime | None:
    if not isinstance(text, str):
        return None
    for pattern in formats:
        try:
            return datetime.strptime(text.strip(), pattern)
        except ValueError:
            continue
    return None


# ---- LoCoMo ---------------------------------------------------------------------------------

LOCOMO_ADVERSARIAL_CATEGORY: Final = 5
LOCOMO_DATE_FORMATS: Final = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %b, %Y")
_LOCOMO_SESSION: Final = re.compile(r"session_(\d+)")
#: "D8:6", also inside "D8:6; D9:17", "D 8:6" or "D08:06", which the real file contains.
_LOCOMO_DIA_ID: Final = re.compile(r"D\s*(\d+)\s*:\s*(\d+)")


def _normal_dia_id(text: str) -> list[str]:
    """Every dialogue id written in `text`, spelled the one way the conversation uses."""
    return [f"D{int(s)}:{int(t)}" for s, t in _LOCOMO_DIA_ID.findall(text)]


def load_locomo(
    path: Path, *, seed: int = DEFAULT_SEED, test_fraction: float = DEFAULT_TEST_FRACTION
) -> Corpus:
    """LoCoMo conversations as memory: one chunk per utterance, one question per QA item.

    Adversarial questions (category 5) are skipped: their answer is not in the conversation,
    so there is no evidence to retrieve. Days are counted per sample from its first session,
    because each sample is a separate history; if any session date of a sample cannot be
    parsed, the whole sample uses session numbers instead, so its days stay in one unit.
    """
    source = _Source(path)
    builder = _Builder(f"locomo:{path.name}")
    for index, sample in enumerate(source.items("samples")):
        where = f"sample {index}"
        sample_id = str(source.get(sample, "sample_id", where))
        where = f"sample {index} ({sample_id})"
        conversation = source.get(sample, "conversation", where, dict)
        dia_ids = _load_locomo_sessions(source, builder, sample_id, conversation, where)
        for number, qa in enumerate(source.get(sample, "qa", where, list)):
            qa_where = f"{where} qa {number}"
            if not isinstance(qa, dict):
                raise source.error(qa_where, f"expected an object, found {_kind(qa)}")
            category = source.get(qa, "category", qa_where)
            if category == LOCOMO_ADVERSARIAL_CATEGORY:
                builder.counts["qa_adversarial"] += 1
                continue
            question = str(source.get(qa, "question", qa_where))
            written = source.get(qa, "evidence", qa_where, list)
            evidence = [dia for text in written for dia in _normal_dia_id(str(text))]
            if not evidence or any(dia not in dia_ids for dia in evidence):
                builder.counts["qa_skipped"] += 1
                continue
            builder.add_question(
                f"{sample_id}/q{number}",
                question,
                (dia_ids[dia] for dia in evidence),
                group=sample_id,
                category=str(category),
            )
    return builder.build(seed=seed, test_fraction=test_fraction)


def _load_locomo_sessions(
    source: _Source,
    builder: _Builder,
    sample_id: str,
    conversation: Mapping[str, Any],
    where: str,
) -> dict[str, str]:
    """Add a sample's utterances; map each normalised dialogue id to its chunk id."""
    numbers = sorted(
        int(match.group(1))
        for key, value in conversation.items()
        if (match := _LOCOMO_SESSION.fullmatch(key)) and isinstance(value, list)
    )
    dates = {
        str(n): _parse_date(conversation.get(f"session_{n}_date_time"), LOCOMO_DATE_FORMATS)
        for n in numbers
    }
    parsed = {n: d for n, d in dates.items() if d is not None}
    if len(parsed) == len(dates):
        days = _day_offsets(parsed)
    else:
        builder.counts["sessions_undated"] += len(dates) - len(parsed)
        days = {str(n): n - numbers[0] for n in numbers}
    chunk_ids: dict[str, str] = {}
    for n in numbers:
        for position, utterance in enumerate(conversation[f"session_{n}"]):
            turn_where = f"{where} session_{n} turn {position}"
            if not isinstance(utterance, dict):
                raise source.error(turn_where, f"expected an object, found {_kind(utterance)}")
            dia_id = str(source.get(utterance, "dia_id", turn_where))
            speaker = source.get(utterance, "speaker", turn_where)
            text = source.get(utterance, "text", turn_where)
            normal = _normal_dia_id(dia_id)
            key = normal[0] if len(normal) == 1 else dia_id
            if key in chunk_ids:
                builder.counts["turns_duplicate_id"] += 1
                continue
            chunk_ids[key] = builder.add_turn(
                Turn(
                    chunk_id=f"{sample_id}/{dia_id}",
                    text=f"{speaker}: {text}",
                    session=f"{sample_id}/session_{n}",
                    day=days[str(n)],
                )
            )
    return chunk_ids


# ---- LongMemEval ----------------------------------------------------------------------------

LONGMEMEVAL_DATE_FORMATS: Final = ("%Y/%m/%d (%a) %H:%M", "%Y/%m/%d %H:%M", "%Y/%m/%d")
LONGMEMEVAL_ABSTENTION_SUFFIX: Final = "_abs"


def load_longmemeval(
    path: Path, *, seed: int = DEFAULT_SEED, test_fraction: float = DEFAULT_TEST_FRACTION
) -> Corpus:
    """LongMemEval's haystacks merged into one memory, one question per item.

    Items share sessions, and different sessions repeat the same filler turns; both are
    stored once, because the daemon would store them once, and a duplicate could otherwise
    steal a rank from the evidence it copies. Abstention questions are skipped: nothing in
    the haystack answers them.
    """
    source = _Source(path)
    items = source.items("items")
    sessions: dict[str, tuple[list[Any], datetime]] = {}
    for index, item in enumerate(items):
        where = f"item {index}"
        ids = source.get(item, "haystack_session_ids", where, list)
        dates = source.get(item, "haystack_dates", where, list)
        bodies = source.get(item, "haystack_sessions", where, list)
        if not len(ids) == len(dates) == len(bodies):
            raise source.error(
                where,
                f"haystack_session_ids, haystack_dates and haystack_sessions differ in length "
                f"({len(ids)}, {len(dates)}, {len(bodies)})",
            )
        for session_id, date_text, body in zip(ids, dates, bodies, strict=True):
            date = _parse_date(date_text, LONGMEMEVAL_DATE_FORMATS)
            if date is None:
                raise source.error(where, f"session {session_id}: unreadable date {date_text!r}")
            if not isinstance(body, list):
                raise source.error(where, f"session {session_id}: expected a list of turns")
            sessions.setdefault(str(session_id), (body, date))
    days = _day_offsets({sid: date for sid, (_, date) in sessions.items()})

    builder = _Builder(f"longmemeval:{path.name}")
    chunk_ids: dict[tuple[str, int], str] = {}
    for session_id, (body, _) in sessions.items():
        for position, message in enumerate(body):
            turn_where = f"session {session_id} turn {position}"
            if not isinstance(message, dict):
                raise source.error(turn_where, f"expected an object, found {_kind(message)}")
            role = source.get(message, "role", turn_where)
            content = source.get(message, "content", turn_where)
            chunk_ids[(session_id, position)] = builder.add_turn(
                Turn(
                    f"{session_id}:{position}", f"{role}: {content}", session_id, days[session_id]
                ),
                dedupe_text=True,
            )

    for index, item in enumerate(items):
        where = f"item {index}"
        qid = str(source.get(item, "question_id", where))
        if qid.endswith(LONGMEMEVAL_ABSTENTION_SUFFIX):
            builder.counts["qa_abstention"] += 1
            continue
        answer_sessions = [str(s) for s in source.get(item, "answer_session_ids", where, list)]
        if not answer_sessions or any(s not in sessions for s in answer_sessions):
            builder.counts["qa_skipped"] += 1
            continue
        marked, whole = _longmemeval_evidence(sessions, answer_sessions)
        if not marked:
            builder.counts["evidence_whole_session"] += 1
        builder.add_question(
            qid,
            str(source.get(item, "question", where)),
            (chunk_ids[key] for key in (marked or whole)),
            group=qid,
            category=str(source.get(item, "question_type", where)),
        )
    return builder.build(seed=seed, test_fraction=test_fraction)


def _longmemeval_evidence(
    sessions: Mapping[str, tuple[list[Any], datetime]], answer_sessions: Sequence[str]
) -> tuple[list[tuple[str, int]], list[tuple[str, int]]]:
    """The turns marked `has_answer` in the answer sessions, and all their turns."""
    marked: list[tuple[str, int]] = []
    whole: list[tuple[str, int]] = []
    for session_id in answer_sessions:
        for position, message in enumerate(sessions[session_id][0]):
            whole.append((session_id, position))
            if message.get("has_answer") is True:
                marked.append((session_id, position))
    return marked, whole


# ---- the generated corpus -------------------------------------------------------------------


@dataclass(frozen=True)
class _Profile:
    """How much of what a generated corpus holds.

    The rates are per (entity, attribute) fact: `distractor_rate` near-duplicates and
    `chatter_rate` mentions without content. The large profile is denser in both, because
    its purpose is a harder haystack, not just a longer one.
    """

    turns: int
    sessions: int
    days: int
    filler_share: float
    distractor_rate: float
    chatter_rate: float


SIZE_SMALL: Final = "small"
SIZE_LARGE: Final = "large"
PROFILES: Final = {
    SIZE_SMALL: _Profile(
        turns=370, sessions=40, days=60, filler_share=0.52, distractor_rate=0.3, chatter_rate=0.15
    ),
    SIZE_LARGE: _Profile(
        turns=3600,
        sessions=360,
        days=180,
        filler_share=0.58,
        distractor_rate=0.5,
        chatter_rate=0.35,
    ),
}
#: Requested turn counts from here on are shaped like the large profile.
LARGE_FROM_TURNS: Final = 1500
MIN_TURNS: Final = 60
MIN_SESSIONS: Final = 4
MIN_DAYS: Final = 6

#: Share of (entity, attribute) facts restated later with a new value.
CHANGE_RATE: Final = 0.1
#: The first statement of a changing fact falls in this early share of sessions, so there
#: is time left for the change and for questions after it.
CHANGE_EARLY_SHARE: Final = 0.6
#: Questions come 1 to 1 + this many days after their last evidence.
QUESTION_DELAY_DAYS: Final = 5
PARAPHRASES_PER_QUESTION: Final = 2
MIN_ATTRIBUTES_PER_ENTITY: Final = 3
#: Share of filler that is greetings and acknowledgements rather than documentation prose.
GREETING_SHARE: Final = 0.25
FILLER_CHARS: Final = range(60, 401)
FILLER_MAX_SENTENCES: Final = 3
#: Distractors about a look-alike entity rather than a look-alike attribute.
DECOY_SHARE: Final = 0.5

FACT_IMPORTANCE: Final = (6, 8)
CHANGE_IMPORTANCE: Final = (7, 8)
DISTRACTOR_IMPORTANCE: Final = (5, 7)
PREFERENCE_IMPORTANCE: Final = (5, 7)
CHATTER_IMPORTANCE: Final = (2, 4)
GREETING_IMPORTANCE: Final = (3, 3)
PROSE_IMPORTANCE: Final = (4, 5)

GENERATED_GROUP: Final = "generated"
CATEGORY_FACT: Final = "fact"
CATEGORY_PREFERENCE: Final = "preference"
CATEGORY_CHANGED: Final = "changed"

ENTITY_SERVICE: Final = "service"
ENTITY_PERSON: Final = "person"
ENTITY_PROJECT: Final = "project"


@dataclass(frozen=True)
class _Attribute:
    """One thing a question can ask about an entity, and the words on each side.

    Facts and questions draw from different vocabularies on purpose ("answers on port" vs
    "listen on"): the entity name is the only reliable lexical anchor, and it is shared by
    every chunk about the entity, so lexical match alone cannot pick the attribute.
    `twin` is a look-alike attribute (a staging port, a backup contact) for distractors;
    `change`, when present, restates the fact with a new value.
    """

    key: str
    values: tuple[str, ...]
    facts: tuple[str, ...]
    questions: tuple[str, ...]
    twin: str
    change: str = ""
    kind: str = KIND_FACT


_TEAMS: Final = (
    "payments", "search", "platform", "growth", "identity", "mobile", "data", "billing",
    "observability", "storage", "edge", "security",
)  # fmt: skip
_STORES: Final = (
    "Postgres", "Cassandra", "SQLite", "Redis", "DynamoDB", "ClickHouse", "RocksDB",
    "FoundationDB", "MySQL", "Elasticsearch",
)  # fmt: skip
_REGIONS: Final = (
    "eu-west-1", "us-east-2", "ap-south-1", "eu-central-1", "us-west-2", "ca-central-1",
    "sa-east-1", "ap-northeast-1",
)  # fmt: skip
_LANGUAGES: Final = (
    "Rust",
    "Go",
    "Kotlin",
    "Python",
    "Elixir",
    "TypeScript",
    "Java",
    "Zig",
    "OCaml",
)
_WEEKDAYS: Final = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday")
_MONTHS: Final = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September",
    "October", "November", "December",
)  # fmt: skip
_RUNBOOKS: Final = (
    "billing", "deploy", "incident", "backup", "release", "onboarding", "migration",
    "failover", "capacity", "access-review",
)  # fmt: skip
_CITIES: Final = (
    "Lisbon", "Osaka", "Denver", "Tallinn", "Nairobi", "Montreal", "Perth", "Bogota", "Krakow",
    "Auckland",
)  # fmt: skip
_REVIEW_TIMES: Final = (
    "in the morning", "right after lunch", "late in the afternoon", "on Monday mornings",
    "at the end of the week",
)  # fmt: skip
_CHANNELS: Final = (
    "email", "a direct chat message", "a phone call", "a comment on the ticket", "a short video call",
)  # fmt: skip
_EDITORS: Final = ("Vim", "Emacs", "VS Code", "Helix", "IntelliJ", "Sublime Text", "Zed")
_FORGES: Final = ("GitHub", "GitLab", "Gitea", "Bitbucket", "Sourcehut", "Codeberg")
#: Values filled in at generation time rather than drawn from a fixed list.
_PERSON: Final = ("<person>",)
_NUMBER_PORT: Final = ("<port>",)
_NUMBER_RETRIES: Final = ("<retries>",)
_MONEY: Final = ("<budget>",)
_DATE: Final = ("<date>",)

_ATTRIBUTES: Final[dict[str, tuple[_Attribute, ...]]] = {
    ENTITY_SERVICE: (
        _Attribute(
            "port",
            _NUMBER_PORT,
            facts=(
                "{e} now answers on port {v} after the {month} move.",
                "Heads up: {e} accepts connections on {v} from today.",
                "Updated the firewall so inbound traffic on {v} reaches {e}.",
            ),
            questions=(
                "Which port does {e} listen on?",
                "What number should a client dial to talk to {e}?",
                "If I open a socket to {e}, where do I point it?",
            ),
            twin="{e}'s staging copy answers on port {v}.",
            change="{e} moved from port {old} to {v}; update your configs.",
        ),
        _Attribute(
            "owner",
            _TEAMS,
            facts=(
                "The {v} team maintains {e} now.",
                "{e} was handed to {v} in the reorg.",
                "Since the reorg, {v} carries the pager and the roadmap for {e}.",
            ),
            questions=(
                "Who owns {e}?",
                "Which group is responsible for {e}?",
                "If {e} breaks, whose problem is it?",
            ),
            twin="The dashboards of {e} are kept by the {v} team.",
            change="{e} was handed from {old} to {v} this week.",
        ),
        _Attribute(
            "storage",
            _STORES,
            facts=(
                "{e} keeps its state in {v}.",
                "We settled on {v} underneath {e}.",
                "{e} persists everything to {v} since the migration.",
            ),
            questions=(
                "What database does {e} use?",
                "Where are the records of {e} written?",
                "Which datastore sits behind {e}?",
            ),
            twin="{e}'s audit trail goes to {v}, separately from its state.",
            change="{e} was migrated off {old} onto {v} last night.",
        ),
        _Attribute(
            "region",
            _REGIONS,
            facts=(
                "{e} runs out of {v}.",
                "{e} got pinned to {v} for latency reasons.",
                "Capacity for {e} lives in {v} only.",
            ),
            questions=(
                "In which region is {e} deployed?",
                "Where geographically are the {e} servers?",
                "Which cloud zone hosts {e}?",
            ),
            twin="{e}'s disaster-recovery replica runs out of {v}.",
            change="{e} moved from {old} to {v} over the weekend.",
        ),
        _Attribute(
            "language",
            _LANGUAGES,
            facts=(
                "{e} is written in {v}.",
                "Most of the {e} code is {v}.",
                "The {e} rewrite landed; it is all {v} now.",
            ),
            questions=(
                "What programming language is {e} implemented in?",
                "Which language would I need to know to hack on {e}?",
                "What is the implementation of {e} made of?",
            ),
            twin="The {e} command-line client is written in {v}.",
        ),
        _Attribute(
            "retries",
            _NUMBER_RETRIES,
            facts=(
                "{e} gives up after {v} attempts.",
                "Capped {e} at {v} tries per request.",
                "{e} will try {v} times before failing the job.",
            ),
            questions=(
                "What is the retry limit for {e}?",
                "How many retries does {e} make?",
                "How often does {e} retry a failed call?",
            ),
            twin="{e} waits {v} seconds between attempts.",
            change="Raised the attempt cap on {e} from {old} to {v}.",
        ),
        _Attribute(
            "deploy_day",
            _WEEKDAYS,
            facts=(
                "{e} ships every {v}.",
                "New {e} builds go out on {v}s.",
                "We cut a fresh {e} build each {v} morning.",
            ),
            questions=(
                "On which day is {e} deployed?",
                "When does {e} get released?",
                "What is the rollout day for {e}?",
            ),
            twin="The config freeze for {e} starts every {v}.",
            change="{e} shipping moved from {old} to {v}.",
        ),
        _Attribute(
            "on_call",
            _PERSON,
            facts=(
                "{v} is carrying the pager for {e} this rotation.",
                "Page {v} if {e} misbehaves.",
                "{v} picks up {e} alerts this month.",
            ),
            questions=(
                "Who is on call for {e}?",
                "Who should I wake up when {e} goes down?",
                "Whose phone rings for {e} incidents?",
            ),
            twin="{v} is the backup contact for {e} alerts.",
            change="The {e} pager passed from {old} to {v}.",
        ),
    ),
    ENTITY_PERSON: (
        _Attribute(
            "runbook",
            _RUNBOOKS,
            facts=(
                "{e} took over the {v} runbook from {other}.",
                "{e} keeps the {v} runbook up to date.",
                "Edits to the {v} runbook go through {e}.",
            ),
            questions=(
                "Which procedures document belongs to {e}?",
                "What playbook is {e} in charge of?",
                "Which ops guide should I ask {e} about?",
            ),
            twin="{e} reviewed the {v} runbook last quarter.",
            change="{e} handed off the {old} runbook and took the {v} one instead.",
        ),
        _Attribute(
            "city",
            _CITIES,
            facts=(
                "{e} works from {v}.",
                "{e} relocated to {v} in the spring.",
                "{e} is based in {v}, so expect late replies.",
            ),
            questions=(
                "Where does {e} live?",
                "Which city is {e} in?",
                "What is the home office location of {e}?",
            ),
            twin="{e} is visiting {v} next month.",
            change="{e} moved from {old} to {v}.",
        ),
        _Attribute(
            "team",
            _TEAMS,
            facts=(
                "{e} joined {v} last sprint.",
                "{e} sits with the {v} folks now.",
                "{e} transferred into {v} after the reorg.",
            ),
            questions=(
                "Which team is {e} on?",
                "What squad does {e} belong to?",
                "In which department does {e} work?",
            ),
            twin="{e} is helping {v} out for a few weeks.",
            change="{e} switched from {old} to {v}.",
        ),
        _Attribute(
            "manager",
            _PERSON,
            facts=(
                "{e} reports to {v}.",
                "{v} does the one-on-ones with {e} now.",
                "{v} signs off on leave requests from {e}.",
            ),
            questions=(
                "Who is the manager of {e}?",
                "Who is {e}'s boss?",
                "Whom does {e} answer to?",
            ),
            twin="{v} mentors {e} on the side.",
        ),
        _Attribute(
            "review_time",
            _REVIEW_TIMES,
            facts=(
                "{first} prefers reviews {v}.",
                "{first} said code reviews work best {v}.",
                "Send {first} pull requests {v}; that is when they get read.",
            ),
            questions=(
                "When is the best time to ask {e} to look at a PR?",
                "At what time of day does {e} like to check patches?",
                "When should I send my diff to {e}?",
            ),
            twin="{first} prefers standups {v}.",
            kind=KIND_PREFERENCE,
        ),
        _Attribute(
            "channel",
            _CHANNELS,
            facts=(
                "{first} prefers {v} over anything else.",
                "Best way to reach {first} is {v}.",
                "{first} asked to be contacted by {v}.",
            ),
            questions=(
                "How should I get hold of {e}?",
                "What is the favourite communication medium of {e}?",
                "How do I ping {e} so they actually notice?",
            ),
            twin="{first} ignores {v} during focus time.",
            kind=KIND_PREFERENCE,
        ),
        _Attribute(
            "editor",
            _EDITORS,
            facts=(
                "{first} prefers {v} for everything.",
                "{first} swears by {v}.",
                "{first} insists on {v} when pairing.",
            ),
            questions=(
                "Which editor does {e} use?",
                "What IDE does {e} like?",
                "What tool does {e} write code in?",
            ),
            twin="{first} tried {v} once and hated it.",
            kind=KIND_PREFERENCE,
        ),
    ),
    ENTITY_PROJECT: (
        _Attribute(
            "deadline",
            _DATE,
            facts=(
                "{e} has to be done by {v}.",
                "The hard cutoff for {e} is {v}.",
                "We promised {e} to the client for {v}.",
            ),
            questions=(
                "When is {e} due?",
                "What is the deadline for {e}?",
                "By what date must {e} ship?",
            ),
            twin="The design review of {e} is scheduled for {v}.",
            change="{e} slipped from {old} to {v}.",
        ),
        _Attribute(
            "lead",
            _PERSON,
            facts=(
                "{v} is driving {e}.",
                "{v} runs the day-to-day on {e}.",
                "Decisions on {e} go through {v}.",
            ),
            questions=(
                "Who leads {e}?",
                "Who is in charge of {e}?",
                "Which person heads {e}?",
            ),
            twin="{v} sits in on {e} planning.",
            change="{e} passed from {old} to {v}.",
        ),
        _Attribute(
            "budget",
            _MONEY,
            facts=(
                "{e} got {v} approved for the quarter.",
                "Finance capped {e} at {v}.",
                "{e} can spend up to {v}.",
            ),
            questions=(
                "How much money does {e} have?",
                "What is the budget of {e}?",
                "What funding was allocated to {e}?",
            ),
            twin="{e} spent {v} on contractors so far.",
            change="Finance raised the {e} cap from {old} to {v}.",
        ),
        _Attribute(
            "forge",
            _FORGES,
            facts=(
                "The {e} code lives on {v}.",
                "We mirror nothing; {e} is only on {v}.",
                "Clone {e} from {v}.",
            ),
            questions=(
                "Where is the repo for {e} hosted?",
                "Which forge holds the {e} source?",
                "Where do I find the git remote of {e}?",
            ),
            twin="The {e} issue tracker is on {v}.",
        ),
    ),
}

_CHATTER: Final[dict[str, tuple[str, ...]]] = {
    ENTITY_SERVICE: (
        "Need to look at {e} again next week.",
        "Ping me when {e} is green.",
        "{e} came up in standup; nothing decided yet.",
        "Can someone remind me what we said about {e}?",
        "Adding {e} to Thursday's agenda.",
        "No news on {e} today.",
    ),
    ENTITY_PERSON: (
        "Had coffee with {e}, nice chat.",
        "{e} is out until Monday.",
        "Should loop in {e} at some point.",
        "{e} sent a long message, will read later.",
        "Missed {e} at the sync today.",
        "Remind me to thank {e}.",
    ),
    ENTITY_PROJECT: (
        "{e} retro moved to next week.",
        "Still waiting for feedback on {e}.",
        "{e} came up at lunch again.",
        "Need to write the {e} update.",
        "Anyone have the slides for {e}?",
        "Parking {e} until after the holidays.",
    ),
}

_GREETINGS: Final = (
    "Thanks, that helps.", "Ok, back after lunch.", "Morning all.", "Sounds good.", "Will do.",
    "Let me check and get back to you.", "Heading out, see you tomorrow.", "Got it, thanks!",
    "Coffee first.", "Back online.", "Noted.", "On it.", "Makes sense to me.", "Quick break.",
    "Fair enough.", "Good catch.", "Perfect, thank you.", "One sec.", "All good here.",
    "Cool, ship it.", "Hmm, interesting.", "Done for today.", "Running a bit late.",
    "Happy Friday, everyone.",
)  # fmt: skip

_ONSETS: Final = (
    "b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kl",
    "st", "tr", "gr", "sh", "th",
)  # fmt: skip
_VOWELS: Final = ("a", "e", "i", "o", "u", "ai", "ei", "ou")
_CODAS: Final = ("", "", "", "n", "r", "l", "s")
_SERVICE_SUFFIXES: Final = (
    "cache", "queue", "gateway", "indexer", "relay", "ledger", "scheduler", "router", "vault",
    "mailer", "auth", "search", "proxy", "broker",
)  # fmt: skip
#: People who can be named as owners, managers or on-call grow with the systems they run.
FACTS_PER_STAFF: Final = 5
MIN_STAFF: Final = 6
_SENTENCE_END: Final = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'(])")
_NOT_PROSE: Final = ("::=", ">>>", "***", "===", "---")


@dataclass(frozen=True)
class _Entity:
    name: str
    kind: str
    first: str  # how a colleague would say it in passing: a first name, or the full name


@dataclass
class _Chunk:
    """A turn before it has a session and a position."""

    text: str
    kind: str
    importance: int
    title: str
    session: int = -1
    chunk_id: str = ""


class _Names:
    """Invented names: pronounceable, distinct, and never an English word we use elsewhere."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self, syllables: int) -> str:
        while True:
            parts = [self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) for _ in range(syllables)]
            word = "".join(parts) + self.rng.choice(_CODAS)
            if word not in self.used and len(word) >= 4:
                self.used.add(word)
                return word

    def person(self, last: str | None = None) -> _Entity:
        first = self.word(2).capitalize()
        name = f"{first} {last or self.word(2).capitalize()}"
        return _Entity(name, ENTITY_PERSON, first)

    def service(self, stem: str | None = None) -> _Entity:
        name = f"{stem or self.word(2)}-{self.rng.choice(_SERVICE_SUFFIXES)}"
        while name in self.used:
            name = f"{stem or self.word(2)}-{self.rng.choice(_SERVICE_SUFFIXES)}"
        self.used.add(name)
        return _Entity(name, ENTITY_SERVICE, name)

    def project(self) -> _Entity:
        name = self.word(3).capitalize()
        return _Entity(name, ENTITY_PROJECT, name)

    def decoy(self, entity: _Entity) -> _Entity:
        """A different entity whose name shares a part with `entity`: a plausible mix-up."""
        if entity.kind == ENTITY_PERSON:
            return self.person(last=entity.name.split()[-1])
        if entity.kind == ENTITY_SERVICE:
            return self.service(stem=entity.name.split("-")[0])
        stem = entity.name[: len(entity.name) // 2 + 1].lower()
        name = stem.capitalize() + self.word(1)
        self.used.add(name.lower())
        return _Entity(name, ENTITY_PROJECT, name)


@cache
def _prose_pool() -> tuple[tuple[str, int], ...]:
    """Passages of 1-3 consecutive sentences of the bundled Python documentation.

    Overlapping windows from every sentence multiply the distinct passages several times
    over, enough for the large corpus without repeating a text. Each entry is
    (text, number of sentences).
    """
    pool: dict[str, tuple[str, int]] = {}
    for topic in sorted(PYDOC_TOPICS):
        for paragraph in PYDOC_TOPICS[topic].split("\n\n"):
            if paragraph.startswith(" ") or any(mark in paragraph for mark in _NOT_PROSE):
                continue
            sentences = _SENTENCE_END.split(" ".join(paragraph.split()))
            for start in range(len(sentences)):
                for count in range(1, FILLER_MAX_SENTENCES + 1):
                    window = sentences[start : start + count]
                    text = " ".join(window)
                    if len(window) == count and len(text) in FILLER_CHARS and text[0].isupper():
                        pool.setdefault(text, (text, count))
    return tuple(pool.values())


def _profile(size: str | int) -> _Profile:
    if isinstance(size, str):
        if size not in PROFILES:
            raise ValueError(
                f"size must be one of {sorted(PROFILES)} or a number of turns, not {size!r}"
            )
        return PROFILES[size]
    if isinstance(size, bool) or size < MIN_TURNS:
        raise ValueError(f"size must be at least {MIN_TURNS} turns, not {size!r}")
    base = PROFILES[SIZE_LARGE if size >= LARGE_FROM_TURNS else SIZE_SMALL]
    scale = size / base.turns
    return replace(
        base,
        turns=size,
        sessions=max(MIN_SESSIONS, round(base.sessions * scale)),
        days=max(MIN_DAYS, round(base.days * scale)),
    )


class _Generator:
    """Builds one generated corpus; all randomness comes from one seeded RNG, in order."""

    def __init__(self, seed: int, profile: _Profile) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.change_probability = 0.0
        self.profile = profile
        self.names = _Names(self.rng)
        self.chunks: list[_Chunk] = []
        self.texts: set[str] = set()
        self.staff: list[_Entity] = []

    # -- helpers --

    def importance(self, bounds: tuple[int, int]) -> int:
        return self.rng.randint(*bounds)

    def value(self, attribute: _Attribute, entity: _Entity, avoid: Iterable[str] = ()) -> str:
        """A value for `attribute` of `entity`, different from each of `avoid`."""
        excluded = set(avoid)
        while True:
            pool = attribute.values
            if pool == _PERSON:
                candidate = self.rng.choice([p.name for p in self.staff if p != entity])
            elif pool == _NUMBER_PORT:
                candidate = str(self.rng.randint(1024, 9999))
            elif pool == _NUMBER_RETRIES:
                candidate = str(self.rng.randint(2, 12))
            elif pool == _MONEY:
                candidate = f"${self.rng.randrange(20, 400, 5)}k"
            elif pool == _DATE:
                candidate = f"{self.rng.choice(_MONTHS)} {self.rng.randint(1, 28)}"
            else:
                candidate = self.rng.choice(pool)
            if candidate not in excluded:
                return candidate

    def render(self, template: str, entity: _Entity, value: str, old: str = "") -> str:
        """A template filled in; a leading name keeps its own case ("orion-cache ships")."""
        other = self.rng.choice([p.first for p in self.staff if p != entity])
        return template.format(
            e=entity.name, first=entity.first, v=value, old=old, other=other,
            month=self.rng.choice(_MONTHS),
        )  # fmt: skip

    def add(self, text: str, kind: str, importance: int, title: str) -> _Chunk | None:
        """Add a chunk unless its text exists already: the daemon would merge the two."""
        if text in self.texts:
            return None
        self.texts.add(text)
        chunk = _Chunk(text, kind, importance, title)
        self.chunks.append(chunk)
        return chunk

    # -- the parts --

    def entities(self, slots: int) -> list[tuple[_Entity, list[_Attribute]]]:
        """Entities in rotating kinds, each with a random subset of its attributes."""
        kinds = (ENTITY_SERVICE, ENTITY_PERSON, ENTITY_PROJECT)
        self.staff = [self.names.person() for _ in range(max(MIN_STAFF, slots // FACTS_PER_STAFF))]
        chosen: list[tuple[_Entity, list[_Attribute]]] = []
        people = iter(self.staff)
        total = 0
        while total < slots:
            kind = kinds[len(chosen) % len(kinds)]
            if kind == ENTITY_PERSON:
                entity = next(people, None) or self.names.person()
            elif kind == ENTITY_SERVICE:
                entity = self.names.service()
            else:
                entity = self.names.project()
            options = _ATTRIBUTES[kind]
            count = self.rng.randint(MIN_ATTRIBUTES_PER_ENTITY, len(options))
            attributes = self.rng.sample(options, min(count, slots - total))
            chosen.append((entity, attributes))
            total += len(attributes)
        return chosen

    def fact(self, entity: _Entity, attribute: _Attribute) -> tuple[_Chunk, _Chunk | None, str]:
        """The fact chunk, its later restatement if it changes, and the template used."""
        template = self.rng.choice(attribute.facts)
        importance = PREFERENCE_IMPORTANCE if attribute.kind == KIND_PREFERENCE else FACT_IMPORTANCE
        value = self.value(attribute, entity)
        while (
            first := self.add(
                self.render(template, entity, value),
                attribute.kind,
                self.importance(importance),
                entity.name,
            )
        ) is None:
            value = self.value(attribute, entity, avoid=[value])
        changed = None
        if attribute.change and self.rng.random() < self.change_probability:
            new = self.value(attribute, entity, avoid=[value])
            changed = self.add(
                self.render(attribute.change, entity, new, old=value),
                attribute.kind,
                self.importance(CHANGE_IMPORTANCE),
                entity.name,
            )
        return first, changed, template

    def distractor(self, entity: _Entity, attribute: _Attribute, template: str) -> None:
        """A near-duplicate: the same words about a look-alike entity, or a look-alike
        attribute of the same entity."""
        subject = entity
        if self.rng.random() < DECOY_SHARE:
            subject = self.names.decoy(entity)
        else:
            template = attribute.twin
        self.add(
            self.render(template, subject, self.value(attribute, subject)),
            attribute.kind,
            self.importance(DISTRACTOR_IMPORTANCE),
            subject.name,
        )

    def chatter(self, entity: _Entity) -> None:
        for template in self.rng.sample(_CHATTER[entity.kind], len(_CHATTER[entity.kind])):
            text = self.render(template, entity, "")
            if self.add(text, KIND_NOTE, self.importance(CHATTER_IMPORTANCE), entity.name):
                return

    def filler(self, count: int) -> None:
        """Greetings and documentation prose: chunks that answer nothing."""
        greetings = [f"{a} {b}" for a in _GREETINGS for b in _GREETINGS if a != b] + list(
            _GREETINGS
        )
        self.rng.shuffle(greetings)
        prose = list(_prose_pool())
        self.rng.shuffle(prose)
        chosen = greetings[: round(count * GREETING_SHARE)]
        for text in chosen:
            self.add(text, KIND_NOTE, self.importance(GREETING_IMPORTANCE), "")
        wanted_prose = count - len(chosen)
        for text, sentences in prose[:wanted_prose]:
            kind = KIND_SUMMARY if sentences > 1 else KIND_NOTE
            self.add(text, kind, self.importance(PROSE_IMPORTANCE), "")
        # Past the pool (only very large corpora get here), pair up short passages: still
        # prose that answers nothing, and each pairing is a new text.
        short = [text for text, _ in prose if len(text) <= FILLER_CHARS.stop // 2]
        missing = wanted_prose - len(prose)
        while missing > 0:
            first, second = self.rng.sample(short, 2)
            if self.add(f"{first} {second}", KIND_SUMMARY, self.importance(PROSE_IMPORTANCE), ""):
                missing -= 1

    # -- the whole --

    def generate(self, name: str) -> Corpus:
        p = self.profile
        per_fact = 1 + CHANGE_RATE + p.distractor_rate + p.chatter_rate
        slots = max(1, round(p.turns * (1 - p.filler_share) / per_fact))
        plan = self.entities(slots)
        # Only some attributes can change: scale so that CHANGE_RATE of all facts do.
        changeable = sum(1 for _, attrs in plan for a in attrs if a.change)
        self.change_probability = min(1.0, CHANGE_RATE * slots / max(1, changeable))

        asked: list[tuple[_Entity, _Attribute, _Chunk, _Chunk | None]] = []
        for entity, attributes in plan:
            for attribute in attributes:
                first, changed, template = self.fact(entity, attribute)
                asked.append((entity, attribute, first, changed))
                if self.rng.random() < p.distractor_rate:
                    self.distractor(entity, attribute, template)
                if self.rng.random() < p.chatter_rate:
                    self.chatter(entity)
        topical = len(self.chunks)
        self.filler(round(topical * p.filler_share / (1 - p.filler_share)))

        session_days = self.session_days()
        self.place(asked, session_days)
        turns = self.number(session_days)
        questions = self.questions(asked, session_days)
        supersedes = tuple(
            (first.chunk_id, changed.chunk_id) for _, _, first, changed in asked if changed
        )
        return Corpus(
            name=name,
            turns=turns,
            questions=split_questions(questions, DEFAULT_TEST_FRACTION, self.seed),
            supersedes=supersedes,
            counts=(("filler", len(self.chunks) - topical),),
        )

    def session_days(self) -> list[int]:
        """Sorted session days spanning the whole period: the first on day 0 and the last on
        the last day, so a fact stated early always has later days to change on."""
        p = self.profile
        if p.sessions <= p.days:
            days = sorted(self.rng.sample(range(p.days), p.sessions))
        else:
            days = sorted(self.rng.randrange(p.days) for _ in range(p.sessions))
        days[0], days[-1] = 0, p.days - 1
        return days

    def place(
        self,
        asked: Sequence[tuple[_Entity, _Attribute, _Chunk, _Chunk | None]],
        days: Sequence[int],
    ) -> None:
        """Sessions for every chunk; a restated fact lands on a later day than the original."""
        early = [
            i for i in range(max(1, round(len(days) * CHANGE_EARLY_SHARE))) if days[i] < days[-1]
        ]
        for chunk in self.chunks:
            chunk.session = self.rng.randrange(len(days))
        for _, _, first, changed in asked:
            if changed is not None:
                first.session = self.rng.choice(early)
                later = [i for i in range(len(days)) if days[i] > days[first.session]]
                changed.session = self.rng.choice(later)
        # Every session gets at least one chunk, so a session in the corpus is a real one.
        filler = [c for c in self.chunks if not c.title]
        for session, chunk in zip(
            range(len(days)), self.rng.sample(filler, len(filler)), strict=False
        ):
            chunk.session = session

    def number(self, days: Sequence[int]) -> tuple[Turn, ...]:
        by_session: dict[int, list[_Chunk]] = defaultdict(list)
        for chunk in self.chunks:
            by_session[chunk.session].append(chunk)
        turns: list[Turn] = []
        for session in range(len(days)):
            chunks = by_session[session]
            self.rng.shuffle(chunks)
            for position, chunk in enumerate(chunks):
                chunk.chunk_id = f"g/s{session}:{position}"
                turns.append(
                    Turn(
                        chunk_id=chunk.chunk_id,
                        text=chunk.text,
                        session=f"g/s{session}",
                        day=days[session],
                        kind=chunk.kind,
                        importance=chunk.importance,
                        title=chunk.title,
                    )
                )
        return tuple(turns)

    def questions(
        self,
        asked: Sequence[tuple[_Entity, _Attribute, _Chunk, _Chunk | None]],
        days: Sequence[int],
    ) -> list[Question]:
        """One question per (entity, attribute), worded three ways."""
        drafts: list[tuple[int, str, tuple[str, ...], tuple[str, ...], str]] = []
        for entity, attribute, first, changed in asked:
            answer = changed or first
            wordings = [
                self.render(template, entity, "")
                for template in self.rng.sample(attribute.questions, 1 + PARAPHRASES_PER_QUESTION)
            ]
            if changed is not None:
                category = CATEGORY_CHANGED
            elif attribute.kind == KIND_PREFERENCE:
                category = CATEGORY_PREFERENCE
            else:
                category = CATEGORY_FACT
            day = min(
                days[answer.session] + 1 + self.rng.randint(0, QUESTION_DELAY_DAYS),
                self.profile.days,
            )
            drafts.append((day, wordings[0], tuple(wordings[1:]), (answer.chunk_id,), category))
        drafts.sort(key=lambda draft: draft[0])
        return [
            Question(
                qid=f"g/q{number}",
                text=text,
                evidence=evidence,
                group=GENERATED_GROUP,
                day=day,
                split=SPLIT_TRAIN,
                paraphrases=paraphrases,
                category=category,
            )
            for number, (day, text, paraphrases, evidence, category) in enumerate(drafts)
        ]


def generated_corpus(*, seed: int = DEFAULT_SEED, size: str | int = SIZE_SMALL) -> Corpus:
    """An invented team's memory: services, people and projects, their facts, and noise.

    Same seed and size, same corpus, byte for byte. "small" is sized for CI (a few hundred
    turns), "large" for the report (a few thousand); a number asks for about that many turns.
    """
    profile = _profile(size)
    return _Generator(seed, profile).generate(f"generated-{size}-seed{seed}")


# ---- one entry point ------------------------------------------------------------------------


def load_corpus(
    path: Path | None,
    fmt: str,
    *,
    seed: int = DEFAULT_SEED,
    size: str | int = SIZE_SMALL,
    test_fraction: float = DEFAULT_TEST_FRACTION,
) -> Corpus:
    """The corpus a benchmark run asked for by format name (`size` is for "generated" only)."""
    if fmt == FORMAT_GENERATED:
        return generated_corpus(seed=seed, size=size)
    if fmt not in FORMATS:
        raise CorpusError(f"unknown corpus format {fmt!r}; expected one of {', '.join(FORMATS)}")
    if path is None:
        raise CorpusError(f"the {fmt} format needs a corpus file")
    loader = load_locomo if fmt == FORMAT_LOCOMO else load_longmemeval
    return loader(path, seed=seed, test_fraction=test_fraction)
