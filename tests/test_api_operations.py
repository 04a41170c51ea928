"""Context bundles, explain, pin / unpin, reinforce / penalize, update and the timeline,
through a real daemon (its API on, cycling every second) and the Python client.

One daemon serves the module; each test keeps to its own project, so the order tests run
in does not matter.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dreamcycle.daemon.api import recall_models, report_models
from dreamcycle.daemon.api.client import MemoryClient
from dreamcycle.daemon.api.client_errors import BadRequest, Conflict, NotFound
from dreamcycle.store.timefmt import ms_from_iso
from tests.api_helpers import ApiDaemon, running_api, wait_applied
from tests.daemon_helpers import (
    Peer,
    documentation_chunks,
    wait_until,
    write_jsonl,
)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiDaemon]:
    root = tmp_path_factory.mktemp("operations")
    with running_api(Peer(root / "data", "ops_peer", root / "zeitgeist")) as api:
        yield api


@pytest.fixture
def memory(served: ApiDaemon) -> Iterator[MemoryClient]:
    with MemoryClient(served.socket_path) as client:
        yield client


def _project() -> str:
    return f"p-{uuid.uuid4().hex[:8]}"


def _hashes(memories: list[recall_models.ContextMemory]) -> list[str]:
    return [m.content_hash for m in memories]


def test_a_context_bundle_has_three_tiers_and_records_exactly_what_it_holds(
    served: ApiDaemon, memory: MemoryClient
) -> None:
    project = _project()
    rule = memory.save(
        "Never deploy on Fridays: the on-call rota is thin at weekends.",
        project=project,
        title="deploy rule",
        deletion_policy="never",
    ).content_hash
    pinned = memory.save(
        "Every service exposes /healthz for the load balancer.", project=project, pin_floor=0.3
    ).content_hash
    rollback = memory.save(
        "To roll back a deploy, redeploy the previous image tag with the deploy script.",
        project=project,
        title="rollback",
    ).content_hash
    canary = memory.save(
        "Deploys go to the canary pool first and wait ten minutes for errors.",
        project=project,
        title="canary",
    ).content_hash
    elsewhere = memory.save("Lunch is at noon in the big room.", project=_project()).content_hash

    # A success citing the rollback note makes it an outcome-tier memory for similar tasks.
    found = memory.recall("how do I roll back a deploy", filters={"project": project})
    assert found.decision_hash is not None and rollback in [h.content_hash for h in found.hits]
    success = memory.outcome(found.decision_hash, 1.0, "rolled back cleanly", cited=[rollback])
    wait_applied(served, success.entry_id)

    bundle = memory.context(
        "roll back the deploy that broke checkout", filters={"project": project}
    )
    assert set(_hashes(bundle.tiers.pinned)) == {rule, pinned}
    assert _hashes(bundle.tiers.outcomes) == [rollback]
    relevant = _hashes(bundle.tiers.relevant)
    assert canary in relevant and not {rule, pinned, rollback} & set(relevant)  # deduplicated
    every = _hashes(bundle.tiers.pinned + bundle.tiers.outcomes + bundle.tiers.relevant)
    assert bundle.tokens.total == sum(
        m.tokens for m in bundle.tiers.pinned + bundle.tiers.outcomes + bundle.tiers.relevant
    )
    assert bundle.tokens.budget == 3000 and bundle.tokens.total <= 3000
    assert bundle.tokens.pinned == sum(m.tokens for m in bundle.tiers.pinned) > 0
    assert (bundle.overflow, bundle.dropped) == ([], 0) and bundle.latency_ms > 0
    assert bundle.text.startswith(f"decision {bundle.decision_hash}")
    assert "# Pinned" in bundle.text and f"[{rollback[:12]}]" in bundle.text
    assert all(m.rank_salience >= 0.9 for m in bundle.tiers.pinned)

    # The attribution is exactly the bundle: citing a member is accepted, anything else not.
    assert bundle.decision_hash is not None
    stored = served.peer.scalar(
        "SELECT chunk_hashes_json FROM attributions WHERE decision_hash = ?",
        (bundle.decision_hash,),
    )
    assert json.loads(stored) == sorted(every)
    with pytest.raises(BadRequest, match="not among the chunks"):
        memory.outcome(bundle.decision_hash, 1.0, "lunch was good", cited=[elsewhere])
    memory.outcome(bundle.decision_hash, 1.0, "the rule held", cited=[rule[:10]])
    # One outcome per decision, over the API as on the command line; a blank reason says nothing.
    with pytest.raises(Conflict, match="already has an outcome"):
        memory.outcome(bundle.decision_hash, -1.0, "it broke after all")
    with pytest.raises(BadRequest, match="reason: must not be blank"):
        memory.outcome(bundle.decision_hash, 1.0, "   ")


def test_under_budget_pressure_pinned_memories_stay_and_the_rest_overflow(
    memory: MemoryClient,
) -> None:
    project = _project()
    pinned = memory.save(
        "The staging database is reset every night at 03:00.", project=project, pin_floor=0.1
    ).content_hash
    long_notes = [
        memory.save(
            f"Note {n} about the staging database: " + "it keeps a copy of production data. " * 40,
            project=project,
        ).content_hash
        for n in range(3)
    ]
    bundle = memory.context(
        "what happens to the staging database", filters={"project": project}, budget_tokens=400
    )
    assert _hashes(bundle.tiers.pinned) == [pinned]
    assert bundle.tokens.total <= 400 and len(bundle.tiers.relevant) == 1
    assert {r.content_hash for r in bundle.overflow} | set(_hashes(bundle.tiers.relevant)) == set(
        long_notes
    )
    assert bundle.dropped == 2 and "# Not included (2, over the budget)" in bundle.text

    # Nothing fits: the best memory is still given, cut to the budget.
    tiny = memory.context(
        "staging database copy of production",
        filters={"project": project},
        budget_tokens=8,
        record=False,
    )
    members = tiny.tiers.pinned + tiny.tiers.relevant
    assert len(members) == 1 and members[0].truncated and tiny.tokens.total <= 8
    assert tiny.decision_hash is None and tiny.text.startswith("not recorded")

    with pytest.raises(BadRequest, match="budget_tokens"):
        memory.context("anything", budget_tokens=4001)


def test_pin_and_unpin_travel_as_revisions_and_explain_shows_them(
    served: ApiDaemon, memory: MemoryClient
) -> None:
    digest = memory.save("Backups are encrypted with the ops team's age key.", project=_project())
    pinned = memory.pin(digest.content_hash[:10], 0.4)
    assert pinned.content_hash == digest.content_hash and pinned.new
    kind = served.peer.scalar("SELECT kind FROM outbox WHERE entry_id = ?", (pinned.entry_id,))
    assert kind == "reconsolidate"  # what peers receive
    wait_applied(served, pinned.entry_id)
    assert memory.memory(digest.content_hash).pin_floor == 0.4
    assert memory.memory(digest.content_hash).salience >= 0.4

    unpinned = memory.unpin(digest.content_hash)
    wait_applied(served, unpinned.entry_id)
    assert memory.memory(digest.content_hash).pin_floor == 0.0

    explained = memory.explain(digest.content_hash)
    causes = [step.cause for step in explained.history]
    assert causes[:2] == ["unpinned", "pinned"] and causes[-1] == "admitted"
    assert explained.history[1].pin_floor == 0.4 and explained.history_total == len(causes)
    assert explained.memory.state == "live" and explained.tombstone_reason is None
    assert explained.downscale.steps >= 1 and explained.downscale.half_life_s is not None
    # Seconds old: no step has decayed it yet (at most once per downscale.min_step_s).
    assert explained.downscale.last_at_ms == ms_from_iso(explained.memory.created_at)

    with pytest.raises(NotFound):
        memory.pin("0" * 64)


def test_reinforce_and_penalize_are_pulses_with_their_reason(
    served: ApiDaemon, memory: MemoryClient
) -> None:
    project = _project()
    good = memory.save("Use the retry helper for S3 writes.", project=project).content_hash
    bad = memory.save("Retry S3 writes forever in a tight loop.", project=project).content_hash
    before = served.peer.salience()
    up = memory.reinforce(good, "it fixed the flaky upload", strength=0.5)
    down = memory.penalize(bad, "it hammered S3 during the outage", strength=0.5)
    assert memory.reinforce(good, "it fixed the flaky upload", strength=0.5).new is False
    wait_applied(served, up.entry_id)
    wait_applied(served, down.entry_id)
    after = served.peer.salience()
    assert after[good] > before[good] and after[bad] < before[bad]
    assert (
        served.peer.scalar("SELECT reason FROM applied_pulses WHERE pulse_id = ?", (up.entry_id,))
        == "it fixed the flaky upload"
    )

    [step] = [s for s in memory.explain(good).history if s.step == "pulse"]
    assert (step.pulse_id, step.pulse_kind, step.reason, step.strength) == (
        up.entry_id,
        "reward",
        "it fixed the flaky upload",
        0.5,
    )
    with pytest.raises(BadRequest, match="reason"):
        memory.reinforce(good, "   ")


def test_explain_lists_decisions_outcomes_and_the_outcome_behind_a_pulse(
    served: ApiDaemon, memory: MemoryClient
) -> None:
    project = _project()
    digest = memory.save(
        "The billing export runs at 05:00 and writes to the finance bucket.", project=project
    ).content_hash
    found = memory.recall("when does the billing export run", filters={"project": project})
    assert found.decision_hash is not None
    outcome = memory.outcome(found.decision_hash, 0.8, "export ran on time", cited=[digest])
    wait_applied(served, outcome.entry_id)

    def learned() -> report_models.ExplainResponse | None:
        explained = memory.explain(digest)
        pulsed = any(step.step == "pulse" for step in explained.history)
        return explained if explained.learned_keys and pulsed else None

    explained = wait_until(
        learned, what="the outcome to become a pulse and a key", context=served.daemon.log_tail
    )
    [decision] = explained.decisions
    assert (decision.decision_hash, decision.rank, decision.query) == (
        found.decision_hash,
        1,
        "when does the billing export run",
    )
    assert [(o.reward, o.reason, o.cited) for o in decision.outcomes] == [
        (0.8, "export ran on time", True)
    ]
    pulses = [s for s in explained.history if s.step == "pulse"]
    assert pulses and pulses[0].outcome_id is not None
    assert pulses[0].decision_hash == found.decision_hash
    assert pulses[0].cause == "outcome reward pulse"
    assert explained.learned_keys[0].text == "when does the billing export run"


def test_update_revises_or_supersedes(served: ApiDaemon, memory: MemoryClient) -> None:
    project = _project()
    old = memory.save(
        "The VPN endpoint is vpn1.example.net.", project=project, title="vpn", importance=4
    ).content_hash
    revised = memory.update(old[:12], title="VPN endpoint", importance=7)
    assert revised.content_hash == old and revised.superseded is None
    assert revised.revised is not None
    wait_applied(served, revised.revised.entry_id)
    stored = memory.memory(old)
    assert (stored.title, stored.importance) == ("VPN endpoint", 7)

    replaced = memory.update(old, content="The VPN endpoint is vpn2.example.net.", reason="moved")
    assert replaced.superseded is not None and replaced.content_hash != old
    new = memory.memory(replaced.content_hash)
    assert (new.title, new.project, new.importance) == ("VPN endpoint", project, 7)

    with pytest.raises(BadRequest, match="needs new content"):
        memory.update(replaced.content_hash, kind="fact")
    with pytest.raises(BadRequest, match="nothing to change"):
        memory.update(replaced.content_hash, title="VPN endpoint")
    wait_applied(served, replaced.superseded.queued.entry_id)
    with pytest.raises(Conflict):
        memory.update(old, title="again")


def test_the_timeline_is_newest_first_paged_and_filtered(memory: MemoryClient) -> None:
    project = _project()
    saved = [
        memory.save(f"Step {n} of the migration runbook.", project=project, session_id="s1")
        for n in range(5)
    ]
    memory.save("Unrelated note in another session.", project=project, session_id="s2")
    first = memory.timeline(project=project, session_id="s1", limit=3)
    assert first.total == 5 and first.next_offset == 3
    second = memory.timeline(project=project, session_id="s1", limit=3, offset=3)
    assert second.next_offset is None
    listed = [m.content_hash for m in first.memories + second.memories]
    assert listed == [s.content_hash for s in reversed(saved)]
    assert first.memories[0].preview == "Step 4 of the migration runbook."

    newest = first.memories[0].created_at
    assert memory.timeline(project=project, around_ms=0, span_s=1).total == 0
    around = memory.timeline(project=project, around_ms=ms_from_iso(newest), span_s=3600)
    assert around.total == 6
    with pytest.raises(BadRequest, match="limit"):
        memory.timeline(limit=0)


def test_a_swept_memory_revived_through_the_api_is_live_after_the_next_cycle(
    tmp_path: Path,
) -> None:
    peer = Peer(tmp_path / "data", "revive_peer", tmp_path / "zeitgeist")
    rows = documentation_chunks(("assert", "for", "while", "try", "raise"), 20)
    chunks = [{**row, "importance": number % 11} for number, row in enumerate(rows)]
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "chunks.jsonl", chunks)))
    peer.dreamcycle("run", "--once")
    peer.dreamcycle(
        "sweep", "--percentile", "30", "--min-population", "10",
        settings={"DREAMCYCLE_SWEEP_GRACE_S": "0"},
    )  # fmt: skip
    cold = peer.scalar("SELECT content_hash FROM observations WHERE cold_at IS NOT NULL LIMIT 1")
    live = peer.scalar("SELECT content_hash FROM observations WHERE cold_at IS NULL LIMIT 1")
    with running_api(peer) as served, MemoryClient(served.socket_path) as memory:
        assert memory.memory(cold).state == "cold"
        revival = memory.revive(cold[:12])
        assert revival.content_hash == cold
        wait_until(
            lambda: memory.memory(cold).state == "live",
            what="the revived memory to be live",
            context=served.daemon.log_tail,
        )
        explained = memory.explain(cold)
        assert explained.history[0].cause == "revived from the cold tier"
        assert explained.history_since_ms is None  # nothing pruned: the journal is whole
        assert cold in [hit.content_hash for hit in memory.recall(memory.memory(cold).content).hits]
        with pytest.raises(Conflict, match="is live, not cold"):
            memory.revive(live)
        with pytest.raises(NotFound):
            memory.revive("0" * 64)


def test_the_daemon_searches_a_large_cold_tier_through_its_index_and_still_finds_it(
    tmp_path: Path,
) -> None:
    """With `recall.cold_graph_from` at 1 the daemon searches the cold tier through the
    live index, which holds the swept chunks apart: every swept chunk is still recalled
    by its own embedding, marked cold (some have a live twin of the same text, which ranks
    above them), and the saved index lists them as cold."""
    peer = Peer(tmp_path / "data", "cold_index_peer", tmp_path / "zeitgeist")
    rows = documentation_chunks(("assert", "for", "while", "try", "raise"), 20)
    peer.dreamcycle("ingest", str(write_jsonl(tmp_path / "chunks.jsonl", rows)))
    peer.dreamcycle("run", "--once")
    peer.dreamcycle(
        "sweep", "--percentile", "50", "--min-population", "10",
        settings={"DREAMCYCLE_SWEEP_GRACE_S": "0"},
    )  # fmt: skip
    swept = peer.query(
        "SELECT content_hash, embedding, id FROM observations WHERE cold_at IS NOT NULL"
    )
    assert len(swept) >= 5
    settings = {"DREAMCYCLE_RECALL_COLD_GRAPH_FROM": "1"}
    with running_api(peer, settings) as served, MemoryClient(served.socket_path) as memory:
        for digest, embedding, _ in swept:
            # By its own embedding: a live search does not return it, only the cold search.
            vector = np.frombuffer(embedding, dtype=np.float32).tolist()
            hits = memory.recall(vector, record=False).hits
            assert [hit.cold for hit in hits if hit.content_hash == digest] == [True]
    meta = json.loads((tmp_path / "data" / "index.hnsw.meta.json").read_text())
    assert set(meta["cold"]) == {rowid for _, _, rowid in swept}


def test_a_filtered_recall_follows_a_project_changed_by_ingest_while_the_daemon_runs(
    served: ApiDaemon, memory: MemoryClient, tmp_path: Path
) -> None:
    """The daemon keeps each filter's matches until they may change: a project changed by
    re-ingest (a local update, not a new chunk) must reach them at once."""
    before, after = _project(), _project()
    text = "The staging database is restored from the nightly dump every Monday."
    memory.save(text, project=before)
    assert [h.content for h in memory.recall(text, filters={"project": before}).hits] == [text]
    assert memory.recall(text, filters={"project": after}).hits == []
    lines = write_jsonl(tmp_path / "again.jsonl", [{"content": text, "project": after}])
    served.peer.dreamcycle("ingest", str(lines))
    assert [h.content for h in memory.recall(text, filters={"project": after}).hits] == [text]
    assert memory.recall(text, filters={"project": before}).hits == []
