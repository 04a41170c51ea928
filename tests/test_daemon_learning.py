"""The learning loop in-process, on real text and simulated days: credit, keys, the cold tier.

Each test opens the real daemon pieces (database, embedding model, index, salience
cache, directory zeitgeist) on a ManualClock, recalls with the real hybrid recall,
queues outcomes as `pulse-emit outcome` does, and runs whole dream cycles.

One file: the tests share one way of opening a peer on real text and a simulated clock, and
each follows the learning loop through whole cycles.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from pydoc_data.topics import topics
from typing import Any, Final

import apsw
import numpy as np
import pytest

from dreamcycle import migrations
from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.emit_outcomes import emit_outcome
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.memory.forgetting import move_to_cold, revive
from dreamcycle.daemon.memory.learning import teach_key
from dreamcycle.daemon.memory.rebuild import RebuildError, rebuild, replay_steps
from dreamcycle.daemon.recall.learned_ranking import (
    FUSION_META_KEY,
    fusion_weights,
    split_evidence,
)
from dreamcycle.daemon.recall.retrieve import Hit, recall
from dreamcycle.daemon.runtime import Peer, Runtime
from dreamcycle.pulses.constants import OUTCOME_DECAY_PER_HOP
from dreamcycle.pulses.credit import MISS_FACTOR
from dreamcycle.pulses.evidence import MIN_EVIDENCE
from dreamcycle.pulses.fusion import SHARES, SplitEvidence, observe
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.pulses.sweep import SweepPlan
from dreamcycle.store import checkpoints, tiers
from dreamcycle.store import retrieval_keys as key_store
from dreamcycle.store.database import Database, NewObservation, initial_salience
from dreamcycle.store.lexical import search_lexical
from dreamcycle.store.migrations import apply_migrations
from dreamcycle.store.timefmt import iso_from_ms

#: 2023-11-14T22:13:20Z: simulated time, far from today.
START_MS: Final = 1_700_000_000_000
DAY_MS: Final = 86_400_000
#: One paragraph of each of these reference topics: related enough that a query finds
#: several, distinct enough that a pulse at one barely reaches another.
TOPICS: Final = (
    "assert", "class", "continue", "del", "exceptions", "for", "formatstrings",
    "function", "global", "if", "import", "lambda", "raise", "return", "strings",
    "truth", "try", "while", "with", "yield", "booleans", "numbers",
)  # fmt: skip
MIN_PARAGRAPH_CHARS: Final = 200
QUERY: Final = "how do I signal an error by raising an exception"
#: A chunk that no pulse was seeded at moves at most this much (kernel spill-over)...
UNTOUCHED_TOLERANCE: Final = 0.01
#: ...when the seed's cosine similarity to every other chunk is below this:
#: decay_per_hop * exp(-(1 - 0.6)^2 / (2 * 0.15^2)) < 0.009.
ISOLATED_SIMILARITY: Final = 0.6
#: Settings of every test: salience moves only by the pulses under test, sweeps on demand.
QUIET: Final = {"downscale.enabled": False, "sweep.enabled": False, "efficacy.enabled": False}


def corpus() -> list[str]:
    """The first long paragraph of each topic, whitespace normalised."""
    chunks: list[str] = []
    for name in TOPICS:
        for paragraph in topics[name].split("\n\n"):
            text = " ".join(paragraph.split())
            if len(text) >= MIN_PARAGRAPH_CHARS:
                chunks.append(text)
                break
    assert len(chunks) == len(TOPICS)
    return chunks


def open_runtime(tmp_path: Path, clock: ManualClock, **settings: Any) -> Runtime:
    overrides = {
        "peer.id": "a",
        "peer.data_dir": str(tmp_path / "a"),
        "zeitgeist.dir": str(tmp_path / "zeitgeist"),
        "metrics.listen": "",
        # A cycle stands for a simulated day here (the bound: tests/test_clock_jumps.py).
        "clock.max_step_s": DAY_MS / 1000,
        **QUIET,
        **settings,
    }
    return Runtime.open(load_config(environ={}, overrides=overrides), clock=clock)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


def open_peer(tmp_path: Path, clock: ManualClock, **settings: Any) -> Iterator[Peer]:
    rt = open_runtime(tmp_path, clock, **settings)
    try:
        ingest(rt, [[NewObservation(content=text) for text in corpus()]])
        peer = rt.open_peer()
        try:
            run_cycle_blocking(peer)  # admits and indexes the chunks
            yield peer
        finally:
            peer.close()
    finally:
        rt.close()


@pytest.fixture
def peer(tmp_path: Path, clock: ManualClock) -> Iterator[Peer]:
    yield from open_peer(tmp_path, clock)


def sweep_every_cycle(peer: Peer) -> None:
    """From now on every cycle sweeps, every chunk however young and however few, and
    downscale runs as in production."""
    peer.config.sweep.enabled = True
    peer.config.sweep.min_population = 0
    peer.config.sweep.grace_s = 0.0
    peer.config.sweep.interval_s = 0.0
    peer.config.downscale.enabled = True


def saliences(peer: Peer) -> dict[str, float]:
    """Content hash -> stored salience of every chunk of the corpus."""
    return {
        str(h): float(s)
        for h, s in peer.db.conn.execute(
            "SELECT content_hash, salience FROM observations WHERE type != 'efficacy'"
        )
    }


def isolated(peer: Peer, candidates: list[str]) -> tuple[str, float]:
    """The candidate least similar to its nearest other chunk, and that similarity."""
    vectors = {h: v for h in saliences(peer) if (v := peer.db.embedding_of_hash(h)) is not None}

    def nearest(digest: str) -> float:
        return max(float(np.dot(vectors[digest], v)) for h, v in vectors.items() if h != digest)

    best = min(candidates, key=nearest)
    return best, nearest(best)


def rowid_of(peer: Peer, digest: str) -> int:
    obs = peer.db.observation_by_hash(digest)
    assert obs is not None
    return obs.rowid


def ask(peer: Peer, query: str = QUERY, **kwargs: Any) -> tuple[str, list[Hit]]:
    """A recorded recall against the peer's live index: (decision hash, hits)."""
    result = recall(peer.runtime, query, index=peer.index, **kwargs)
    assert result.decision_hash is not None and result.hits
    return result.decision_hash, result.hits


def credit(peer: Peer, reward: float, query: str = QUERY, *, cite: int) -> tuple[str, str]:
    """Recall, cite the hit at position `cite`, report `reward`, run a cycle.

    Returns the cited chunk's hash and the decision hash.
    """
    decision, hits = ask(peer, query)
    cited = hits[cite].content_hash
    emit_outcome(
        peer.runtime, decision=decision, reward=reward, reason="tests/learning", cited=[cited]
    )
    run_cycle_blocking(peer)
    return cited, decision


def cold_hashes(peer: Peer) -> set[str]:
    return {
        str(h)
        for (h,) in peer.db.conn.execute(
            "SELECT content_hash FROM observations WHERE cold_at IS NOT NULL AND deleted_at IS NULL"
        )
    }


def tombstone_rows(peer: Peer) -> list[tuple[Any, ...]]:
    return [tuple(r) for r in peer.db.conn.execute("SELECT * FROM tombstones ORDER BY hash")]


# ---- credit goes to the cited chunk ---------------------------------------------------------


def test_a_cited_success_raises_only_that_chunk_and_teaches_it_the_query(peer: Peer) -> None:
    before = saliences(peer)
    assert set(before.values()) == {initial_salience(5)}
    decision, hits = ask(peer)
    assert len(hits) >= 3
    # Cite a chunk that is not first (after learning the query as a key it must be), and
    # one far from every other chunk, so that what its pulse spills over stays negligible.
    cited, similarity = isolated(peer, [h.content_hash for h in hits[1:]])
    assert similarity < ISOLATED_SIMILARITY
    emit_outcome(
        peer.runtime, decision=decision, reward=1.0, reason="tests/learning", cited=[cited]
    )
    stats = run_cycle_blocking(peer).stats["salience_pulse_propagate"]

    assert stats["from_outcomes"] == 1  # one pulse, seeded at the cited chunk only
    assert peer.db.conn.execute("SELECT status, pulses FROM outcomes").fetchall() == [
        ("converted", 1)
    ]
    after = saliences(peer)
    # The seed gets strength x decay_per_hop at distance 0 (no cap in the way).
    assert after[cited] == pytest.approx(before[cited] + OUTCOME_DECAY_PER_HOP, abs=1e-4)
    for digest, value in after.items():
        if digest != cited:
            assert abs(value - before[digest]) < UNTOUCHED_TOLERANCE, digest

    keys = key_store.keys_of(peer.db, rowid_of(peer, cited))
    assert len(keys) == 1
    assert keys[0].weight == pytest.approx(1.0)
    assert keys[0].text == QUERY
    query = peer.embedder.embed_one(QUERY)
    assert float(np.dot(keys[0].embedding, query)) == pytest.approx(1.0, abs=1e-5)
    assert key_store.key_count(peer.db) == 1  # the uncited chunks learned nothing

    _, again = ask(peer)
    assert again[0].content_hash == cited
    assert {h.content_hash for h in again} == {h.content_hash for h in hits}


def test_a_key_of_another_model_is_neither_taught_nor_kept(peer: Peer, clock: ManualClock) -> None:
    """After a change of model: an attribution's query embedded by the old model teaches
    nothing, and a chunk's keys of the old width give way when it learns a new one."""
    _, hits = ask(peer)
    chunk = hits[0].content_hash
    rowid = rowid_of(peer, chunk)
    old_width = np.full(8, 8**-0.5, dtype=np.float32)
    with peer.db.transaction():
        key_store.replace_keys(
            peer.db, rowid, [key_store.StoredKey(rowid, old_width, "old", 1.0, START_MS)]
        )
        assert not teach_key(peer, chunk, old_width, "old again", 1.0, clock.now_ms())
        query = peer.embedder.embed_one(QUERY)
        assert teach_key(peer, chunk, query, QUERY, 1.0, clock.now_ms())
    [key] = key_store.keys_of(peer.db, rowid)
    assert key.text == QUERY and key.embedding.shape == query.shape
    # Recall reads the key, as before any old one was stored.
    _, again = ask(peer)
    assert again[0].key_similarity == pytest.approx(1.0, abs=1e-5)


def test_a_cited_miss_lowers_the_chunk_by_at_most_half_what_a_hit_raises(peer: Peer) -> None:
    start = saliences(peer)
    cited, _ = credit(peer, 1.0, cite=1)
    raised = saliences(peer)
    rise = raised[cited] - start[cited]
    assert rise > 0

    # The same chunk, cited again by a decision that went wrong.
    decision, hits = ask(peer)
    assert cited in {h.content_hash for h in hits}
    emit_outcome(peer.runtime, decision=decision, reward=-1.0, reason="tests/miss", cited=[cited])
    run_cycle_blocking(peer)
    lowered = saliences(peer)
    fall = raised[cited] - lowered[cited]
    assert fall > 0
    assert fall <= MISS_FACTOR * rise + 1e-9
    assert fall == pytest.approx(MISS_FACTOR * rise, abs=1e-4)
    # The miss weakened the key it had learned, by the same miss factor.
    [key] = key_store.keys_of(peer.db, rowid_of(peer, cited))
    assert key.weight == pytest.approx(1.0 - MISS_FACTOR)


def retriever_lists(peer: Peer, query: str = QUERY) -> tuple[list[int], list[int]]:
    """The vector list and the word list recall has for `query`, best first."""
    pool = peer.config.recall.candidates
    labels, _ = peer.index.knn_many(peer.embedder.embed_one(query)[None, :], pool)
    return [int(x) for x in labels[0]], search_lexical(peer.db, query, pool)


def test_cited_successes_teach_recall_how_far_to_trust_vectors(peer: Peer) -> None:
    configured = (peer.config.recall.vector_weight, peer.config.recall.lexical_weight)
    assert fusion_weights(peer.db, peer.config) == configured
    vectors, words = retriever_lists(peer)
    cited, _ = credit(peer, 1.0, cite=1)

    learned = split_evidence(peer.db, peer.config)
    expected = observe(
        SplitEvidence(learned.configured),
        [rowid_of(peer, cited)],
        vectors,
        words,
        rrf_k=peer.config.recall.rrf_k,
    )
    assert learned.evidence == 1
    assert learned == expected
    # One success is not enough to move the split.
    assert fusion_weights(peer.db, peer.config) == configured
    # A miss teaches nothing about which list finds answers.
    decision, _ = ask(peer)
    emit_outcome(peer.runtime, decision=decision, reward=-1.0, reason="tests/miss", cited=[cited])
    run_cycle_blocking(peer)
    assert split_evidence(peer.db, peer.config) == learned


def test_a_cited_cold_chunk_teaches_the_split_as_recall_found_it(peer: Peer) -> None:
    # Recall searches the cold tier too, so a swept chunk can be the one an agent cites;
    # judged on the live tier alone it would teach nothing (neither list would hold it).
    decision, hits = ask(peer)
    cited = hits[0].content_hash
    move_to_cold(
        peer,
        SweepPlan(
            threshold=0.0, population=1, doomed=(rowid_of(peer, cited),), skipped_reason=None
        ),
        peer.now_ms(),
    )
    assert cited in cold_hashes(peer)
    emit_outcome(peer.runtime, decision=decision, reward=1.0, reason="tests/cold", cited=[cited])
    run_cycle_blocking(peer)
    assert split_evidence(peer.db, peer.config).evidence == 1


def embed_as_another_model(peer: Peer, rowid: int) -> None:
    with peer.db.transaction():
        peer.db.set_embeddings(
            [rowid], np.full((1, 8), 8**-0.5, dtype=np.float32), model_id="old",
            index_version="old/8",
        )  # fmt: skip


def test_a_cold_chunk_of_another_model_is_revived_outside_the_index(peer: Peer) -> None:
    """After a change of model, a swept chunk the old model embedded comes back to the
    live tier without its vector entering this model's index (its width would fail it)."""
    _, hits = ask(peer)
    ours, theirs = (rowid_of(peer, h.content_hash) for h in hits[:2])
    move_to_cold(
        peer,
        SweepPlan(threshold=0.0, population=2, doomed=tuple(sorted((ours, theirs))),
                  skipped_reason=None),
        peer.now_ms(),
    )  # fmt: skip
    embed_as_another_model(peer, theirs)
    assert not peer.index.is_live(ours) and not peer.index.is_live(theirs)
    assert sorted(revive(peer, [ours, theirs], peer.now_ms())) == sorted([ours, theirs])
    assert peer.index.is_live(ours) and not peer.index.is_live(theirs)
    assert not cold_hashes(peer)


def test_a_chunk_of_another_model_seeds_no_pulse(peer: Peer) -> None:
    """After a change of model, a chunk the old model embedded has no vector to seed a
    pulse at in this model's space: an outcome citing it sends no pulse from it, and a
    pulse asked to start there is refused, naming the model."""
    decision, hits = ask(peer)
    cited = hits[0].content_hash
    embed_as_another_model(peer, rowid_of(peer, cited))
    emit_outcome(peer.runtime, decision=decision, reward=1.0, reason="tests/old", cited=[cited])
    stats = run_cycle_blocking(peer).stats["salience_pulse_propagate"]
    assert stats["from_outcomes"] == 0
    request = PulseRequest(
        text="", kind=PulseKind.REWARD, strength=1.0, sigma=0.5, k=4, max_hops=2,
        decay_per_hop=0.2, ttl_s=60.0, reason="tests/old", seed_chunk=cited,
    )  # fmt: skip
    version = re.escape(peer.embedder.index_version)
    with pytest.raises(ValueError, match=f"no stored embedding of {version}"):
        emit_pulse(peer.runtime, request)


def test_rebuild_refuses_a_journal_written_under_another_model(peer: Peer) -> None:
    """The steps before a change of model ran in the old model's vector space: a replay in
    this model's index cannot reproduce them, so rebuild says so and writes nothing."""
    _, hits = ask(peer)
    old = rowid_of(peer, hits[0].content_hash)
    embed_as_another_model(peer, old)
    before = saliences(peer)
    with pytest.raises(RebuildError, match=rf"journal step \d+ admits chunk {old}, .* model"):
        rebuild(peer.runtime)
    assert saliences(peer) == before


def test_replay_from_a_checkpoint_keeps_another_models_chunks_live_outside_the_index(
    peer: Peer,
) -> None:
    """After the journal of the old model's days was pruned, replay starts from a checkpoint:
    a live chunk the old model embedded stays live there, outside the index, as it is live."""
    _, hits = ask(peer)
    old = rowid_of(peer, hits[0].content_hash)
    with peer.db.transaction():
        checkpoints.write_checkpoint(peer.db, now_ms=peer.now_ms())  # None: head checkpointed
        assert checkpoints.prune(peer.db, older_than_ms=peer.now_ms() + 1) is not None
    embed_as_another_model(peer, old)
    replayed = replay_steps(peer.runtime)
    tiers_of = {chunk.chunk_id: chunk.tier for chunk in replayed.chunks()}
    assert tiers_of[old] == "live" and not replayed.index.is_live(old)
    assert replayed.index.live_count == len(tiers_of) - 1
    assert set(tiers_of.values()) == {"live"}


def test_enough_successes_move_the_split_and_keep_the_total(peer: Peer) -> None:
    total = peer.config.recall.vector_weight + peer.config.recall.lexical_weight
    clear = [MIN_EVIDENCE, 0.5, 0.01]  # a mean gain of 0.5, standard error 0.02
    peer.db.set_meta(
        FUSION_META_KEY,
        json.dumps(
            {
                "configured": split_evidence(peer.db, peer.config).configured,
                "grid": list(SHARES),
                "gains": [[0, 0.0, 0.0]] * (len(SHARES) - 1) + [clear],
            }
        ),
    )
    vector, lexical = fusion_weights(peer.db, peer.config)
    assert vector / total == pytest.approx(max(SHARES))
    assert vector + lexical == pytest.approx(total)
    _, hits = ask(peer)  # recall runs on the learned split
    assert hits
    # Unreadable scores are derived state: recall goes back to the configured split.
    peer.db.set_meta(FUSION_META_KEY, "{not json")
    assert fusion_weights(peer.db, peer.config) == (
        peer.config.recall.vector_weight,
        peer.config.recall.lexical_weight,
    )


def test_the_split_stays_as_configured_when_fusion_learning_is_off(
    tmp_path: Path, clock: ManualClock
) -> None:
    for peer in open_peer(tmp_path, clock, **{"learning.fusion": False}):
        credit(peer, 1.0, cite=1)
        assert peer.db.get_meta(FUSION_META_KEY) is None


def published_decision_texts(peer: Peer) -> list[str]:
    return [
        json.loads(body)["decision_text"]
        for (body,) in peer.db.conn.execute("SELECT body FROM outbox WHERE kind = 'attribution'")
    ]


def test_the_question_stays_local_unless_key_texts_are_shared(
    peer: Peer, tmp_path: Path, clock: ManualClock
) -> None:
    decision, _ = ask(peer)
    assert published_decision_texts(peer) == [""]
    record = peer.db.attribution(decision)
    assert record is not None and record.query_text == QUERY  # kept here, for keys
    for sharing in open_peer(tmp_path / "sharing", clock, **{"learning.share_key_text": True}):
        ask(sharing)
        assert published_decision_texts(sharing) == [QUERY]


def test_an_uncited_outcome_credits_nothing_by_default(peer: Peer) -> None:
    before = saliences(peer)
    decision, _ = ask(peer)
    emit_outcome(peer.runtime, decision=decision, reward=1.0, reason="tests/uncited")
    run_cycle_blocking(peer)
    assert peer.db.conn.execute("SELECT status, pulses FROM outcomes").fetchall() == [
        ("converted", 0)
    ]
    assert saliences(peer) == before
    assert key_store.key_count(peer.db) == 0


def test_citations_must_be_among_the_recalled_chunks(peer: Peer) -> None:
    decision, hits = ask(peer, top_k=3)
    recalled = {h.content_hash for h in hits}
    stranger = next(h for h in saliences(peer) if h not in recalled)
    queued = peer.db.conn.execute("SELECT count(*) FROM outbox").fetchone()
    with pytest.raises(ValueError, match=f"cited chunk {stranger} is not among"):
        emit_outcome(peer.runtime, decision=decision, reward=1.0, reason="r", cited=[stranger])
    with pytest.raises(ValueError, match="'abc' is not a chunk hash"):
        emit_outcome(peer.runtime, decision=decision, reward=1.0, reason="r", cited=["abc"])
    assert peer.db.conn.execute("SELECT count(*) FROM outbox").fetchone() == queued

    first = hits[0].content_hash
    emitted = emit_outcome(
        peer.runtime, decision=decision, reward=1.0, reason="r", cited=[first[:8], first]
    )
    row = peer.db.conn.execute(
        "SELECT body FROM outbox WHERE entry_id = ?", (emitted.entry_id,)
    ).fetchone()
    assert row is not None
    assert json.loads(row[0])["cited"] == [first]


# ---- the cold tier ---------------------------------------------------------------------------


def test_a_sweep_moves_chunks_to_a_cold_tier_that_recall_and_ingest_can_reach(
    peer: Peer, clock: ManualClock
) -> None:
    tombstones = tombstone_rows(peer)
    sweep_every_cycle(peer)
    clock.advance(DAY_MS)
    swept_at = clock.now_ms()
    stats = run_cycle_blocking(peer).stats["percentile_sweep"]
    cold = cold_hashes(peer)
    assert 0 < len(cold) < len(TOPICS)
    assert stats["cold"] == len(cold)
    assert tombstone_rows(peer) == tombstones
    for digest in cold:
        obs = peer.db.observation_by_hash(digest)
        assert obs is not None and obs.deleted_at is None and obs.cold_at is not None
        assert not peer.index.is_live(obs.rowid)
    for digest in set(saliences(peer)) - cold:
        assert peer.index.is_live(rowid_of(peer, digest))
    journal = peer.db.conn.execute("SELECT ref FROM journal WHERE kind = 'sweep'").fetchall()
    assert {str(r[0]) for r in journal} == cold

    listed = tiers.cold_chunks(peer.db, limit=100)
    assert {c.content_hash for c in listed} == cold
    assert all(c.reason.startswith("percentile_sweep") for c in listed)
    assert all(c.cold_at == iso_from_ms(swept_at) for c in listed)

    # Recall falls back to the cold tier: the exact text of a cold chunk still finds it.
    victim = min(cold)
    content = peer.db.observation_by_hash(victim).content  # type: ignore[union-attr]
    _, hits = ask(peer, content)
    [hit] = [h for h in hits if h.content_hash == victim]
    assert hit.cold
    assert all(h.cold == (h.content_hash in cold) for h in hits)
    assert victim in cold_hashes(peer)  # being recalled does not revive it

    # Ingesting its content again brings it back, at the next cycle.
    clock.advance(1_000)
    ingest(peer.runtime, [[NewObservation(content=content)]])
    stats = run_cycle_blocking(peer).stats["percentile_sweep"]
    assert stats["revived"] == 1
    revived = peer.db.observation_by_hash(victim)
    assert revived is not None and revived.cold_at is None and revived.deleted_at is None
    assert peer.index.is_live(revived.rowid)
    assert "revive" in {
        str(k) for (k,) in peer.db.conn.execute("SELECT kind FROM journal WHERE ref = ?", (victim,))
    }

    # The grace period runs again from the revival: a day later the chunk is two days old,
    # past a grace of a day and a half, yet revived only a day ago, so it stays live.
    peer.config.sweep.grace_s = 1.5 * DAY_MS / 1000
    clock.advance(DAY_MS)
    run_cycle_blocking(peer)
    assert victim not in cold_hashes(peer)
    assert cold - {victim} <= cold_hashes(peer)
    assert tombstone_rows(peer) == tombstones


def test_repeated_sweeps_of_a_static_corpus_do_not_erode_it(peer: Peer, clock: ManualClock) -> None:
    sweep_every_cycle(peer)
    counts = []
    for _ in range(20):
        clock.advance(DAY_MS)
        stats = run_cycle_blocking(peer).stats["percentile_sweep"]
        assert "skipped" not in stats, stats
        counts.append(len(cold_hashes(peer)))
    assert counts[0] > 0
    assert counts == [counts[0]] * 20, counts
    assert tombstone_rows(peer) == []


# ---- a database swept before the cold tier existed ---------------------------------------


def test_old_sweep_tombstones_become_cold_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    files = migrations.migration_files()
    assert [f.name[:4] for f in files[:3]] == ["0001", "0002", "0003"]
    conn = apsw.Connection(str(path))
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "migration_files", lambda: files[:3])
        assert len(apply_migrations(conn)) == 3
    swept_at, kept_at = iso_from_ms(START_MS), iso_from_ms(START_MS - DAY_MS)
    swept, kept = "a" * 64, "b" * 64
    with conn:
        for digest, content, deleted in ((swept, "swept", swept_at), (kept, "retracted", kept_at)):
            conn.execute(
                "INSERT INTO observations (content, created_at, updated_at, content_hash, "
                "deleted_at, salience) VALUES (?, ?, ?, ?, ?, 0.1)",
                (content, kept_at, kept_at, digest, deleted),
            )
        for digest, reason, at in ((swept, "percentile_sweep", swept_at), (kept, "wrong", kept_at)):
            conn.execute(
                "INSERT INTO journal (kind, ref, body, at_ms) VALUES ('tombstone', ?, '{}', ?)",
                (digest, START_MS),
            )
            seq = conn.last_insert_rowid()
            conn.execute(
                "INSERT INTO tombstones (hash, reason, origin_peer, ts, journal_seq) "
                "VALUES (?, ?, 'a', ?, ?)",
                (digest, reason, at, seq),
            )
    conn.close()

    db = Database(path)
    try:
        obs = db.observation_by_hash(swept)
        assert obs is not None
        assert obs.deleted_at is None and obs.cold_at == swept_at
        assert [(c.content_hash, c.reason) for c in tiers.cold_chunks(db, limit=10)] == [
            (swept, "percentile_sweep")
        ]
        # An explicit tombstone stays what it was.
        assert db.tombstones_by_reason() == {"wrong": 1}
        retracted = db.observation_by_hash(kept)
        assert retracted is not None and retracted.deleted_at == kept_at
        journal = {
            str(ref): str(kind)
            for ref, kind in db.conn.execute("SELECT ref, kind FROM journal ORDER BY seq")
        }
        assert journal == {swept: "sweep", kept: "tombstone"}
        assert db.counts()["cold"] == 1
    finally:
        db.close()
