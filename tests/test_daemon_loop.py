"""The learning loop on one peer, through the real CLIs: recall, outcome, dream cycle.

Every test starts from the same peer: real documentation paragraphs ingested and
one cycle run with a short half-life, so salience sits well below the 1.0 cap and
can move both ways. Later cycles run with downscale off, so any change in salience
comes from the pulse under test.
"""

from __future__ import annotations

import json
import re
import time
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from tests.daemon_helpers import (
    Peer,
    documentation_chunks,
    emitted_id,
    nearest,
    pulse_seed,
    write_jsonl,
)

TOPICS = ("assert", "for", "while", "try", "raise", "with", "return", "import", "class", "del")
CHUNK_COUNT = 100
QUERY = "how does an assert statement raise AssertionError"
DECAY_TEXT = "the import statement finds and loads a module"
#: Downscale only in the first cycle (its half-life is set then), and then at every cycle
#: that enables it however little time passed; sweeps only on demand.
SETTINGS = {
    "DREAMCYCLE_SWEEP_ENABLED": "false",
    "DREAMCYCLE_DOWNSCALE_ENABLED": "false",
    "DREAMCYCLE_DOWNSCALE_MIN_STEP_S": "0",
}
#: Slack added to the half-life of the first cycle, for the time the cycle itself takes.
FIRST_CYCLE_SLACK_S = 3.0
#: A chunk this dissimilar to every seed of a pulse is "unrelated" to it.
UNRELATED_SIMILARITY = 0.5
#: The most an unrelated chunk may move: the kernel makes far-away deltas vanish.
UNRELATED_TOLERANCE = 0.01
#: A chunk at the seed of a pulse moves at least this much (strength x hop-1 attenuation x ~1).
SEED_MOVE = 0.1


def short_half_life(peer: Peer) -> dict[str, str]:
    """Settings whose first downscale roughly halves every chunk's salience."""
    created = peer.scalar("SELECT min(created_at) FROM observations")
    age_s = time.time() - datetime.fromisoformat(created.replace("Z", "+00:00")).timestamp()
    return {
        "DREAMCYCLE_DOWNSCALE_ENABLED": "true",
        "DREAMCYCLE_DOWNSCALE_NOTE_HALF_LIFE_S": f"{age_s + FIRST_CYCLE_SLACK_S:.3f}",
    }


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    root = tmp_path_factory.mktemp("loop")
    peer = Peer(root / "template", "solo", root / "zeitgeist", dict(SETTINGS))
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(TOPICS, CHUNK_COUNT))
    peer.dreamcycle("ingest", str(chunks))
    peer.dreamcycle("run", "--once", settings=short_half_life(peer))
    salience = peer.salience()
    assert len(salience) == CHUNK_COUNT
    assert all(0.1 < value < 0.9 for value in salience.values()), sorted(salience.values())[:5]
    return peer


@pytest.fixture
def peer(trained: Peer, tmp_path: Path) -> Peer:
    return trained.copy_to(tmp_path / "data", zeitgeist_dir=tmp_path / "zeitgeist")


def recall(peer: Peer, query: str, *args: str) -> tuple[str, list[str]]:
    """(decision hash, recalled chunk hashes) of a recorded recall."""
    report = json.loads(peer.dreamcycle("recall", query, "--json", *args).stdout)
    return report["decision_hash"], [hit["content_hash"] for hit in report["hits"]]


def unrelated_to(peer: Peer, seeds: list[np.ndarray]) -> set[str]:
    embeddings = peer.embeddings()
    return {
        digest
        for digest, vector in embeddings.items()
        if all(float(np.dot(vector, seed)) < UNRELATED_SIMILARITY for seed in seeds)
    }


def test_outcomes_raise_and_lower_the_recalled_chunks(peer: Peer) -> None:
    before = peer.salience()
    decision, recalled = recall(peer, QUERY)
    embeddings = peer.embeddings()
    unrelated = unrelated_to(peer, [embeddings[h] for h in recalled])
    assert len(unrelated) > CHUNK_COUNT // 2, "the corpus must hold unrelated topics"

    # Only cited chunks are credited (learning.credit_rule 'none'): cite every one recalled.
    peer.pulse_emit(
        "outcome", "--decision", decision, "--reward", "0.6", "--reason", "python/assert",
        "--cited", *recalled,
    )  # fmt: skip
    peer.dreamcycle("run", "--once")
    rewarded = peer.salience()
    for digest in recalled:
        assert rewarded[digest] >= before[digest] + SEED_MOVE, digest
    for digest in unrelated:
        assert abs(rewarded[digest] - before[digest]) < UNRELATED_TOLERANCE, digest
    converted = peer.query("SELECT status, pulses FROM outcomes")
    assert converted == [("converted", len(recalled))]

    decision, again = recall(peer, QUERY)
    assert set(again) == set(recalled)
    peer.pulse_emit(
        "outcome", "--decision", decision, "--reward", "-0.8", "--reason", "python/assert",
        "--cited", *again,
    )  # fmt: skip
    peer.dreamcycle("run", "--once")
    punished = peer.salience()
    for digest in recalled:
        assert punished[digest] <= rewarded[digest] - SEED_MOVE, digest
    for digest in unrelated:
        assert abs(punished[digest] - rewarded[digest]) < UNRELATED_TOLERANCE, digest


def test_outcome_waits_for_a_decision_made_later_elsewhere(peer: Peer) -> None:
    unknown = "cd" * 32
    peer.pulse_emit(
        "outcome", "--decision", unknown, "--reward", "0.5", "--reason", "r", "--decided-elsewhere"
    )
    before = peer.salience()
    peer.dreamcycle("run", "--once")
    assert peer.query("SELECT status FROM outcomes") == [("waiting",)]
    assert peer.salience() == before


def test_decay_pulse_lowers_the_neighbourhood_of_its_text(peer: Peer) -> None:
    before = peer.salience()
    queued = peer.pulse_emit(
        "pulse", "--text", DECAY_TEXT, "--kind", "decay", "--strength", "0.8", "--reason", "stale"
    )
    peer.dreamcycle("run", "--once")
    pulse_id = emitted_id(queued)
    assert peer.pulse_status(pulse_id) == "applied"
    seed = pulse_seed(peer, pulse_id)
    after = peer.salience()
    closest = [digest for digest, _ in nearest(peer.embeddings(), seed)[:3]]
    for digest in closest:
        assert after[digest] <= before[digest] - SEED_MOVE / 2, digest
    assert all(after[d] <= before[d] for d in before), "a decay pulse raises nothing"
    for digest in unrelated_to(peer, [seed]):
        assert abs(after[digest] - before[digest]) < UNRELATED_TOLERANCE, digest


def test_tombstone_hides_a_chunk_for_good(peer: Peer) -> None:
    _, recalled = recall(peer, QUERY, "--top-k", "10")
    victim = recalled[0]
    peer.pulse_emit("tombstone", victim, "--reason", "retracted by its author")
    peer.dreamcycle("run", "--once")
    assert (
        peer.scalar("SELECT reason FROM tombstones WHERE hash = ?", (victim,))
        == "retracted by its author"
    )
    frozen = peer.salience()[victim]

    _, recalled_after = recall(peer, QUERY, "--top-k", "20")
    assert victim not in recalled_after
    assert recalled_after[0] == recalled[1]

    # A reward aimed straight at it, then a downscale: neither reaches a tombstoned chunk.
    content = peer.scalar("SELECT content FROM observations WHERE content_hash = ?", (victim,))
    before = peer.salience()
    peer.pulse_emit("pulse", "--text", content, "--kind", "reward", "--strength", "1.0")
    peer.dreamcycle("run", "--once", settings=short_half_life(peer))
    after = peer.salience()
    assert after[victim] == frozen
    assert any(after[d] != before[d] for d in before if d != victim), "the cycle changed nothing"
    report = json.loads(peer.dreamcycle("status", "--json").stdout)
    assert report["counts"]["live"] == CHUNK_COUNT - 1
    assert report["tombstones_by_reason"] == {"retracted by its author": 1}


@pytest.mark.slow
def test_rebuild_replays_salience_bit_for_bit(peer: Peer, tmp_path: Path) -> None:
    decision, cited = recall(peer, QUERY)
    peer.pulse_emit(
        "outcome", "--decision", decision, "--reward", "0.7", "--reason", "python/assert",
        "--cited", *cited,
    )  # fmt: skip
    peer.pulse_emit("pulse", "--text", DECAY_TEXT, "--kind", "decay", "--strength", "0.5")
    peer.dreamcycle("run", "--once")
    _, recalled = recall(peer, "the while loop repeats while a condition is true", "--no-record")
    peer.pulse_emit("tombstone", recalled[0], "--reason", "wrong")
    reward = ("--text", "exception handling with try and except", "--kind", "reward")
    peer.pulse_emit("pulse", *reward, "--strength", "0.4")
    # Another half-life than the first cycle's: replay must use the one each downscale used.
    other_half_life = {**short_half_life(peer), "DREAMCYCLE_DOWNSCALE_NOTE_HALF_LIFE_S": "5"}
    peer.dreamcycle("run", "--once", settings=other_half_life)
    # No grace period: the chunks are minutes old, and the sweep must move some to the cold tier.
    peer.dreamcycle(
        "sweep", "--percentile", "20", "--min-population", "10",
        settings={"DREAMCYCLE_SWEEP_GRACE_S": "0"},
    )  # fmt: skip
    decision, cited = recall(peer, "class definitions and inheritance")
    peer.pulse_emit(
        "outcome", "--decision", decision, "--reward", "-0.5", "--reason", "python/class",
        "--cited", *cited,
    )  # fmt: skip
    peer.dreamcycle("run", "--once", settings={"DREAMCYCLE_DOWNSCALE_ENABLED": "true"})

    kinds = dict(peer.query("SELECT kind, count(*) FROM journal GROUP BY kind"))
    assert kinds["chunk"] == CHUNK_COUNT
    assert kinds["pulse"] >= 10
    assert kinds["tombstone"] == 1
    assert kinds["sweep"] >= 1  # the sweep moves chunks to the cold tier; rebuild replays it
    assert kinds["downscale"] == 3
    live_before = peer.salience(live_only=True)
    assert len(live_before) == CHUNK_COUNT - 1 - kinds["sweep"]
    before = peer.salience()

    # Rebuild runs with the default configuration, not the settings of any cycle.
    result = peer.dreamcycle("rebuild", settings={"DREAMCYCLE_DOWNSCALE_ENABLED": "true"})
    match = re.search(r"(\d+) salience values corrected", result.stdout)
    assert match is not None, result.stdout
    assert int(match.group(1)) == 0, result.stdout
    assert f"{len(live_before)} live chunks indexed" in result.stdout
    assert peer.salience() == before

    # The rebuilt index serves the daemon: the next cycle runs on it without rebuilding.
    peer.dreamcycle("run", "--once")
    assert peer.salience() == before


@pytest.mark.slow
def test_rebuild_after_old_journal_steps_were_pruned_is_bit_for_bit(peer: Peer) -> None:
    # A checkpoint at every cycle and a retention of a moment: each cycle deletes what the
    # previous one checkpointed.
    audit = {
        "DREAMCYCLE_AUDIT_CHECKPOINT_INTERVAL_S": "0.001",
        "DREAMCYCLE_AUDIT_RETENTION_S": "0.001",
    }
    peer.settings.update(audit)
    peer.pulse_emit("pulse", "--text", DECAY_TEXT, "--kind", "decay", "--strength", "0.5")
    peer.dreamcycle("run", "--once")
    decision, cited = recall(peer, QUERY)
    peer.pulse_emit(
        "outcome", "--decision", decision, "--reward", "0.7", "--reason", "python/assert",
        "--cited", *cited,
    )  # fmt: skip
    peer.dreamcycle("run", "--once", settings={"DREAMCYCLE_DOWNSCALE_ENABLED": "true"})

    pruned = int(peer.scalar("SELECT value FROM meta WHERE key = 'journal_pruned_seq'"))
    assert peer.scalar("SELECT min(seq) FROM journal") == pruned + 1
    assert peer.scalar("SELECT count(*) FROM journal WHERE kind = 'chunk'") == 0
    assert peer.scalar("SELECT count(*) FROM journal WHERE kind = 'pulse'") >= 1
    before = peer.salience()

    result = peer.dreamcycle("rebuild")
    assert "0 salience values corrected" in result.stdout, result.stdout
    assert peer.salience() == before
