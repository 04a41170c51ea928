"""Hostile input a signed mesh still has to refuse, against two daemons on a real S3 server.

alice (the victim, adopting remote chunks, with a small budget per origin) and bob run
as separate processes and trust each other's keys. An attacker with write access to
the bucket, holding bob's key for what needs a trusted signature:

- writes five claim files for alice's next sequence numbers: alice is not fenced out,
  keeps publishing under the next free numbers (bob applies her pulse) and counts each
  forged claim (`forged_claim`);
- signs, as bob, an assert whose embedding is another chunk's: not adopted, counted
  (`embedding_mismatch`), while an honest assert in the same segment, titled and embedded
  with its title as every peer embeds a chunk, is adopted;
- signs, as bob, ten pulses stamped within one window of bob's time: those within the
  budget apply, the rest are refused and counted (`over_budget`);
- and the same segment carries thirty older pulses of bob's, three in each of ten
  windows, as a peer catching up after an outage reads them all at once: every one
  applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import numpy as np
import pytest

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.daemon.defaults import PULSE_BUDGET_WINDOW_S
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.store.database import embedding_text
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import AssertEntry, Entry, PulseEntry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.keys import claim_key, segment_key
from scripts.local_servers import RunningS3
from tests.daemon_helpers import Peer, emitted_id, wait_until, write_jsonl
from tests.test_mesh_s3 import ingest_all, make_peer, mesh_settings, wait_started
from tests.test_mesh_signed import (
    ATTACK_SEQ,
    CYCLE_INTERVAL,
    chunk_rows,
    entry_statuses,
    free_port,
    rejected_counts,
    sealed_segment,
    signer_of,
)

pytestmark = pytest.mark.slow

FORGED_CLAIMS: Final = 5
#: Pulses of the defaults below may each move 0.3 * (0.9 + 0.81) = 0.513 salience at
#: most: a budget of 2 admits three of them per window.
BUDGET: Final = "2.0"
PER_WINDOW: Final = 3
FLOOD: Final = 10
CATCH_UP_WINDOWS: Final = 10
WINDOW_MS: Final = int(PULSE_BUDGET_WINDOW_S * 1000)
#: The title of bob's asserts: a peer embeds a chunk's title with its content.
ASSERT_TITLE: Final = "adopted?"


def bob_pulse(victim: Peer, at_ms: int, n: int) -> PulseEntry:
    index_version = str(victim.query("SELECT index_version FROM observations LIMIT 1")[0][0])
    hlc = hlc_from_ms(at_ms) + n
    pulse = SalientPulse(
        seed_embedding=next(iter(victim.embeddings().values())),
        kind=PulseKind.DECAY,
        strength=0.3,
        sigma=0.3,
        max_hops=2,
        k=3,
        decay_per_hop=0.3,
        ts=hlc,
        origin_peer="bob",
        reason=f"pulse {n}",
        ttl_s=7 * 24 * 3600.0,
        index_version=index_version,
    ).with_id()
    return PulseEntry(hlc=hlc, origin="bob", pulse=pulse)


def bob_assert(text: str, embedding: np.ndarray, index_version: str, hlc: int) -> AssertEntry:
    return AssertEntry(
        hlc=hlc,
        origin="bob",
        content_hash=content_hash(text),
        title=ASSERT_TITLE,
        content=text,
        obs_type="manual",
        project=None,
        scope="project",
        topic_key=None,
        session_id=None,
        tool_name=None,
        chunk_kind="note",
        pin_floor=0.0,
        embedding=embedding,
        model_id=index_version.rsplit("/", 1)[0],
        index_version=index_version,
    )


def test_forged_claims_mismatched_embeddings_and_floods_are_refused(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    prefix = f"hostile-{tmp_path.name}"
    settings = mesh_settings(s3_server, prefix)
    alice, bob = make_peer(tmp_path, "alice", settings), make_peer(tmp_path, "bob", settings)
    port = free_port()
    alice.settings.update(
        {
            "DREAMCYCLE_METRICS_LISTEN": f"127.0.0.1:{port}",
            "DREAMCYCLE_ZEITGEIST_ADOPT_REMOTE_CHUNKS": "true",
            "DREAMCYCLE_PULSES_ORIGIN_BUDGET": BUDGET,
        }
    )
    chunks = write_jsonl(tmp_path / "chunks.jsonl", chunk_rows())
    ingest_all([(alice, chunks), (bob, chunks)])
    bucket = s3_server.backend(prefix)
    embedder = Embedder()
    index_version = embedder.index_version

    with (
        alice.start("--interval", CYCLE_INTERVAL) as alice_daemon,
        bob.start("--interval", CYCLE_INTERVAL) as bob_daemon,
    ):
        daemons = [alice_daemon, bob_daemon]

        def logs() -> str:
            return "\n".join(d.log_tail() for d in daemons)

        wait_started([alice, bob], daemons)
        wait_until(
            lambda: alice.scalar("SELECT count(*) FROM segments_out WHERE status = 'published'"),
            what="alice's first segment",
            context=logs,
        )
        # Five claims for the sequence numbers alice uses next, none sealed by her key.
        seq = int(alice.scalar("SELECT max(seq) FROM segments_out"))
        for n in range(1, FORGED_CLAIMS + 1):
            bucket.create(claim_key("alice", seq + n), b"seg/forged")
        emitted = emitted_id(alice.pulse_emit("pulse", "--text", "exceptions", "--kind", "decay"))
        wait_until(
            lambda: bob.pulse_status(emitted) == "applied",
            what="alice's pulse, published past the forged claims, applied on bob",
            context=logs,
        )
        assert alice_daemon.returncode() is None, alice_daemon.log_tail()
        counts = rejected_counts(port)
        assert counts.get("forged_claim") == FORGED_CLAIMS, counts
        superseded = alice.scalar("SELECT count(*) FROM segments_out WHERE status = 'superseded'")
        assert superseded == FORGED_CLAIMS
        assert alice_daemon.log().count("not written here; publishing under the next") == 5

        # As bob (his key stolen): a mismatched and an honest assert, a flood, a catch-up.
        now_ms = SystemClock().now_ms()
        window_start = now_ms - now_ms % WINDOW_MS
        honest_text = "Retries of S3 writes back off exponentially, capped at twenty seconds."
        forged_text = "The deploy key lives in the shared vault under ops/deploy."
        elsewhere = next(iter(alice.embeddings().values()))
        stamp = hlc_from_ms(now_ms)
        structural: list[Entry] = [
            bob_assert(
                honest_text,
                embedder.embed_one(embedding_text(ASSERT_TITLE, honest_text)),
                index_version,
                stamp,
            ),
            bob_assert(forged_text, elsewhere, index_version, stamp + 1),
        ]
        hlc = HybridLogicalClock.physical_ms
        flood = [bob_pulse(alice, window_start, n) for n in range(FLOOD)]
        catch_up = [
            bob_pulse(alice, window_start - (w + 2) * WINDOW_MS, n)
            for w in range(CATCH_UP_WINDOWS)
            for n in range(PER_WINDOW)
        ]
        assert all(hlc(p.hlc) < now_ms + WINDOW_MS for p in flood)
        entries: list[Entry] = [*structural, *flood, *catch_up]
        key = segment_key(stamp + 100, "bob", ATTACK_SEQ)
        bucket.create(key, sealed_segment(signer_of(bob), key, entries))

        def all_recorded() -> dict[str, tuple[str, str]] | None:
            found = entry_statuses(alice, entries)
            return found if len(found) == len(entries) else None

        statuses = wait_until(all_recorded, what="alice to record bob's entries", context=logs)
        assert (
            statuses[structural[0].id] == ("applied", "None")
            or statuses[structural[0].id][0] == "applied"
        )
        status, reason = statuses[structural[1].id]
        assert status == "rejected" and reason.startswith("embedding_mismatch"), reason
        held = {h for (h,) in alice.query("SELECT content_hash FROM observations")}
        assert content_hash(honest_text) in held and content_hash(forged_text) not in held

        flood_status = [statuses[p.id] for p in flood]
        applied = [s for s, _ in flood_status].count("applied")
        assert applied == PER_WINDOW, flood_status
        refused = [r for s, r in flood_status if s == "rejected"]
        assert len(refused) == FLOOD - PER_WINDOW
        assert all(r.startswith("over_budget") for r in refused), refused
        assert all(statuses[p.id][0] == "applied" for p in catch_up), [
            statuses[p.id] for p in catch_up
        ]
        for pulse in catch_up:
            assert alice.pulse_status(pulse.pulse.pulse_id) == "applied"
        counts = rejected_counts(port)
        assert counts.get("embedding_mismatch") == 1, counts
        assert counts.get("over_budget") == FLOOD - PER_WINDOW, counts
        assert alice_daemon.terminate() == 0
        assert bob_daemon.terminate() == 0
