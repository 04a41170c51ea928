"""Confidence and stability per memory: the pure rules against hand-computed values, the
migration's defaults against the code's, and the API end to end (a real daemon): save
with confidence, saving again and reinforcing raise it, penalizing lowers it, recall
filters on it, explain lists every change.
"""

from __future__ import annotations

import json
import math
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest

from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import BadRequest
from dreamcycle.daemon.config import DownscaleConfig
from dreamcycle.daemon.memory.confidence import HalfLives
from dreamcycle.pulses.confidence import (
    CONFIDENCE_BY_TYPE,
    CONFIDENCE_CAP_BY_KIND,
    STABILITY_BY_KIND,
    InvalidConfidence,
    default_confidence,
    default_stability,
    doubted,
    stable_half_life,
    verified,
)
from dreamcycle.pulses.decay import downscale
from dreamcycle.pulses.ranking import (
    Candidate,
    InvalidRanking,
    RankingWeights,
    confidence_multiplier,
    rank_candidates,
)
from dreamcycle.pulses.sweep import SweepCandidate, SweepMix, plan_sweep
from dreamcycle.store.database import CHUNK_KINDS, InvalidObservation, NewObservation
from tests.api_helpers import ApiDaemon, running_api
from tests.daemon_helpers import Peer, write_jsonl

MIGRATION = Path(__file__).parent.parent / "migrations" / "0008_confidence_stability.sql"


# ---- decay with stability ------------------------------------------------------------------


def test_a_stable_memory_keeps_its_salience_longer_by_hand_computed_half_lives() -> None:
    # gain 4, kind's usual stability 0.5: (1 + 4 s) / 3 times the kind's half-life.
    assert stable_half_life(100.0, 1.0, 0.5, 4.0) == pytest.approx(500.0 / 3.0)
    assert stable_half_life(100.0, 0.0, 0.5, 4.0) == pytest.approx(100.0 / 3.0)
    # The kind's usual stability, or no gain, keeps the kind's half-life exactly.
    assert stable_half_life(100.0, 0.5, 0.5, 4.0) == 100.0
    assert stable_half_life(100.0, 0.9, 0.5, 0.0) == 100.0
    # 100 s at half-life 500/3 s: 0.8 * 0.5 ** 0.6 = 0.8 * 0.659754 = 0.527803.
    stable = downscale(0.8, 0.0, 100.0, stable_half_life(100.0, 1.0, 0.5, 4.0))
    assert stable == pytest.approx(0.527803, abs=1e-6)
    # ... and at half-life 100/3 s: 0.8 * 0.5 ** 3 = 0.1.
    assert downscale(0.8, 0.0, 100.0, stable_half_life(100.0, 0.0, 0.5, 4.0)) == pytest.approx(0.1)
    with pytest.raises(InvalidConfidence, match=r"stability 1\.5"):
        stable_half_life(100.0, 1.5, 0.5, 4.0)
    with pytest.raises(InvalidConfidence, match="gain"):
        stable_half_life(100.0, 0.5, 0.5, -1.0)


def test_downscale_half_lives_come_from_the_journal_and_default_stability_changes_nothing() -> None:
    config = DownscaleConfig()
    half_lives = HalfLives.from_config(config)
    for kind in CHUNK_KINDS:
        assert half_lives.of(kind, default_stability(kind)) == config.half_life(kind)
    fact = config.half_life("fact")
    expected = fact * (1 + 4.0 * 0.1) / (1 + 4.0 * STABILITY_BY_KIND["fact"])
    assert half_lives.of("fact", 0.1) == pytest.approx(expected)
    # A step journaled before stability existed decays every chunk at its kind's half-life.
    old = HalfLives.from_journal({"now_ms": 0, "half_life_s": {"fact": 50.0}}, config)
    assert old.of("fact", 0.0) == old.of("fact", 1.0) == 50.0
    replayed = HalfLives.from_journal({"now_ms": 0, **half_lives.journal()}, DownscaleConfig())
    assert replayed == half_lives


def test_the_sweep_takes_the_less_stable_of_a_kind_first() -> None:
    """Same kind, same salience at admission: after a month the unstable ones are lower,
    so the sweep's percentile within the kind takes them and spares the stable ones."""
    half_lives = HalfLives.from_config(DownscaleConfig())
    month_s = 30 * 86_400.0
    stability = {label: 0.9 if label % 2 else 0.1 for label in range(40)}
    candidates = [
        SweepCandidate(
            label=label,
            salience=downscale(0.5, 0.0, month_s, half_lives.of("note", stability[label])),
            pinned=False,
            protected=False,
            kind="note",
        )
        for label in range(40)
    ]
    plan = plan_sweep(candidates, percentile=50.0, min_population=10, mix=SweepMix(1.0, 0.0, 0.0))
    assert plan.doomed == tuple(label for label in range(40) if stability[label] == 0.1)


# ---- confidence steps ------------------------------------------------------------------------


def test_confidence_steps_are_bounded_and_hand_computed() -> None:
    assert verified(0.5, 0.2) == pytest.approx(0.6)
    assert verified(0.9, 0.2) == pytest.approx(0.92)
    assert doubted(0.5, 0.2) == pytest.approx(0.4)
    high = low = 0.5
    for _ in range(200):
        high, low = verified(high), doubted(low)
        assert 0.0 < low < 0.5 < high <= 1.0
    assert verified(1.0) == 1.0 and doubted(0.0) == 0.0
    for bad in (1.5, -0.1, math.nan):
        with pytest.raises(InvalidConfidence, match="confidence"):
            verified(bad)
    with pytest.raises(InvalidConfidence, match="verify step"):
        verified(0.5, 2.0)


def test_defaults_rank_a_statement_above_an_inference() -> None:
    assert default_confidence("manual", "fact") == 0.9
    assert default_confidence("manual", "insight") == CONFIDENCE_CAP_BY_KIND["insight"] == 0.6
    assert default_confidence("pattern", "note") == 0.6
    assert default_confidence("tool_use", "note") == 0.7
    assert (
        default_stability("fact") > default_stability("preference") > default_stability("summary")
    )
    item = NewObservation(content="x", type="decision", kind="fact")
    assert (item.resolved_confidence(), item.resolved_stability()) == (0.8, 0.9)
    for field in ("confidence", "stability"):
        with pytest.raises(InvalidObservation, match=rf"{field} 1\.2 is outside"):
            NewObservation(content="x", **{field: 1.2}).validate()  # type: ignore[arg-type]


def test_the_migration_gives_stored_memories_the_defaults_of_new_ones() -> None:
    conn = apsw.Connection(":memory:")
    conn.execute(
        "CREATE TABLE observations (id INTEGER PRIMARY KEY, type TEXT, kind TEXT, "
        "confidence REAL NOT NULL DEFAULT 1.0);"
        "CREATE TABLE journal (seq INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, "
        "ref TEXT NOT NULL, body TEXT NOT NULL, at_ms INTEGER NOT NULL);"
        "INSERT INTO journal VALUES (40, 'chunk', 'a', '{}', 0), (41, 'pulse', 'b', '{}', 0);"
        "DELETE FROM journal WHERE seq = 41"
    )
    rows = [(t, k) for t in (*CONFIDENCE_BY_TYPE, "tool_use") for k in (*CHUNK_KINDS, "other")]
    conn.executemany("INSERT INTO observations (type, kind) VALUES (?, ?)", rows)
    conn.execute(MIGRATION.read_text(encoding="utf-8"))
    # The journal keeps its steps and never reuses the number of one pruned.
    conn.execute("INSERT INTO journal (kind, ref, body, at_ms) VALUES ('confidence', 'a', '{}', 1)")
    assert conn.execute("SELECT seq, kind FROM journal ORDER BY seq").fetchall() == [
        (40, "chunk"),
        (42, "confidence"),
    ]
    for obs_type, kind, confidence, stability in conn.execute(
        "SELECT type, kind, confidence, stability FROM observations"
    ):
        assert (confidence, stability) == (
            default_confidence(obs_type, kind),
            default_stability(kind),
        ), (obs_type, kind)


# ---- the bounded multiplier --------------------------------------------------------------------


def _by_vector_rank(confidences: list[float], bound: float) -> list[int]:
    """Labels in rank order; relevance is 1 / vector rank (label 0 the most relevant)."""
    weights = RankingWeights(
        rrf_k=0.0, lexical_weight=0.0, learned_weight=0.0, confidence_bound=bound
    )
    candidates = [
        Candidate(label=i, cosine=1.0 - i / 10, salience=0.5, confidence=c)
        for i, c in enumerate(confidences)
    ]
    return [r.label for r in rank_candidates(candidates, weights)]


def test_confidence_multiplies_relevance_within_its_bound() -> None:
    assert confidence_multiplier(0.0, 0.2) == pytest.approx(0.8)
    assert confidence_multiplier(0.5, 0.2) == 1.0
    assert confidence_multiplier(1.0, 0.2) == pytest.approx(1.2)
    # Relevance 1 at confidence 0 against 0.5 at confidence 1: bound 0.5 (ratio 1/3)
    # gives 0.5 against 0.75, bound 0.2 (ratio 2/3) 0.8 against 0.6.
    assert _by_vector_rank([0.0, 1.0], 0.5) == [1, 0]
    assert _by_vector_rank([0.0, 1.0], 0.2) == [0, 1]
    assert _by_vector_rank([0.0, 1.0], 0.0) == [0, 1]
    assert RankingWeights(confidence_bound=0.2).overtake_ratio == pytest.approx(0.8 / 1.2)
    with pytest.raises(InvalidRanking, match="confidence_bound"):
        RankingWeights(confidence_bound=1.0).validate()


def test_a_chunk_outranks_another_only_with_the_guaranteed_share_of_its_relevance() -> None:
    rng = random.Random(11)
    for _ in range(200):
        weights = RankingWeights(
            salience_bound=rng.uniform(0.0, 0.5), confidence_bound=rng.uniform(0.0, 0.5)
        )
        candidates = [
            Candidate(
                label=i,
                cosine=rng.uniform(-1.0, 1.0),
                salience=rng.random(),
                confidence=rng.random(),
                lexical_rank=rng.choice([None, rng.randint(1, 20)]),
            )
            for i in range(12)
        ]
        ranked = rank_candidates(candidates, weights)
        for place, above in enumerate(ranked):
            for below in ranked[place + 1 :]:
                assert above.relevance >= weights.overtake_ratio * below.relevance - 1e-12


# ---- through the API --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("confidence")
    with running_api(Peer(root / "data", "confident_peer", root / "zeitgeist")) as api:
        yield api


def test_confidence_is_saved_verified_doubted_filtered_and_explained(served: ApiDaemon) -> None:
    project = f"p-{uuid.uuid4().hex[:8]}"
    with MemoryClient(served.socket_path) as memory:
        sure = memory.save(
            "The company was founded on 3 March 2011 in Lisbon.",
            project=project,
            kind="fact",
            confidence=0.5,
            stability=1.0,
        )
        guess = memory.save(
            "The company seems to prefer Lisbon for its offsites.",
            project=project,
            type="pattern",
            kind="insight",
        )
        assert sure.created and sure.confidence == 0.5
        assert guess.confidence == 0.6  # an inferred pattern, by default
        stored = memory.memory(sure.content_hash)
        assert (stored.confidence, stored.stability) == (0.5, 1.0)

        again = memory.save("The company was founded on 3 March 2011 in Lisbon.", project=project)
        assert not again.created and again.confidence == pytest.approx(0.6)
        up = memory.reinforce(sure.content_hash, "the founding deed says so")
        assert up.confidence == pytest.approx(0.68)
        # The same request again queues nothing and verifies nothing.
        assert memory.reinforce(sure.content_hash, "the founding deed says so").confidence == (
            pytest.approx(0.68)
        )
        down = memory.penalize(guess.content_hash, "only one offsite was there")
        assert down.confidence == pytest.approx(0.48)

        query = "where and when was the company founded, and where are offsites"
        every = memory.recall(query, filters={"project": project}, record=False, explain=True)
        found = {hit.content_hash: hit for hit in every.hits}
        assert found.keys() == {sure.content_hash, guess.content_hash}
        assert found[sure.content_hash].confidence == pytest.approx(0.68)
        assert found[sure.content_hash].stability == 1.0
        factors = found[guess.content_hash].factors
        assert factors is not None and factors.confidence == pytest.approx(0.48)
        certain = memory.recall(
            query, filters={"project": project}, record=False, min_confidence=0.5
        )
        assert [hit.content_hash for hit in certain.hits] == [sure.content_hash]
        with pytest.raises(BadRequest, match="min_confidence"):
            memory.recall(query, min_confidence=1.5)
        with pytest.raises(BadRequest, match="confidence"):
            memory.save("A memory more than certain.", confidence=2.0)

        history = [s for s in memory.explain(sure.content_hash).history if s.step == "confidence"]
        # Newest first: the reinforce, then the save of the same content.
        assert [s.reason for s in history] == ["the founding deed says so", None]
        assert [s.confidence for s in history] == pytest.approx([0.68, 0.6])
        assert "reinforced" in history[0].cause and "saved again" in history[1].cause
        [lowered] = [
            s for s in memory.explain(guess.content_hash).history if s.step == "confidence"
        ]
        assert lowered.cause.startswith("confidence lowered from 0.600")
    assert (
        served.peer.scalar(
            "SELECT count(*) FROM journal WHERE kind = 'confidence' AND ref = ?",
            (sure.content_hash,),
        )
        == 2
    )


# ---- through the CLI, the database opened directly ------------------------------------------


def test_ingest_takes_confidence_and_recall_filters_on_it(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "cli_peer", tmp_path / "zeitgeist")
    notes = write_jsonl(
        tmp_path / "notes.jsonl",
        [
            {"content": "The backup runs nightly at 02:00 UTC.", "confidence": 0.95},
            {"content": "The backup probably also runs at noon.", "type": "pattern"},
            {"content": "Backups are kept for thirty days.", "kind": "fact", "stability": 1.0},
        ],
    )
    peer.dreamcycle("ingest", str(notes))
    peer.dreamcycle("ingest", str(notes))  # every line again: each verified once
    stored = dict(peer.query("SELECT content, confidence FROM observations"))
    assert stored == pytest.approx(
        {
            "The backup runs nightly at 02:00 UTC.": 0.96,
            "The backup probably also runs at noon.": 0.68,
            "Backups are kept for thirty days.": 0.92,
        }
    )
    assert peer.scalar("SELECT stability FROM observations WHERE kind = 'fact'") == 1.0
    assert peer.scalar("SELECT count(*) FROM journal WHERE kind = 'confidence'") == 3
    peer.dreamcycle("run", "--once")
    query = "when does the backup run"
    found = json.loads(peer.dreamcycle("recall", query, "--json", "--min-confidence", "0.9").stdout)
    assert {hit["content"] for hit in found["hits"]} == {
        "The backup runs nightly at 02:00 UTC.",
        "Backups are kept for thirty days.",
    }
    assert all(hit["confidence"] >= 0.9 for hit in found["hits"])
    refused = peer.dreamcycle("recall", query, "--min-confidence", "2", expect=2)
    assert "argument --min-confidence: must be >= 0, <= 1" in refused.stderr
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"content": "x", "confidence": 1.5}])
    assert (
        "confidence 1.5 is outside [0, 1]" in peer.dreamcycle("ingest", str(bad), expect=2).stderr
    )


def test_stable_notes_decay_slower_and_rebuild_replays_them_bit_for_bit(tmp_path: Path) -> None:
    peer = Peer(tmp_path / "data", "stable_peer", tmp_path / "zeitgeist")
    stability = {f"Note {n}: the build cache lives in /var/cache/b{n}.": n / 5 for n in range(6)}
    peer.dreamcycle(
        "ingest",
        str(write_jsonl(tmp_path / "notes.jsonl", [
            {"content": text, "stability": value} for text, value in stability.items()
        ])),
    )  # fmt: skip
    # Decay at every cycle, however little time passed since the last.
    fast = {"DREAMCYCLE_DOWNSCALE_NOTE_HALF_LIFE_S": "2", "DREAMCYCLE_DOWNSCALE_MIN_STEP_S": "0"}
    peer.dreamcycle("run", "--once", settings=fast)
    # Another gain than the first cycle's: replay must use the one each downscale used.
    peer.dreamcycle("run", "--once", settings={**fast, "DREAMCYCLE_DOWNSCALE_STABILITY_GAIN": "9"})
    before = peer.salience()
    salience = dict(peer.query("SELECT content, salience FROM observations"))
    # Listed from the least stable to the most: the more stable, the more salience is left.
    left = [salience[text] for text in stability]
    assert left == sorted(left) and left[0] < left[-1], left
    result = peer.dreamcycle("rebuild")
    assert "0 salience values corrected" in result.stdout, result.stdout
    assert peer.salience() == before
