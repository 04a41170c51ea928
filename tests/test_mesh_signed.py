"""Two daemons with exchanged keys on a real S3 server, and an attacker with write access
to the bucket.

alice (the victim) and bob run as separate processes and trust each other's keys
(one keyring, as an operator distributes it); their signed pulses propagate as
before. alice holds pinned chunks, chunks kept with deletion policy `never`, and a
decision of her own. The attacker writes, straight into the bucket:

- under bob's name, unsigned; signed with a key in no keyring; and signed with bob's
  real key (a trusted, ordinary peer, as if compromised): a tombstone with its
  Forget pulse of a pinned chunk, a tombstone of a `never` chunk, a supersede of a
  pinned chunk, a standalone Forget pulse at a `never` chunk, a reconsolidate that
  unpins and renames a pinned chunk, an outcome (reward -1) and an attribution for
  alice's decision, and an outcome that claims alice observed it (plus, unsigned
  and with the stranger's key, an oversized pulse the pulse invariants let through);
- under alice's own name: an unsigned segment, one signed with a key in no
  keyring, and a copy of one of alice's real (validly signed) segments under a new
  key.

Nothing of alice's memory changes; alice records no outcome for her decision and
publishes no pulse for it; the segments whose seal fails are refused before a line
is decoded, their entries recorded nowhere and counted by reason in
dreamcycle_segments_refused_total; every entry refused by authority is recorded as
rejected with its reason and counted in dreamcycle_entries_rejected_total on alice
(and, for the segments under alice's name, which alice never reads, on bob); seal
failures are logged once per
object. bob's next real pulse still reaches alice. Then a key trusted as operator
with `dreamcycle keys trust --role operator` while alice runs (the keyring is read
again without a restart) does delete a pinned chunk: the rule is authority, not a
blanket refusal. One pair of daemons serves every case, to keep the test short.

One file: the two daemons and the S3 server are started once, for one test that runs every
attack in turn against them, and the helpers above it serve only that test.
"""

from __future__ import annotations

import json
import re
import socket
import urllib.request
from pathlib import Path
from typing import Any, Final

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import load_pem_private_key

from dreamcycle.daemon.clock import SystemClock
from dreamcycle.daemon.defaults import SIGNING_KEY_FILE
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import (
    AttributionEntry,
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    SupersedeEntry,
    TombstoneEntry,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.object_keys import (
    SEGMENT_PREFIX,
    is_rollup_key,
    parse_segment_key,
    segment_key,
)
from dreamcycle.zeitgeist.signing import Signer, generate_key
from scripts.local_servers import RunningS3
from tests.daemon_helpers import (
    HEX_DECISION,
    Peer,
    documentation_chunks,
    emitted_id,
    wait_until,
    write_jsonl,
)
from tests.test_mesh_s3 import ingest_all, make_peer, mesh_settings, wait_started

pytestmark = pytest.mark.slow

CYCLE_INTERVAL: Final = "1"
METRIC: Final = "dreamcycle_entries_rejected_total"
SEAL_METRIC: Final = "dreamcycle_segments_refused_total"
TOPICS: Final = ("for", "while", "try", "with", "raise")
PINNED_TOPIC: Final = "try"
NEVER_TOPIC: Final = "with"
CHUNKS: Final = 60
#: Far above any sequence number a peer reaches here: forged keys never collide with real ones.
ATTACK_SEQ: Final = 0x00F0_0000


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def rejected_counts(port: int, metric: str = METRIC) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    pattern = rf'^{metric}{{reason="([a-z_]+)"}} ([0-9.e+]+)$'
    return {m[1]: float(m[2]) for m in re.finditer(pattern, text, re.MULTILINE)}


def memory_state(peer: Peer) -> list[tuple[Any, ...]]:
    """What a forged entry could change: every chunk's text, pin, salience and deletion."""
    return peer.query(
        "SELECT content_hash, title, topic_key, pin_floor, salience, deleted_at, cold_at "
        "FROM observations WHERE type != 'efficacy' ORDER BY content_hash"
    )


def entry_statuses(peer: Peer, entries: list[Entry]) -> dict[str, tuple[str, str]]:
    marks = ",".join("?" * len(entries))
    rows = peer.query(
        f"SELECT entry_id, status, reason FROM seen_entries WHERE entry_id IN ({marks})",
        [e.id for e in entries],
    )
    return {str(i): (str(s), str(r)) for i, s, r in rows}


def chunk_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for chunk in documentation_chunks(TOPICS, limit=CHUNKS):
        if chunk["title"] == PINNED_TOPIC:
            rows.append({**chunk, "pin_floor": 0.9})
        elif chunk["title"] == NEVER_TOPIC:
            rows.append({**chunk, "deletion_policy": "never"})
        else:
            rows.append(dict(chunk))
    return rows


def signer_of(peer: Peer) -> Signer:
    """The peer's own signing key, read from its data directory (what a thief would take)."""
    key = load_pem_private_key((peer.data_dir / SIGNING_KEY_FILE).read_bytes(), password=None)
    assert isinstance(key, Ed25519PrivateKey)
    return Signer(peer.peer_id, key)


def attacks(victim: Peer, decision: str, hlc: int, origin: str = "bob") -> list[Entry]:
    """Every change to the victim's memory an attacker might try, as entries of `origin`."""
    rows = victim.query(
        "SELECT content_hash, title, index_version FROM observations "
        "WHERE type != 'efficacy' AND deleted_at IS NULL ORDER BY rowid"
    )
    pinned = [h for h, title, _ in rows if title == PINNED_TOPIC]
    kept = [h for h, title, _ in rows if title == NEVER_TOPIC]
    ordinary = [h for h, title, _ in rows if title not in (PINNED_TOPIC, NEVER_TOPIC)]
    embeddings = victim.embeddings()
    index_version = str(rows[0][2])

    def forget(seed_hash: str, at: int) -> SalientPulse:
        return SalientPulse(
            seed_embedding=embeddings[seed_hash],
            kind=PulseKind.FORGET,
            strength=float("inf"),
            sigma=1.0,
            max_hops=0,
            k=1,
            decay_per_hop=0.0,
            ts=at,
            origin_peer=origin,
            reason="forged",
            ttl_s=3600.0,
            index_version=index_version,
            seed_hash=seed_hash,
        ).with_id()

    return [
        TombstoneEntry(
            hlc=hlc,
            origin=origin,
            content_hash=pinned[0],
            reason="forged",
            collectable_after_ms=None,
            forget_pulse=forget(pinned[0], hlc),
        ),
        TombstoneEntry(
            hlc=hlc + 1,
            origin=origin,
            content_hash=kept[0],
            reason="forged",
            collectable_after_ms=None,
            forget_pulse=None,
        ),
        SupersedeEntry(
            hlc=hlc + 2, origin=origin, old_hash=pinned[1], new_hash=ordinary[0], reason="forged"
        ),
        PulseEntry(hlc=hlc + 3, origin=origin, pulse=forget(kept[1], hlc + 3)),
        ReconsolidateEntry(
            hlc=hlc + 4,
            origin=origin,
            content_hash=pinned[2],
            changes={"title": "forged", "pin_floor": 0.0},
        ),
        OutcomeEntry(
            hlc=hlc + 5,
            origin=origin,
            decision_hash=decision,
            reward=-1.0,
            observer_peer=origin,
            reason="forged",
            cited=(ordinary[1],),
        ),
        AttributionEntry(
            hlc=hlc + 6,
            origin=origin,
            decision_hash=decision,
            chunk_hashes=(ordinary[2],),
            decision_text="forged",
        ),
        OutcomeEntry(
            hlc=hlc + 7,
            origin=origin,
            decision_hash=decision,
            reward=-1.0,
            observer_peer="alice",
            reason="forged",
        ),
    ]


def oversized_pulse(victim: Peer, hlc: int, origin: str = "bob") -> PulseEntry:
    """strength 1e308, k 255, max_hops 23: what the pulse invariants alone let through."""
    index_version = str(victim.query("SELECT index_version FROM observations LIMIT 1")[0][0])
    pulse = SalientPulse(
        seed_embedding=next(iter(victim.embeddings().values())),
        kind=PulseKind.DECAY,
        strength=1e308,
        sigma=0.3,
        max_hops=23,
        k=255,
        decay_per_hop=0.0039,
        ts=hlc,
        origin_peer=origin,
        reason="forged",
        ttl_s=3600.0,
        index_version=index_version,
    ).with_id()
    return PulseEntry(hlc=hlc, origin=origin, pulse=pulse)


def sealed_segment(signer: Signer, key: str, entries: list[Entry]) -> bytes:
    signed = [signer.sign_entry(entry) for entry in entries]
    return encode_segment(signed, seal=lambda digest: signer.seal(key, digest))


def own_segments(bucket: Any, peer_id: str) -> list[str]:
    return [
        key
        for key in bucket.list_after(SEGMENT_PREFIX, "")
        if not is_rollup_key(key) and parse_segment_key(key).peer_id == peer_id
    ]


def test_forgeries_and_wrong_authority_change_nothing(s3_server: RunningS3, tmp_path: Path) -> None:
    prefix = f"authority-{tmp_path.name}"
    settings = mesh_settings(s3_server, prefix)
    alice, bob = make_peer(tmp_path, "alice", settings), make_peer(tmp_path, "bob", settings)
    ports = {"alice": free_port(), "bob": free_port()}
    for peer in (alice, bob):
        peer.settings["DREAMCYCLE_METRICS_LISTEN"] = f"127.0.0.1:{ports[peer.peer_id]}"
    chunks = write_jsonl(tmp_path / "chunks.jsonl", chunk_rows())
    ingest_all([(alice, chunks), (bob, chunks)])
    recalled = alice.dreamcycle("recall", "how does the try statement handle exceptions")
    match = re.search(HEX_DECISION, recalled.stdout)
    assert match, recalled.stdout
    decision = match[1]
    bucket = s3_server.backend(prefix)

    with (
        alice.start("--interval", CYCLE_INTERVAL) as alice_daemon,
        bob.start("--interval", CYCLE_INTERVAL) as bob_daemon,
    ):
        daemons = [alice_daemon, bob_daemon]

        def logs() -> str:
            return "\n".join(d.log_tail() for d in daemons)

        wait_started([alice, bob], daemons)
        # Signed entries propagate between peers that trust each other.
        first = emitted_id(bob.pulse_emit("pulse", "--text", "exceptions", "--kind", "decay"))
        wait_until(
            lambda: alice.pulse_status(first) == "applied",
            what="bob's pulse applied on alice",
            context=logs,
        )
        wait_until(lambda: own_segments(bucket, "alice"), what="alice's first segment")
        cycles = alice.cycles_done()
        wait_until(lambda: alice.cycles_done() > cycles + 1, what="two quiet cycles")
        before = memory_state(alice)

        now = HybridLogicalClock(SystemClock().now_ms).now()
        bob_key, mallory = signer_of(bob), Signer("bob", generate_key())
        unsigned = [*attacks(alice, decision, now), oversized_pulse(alice, now + 50)]
        unknown = [*attacks(alice, decision, now + 100), oversized_pulse(alice, now + 150)]
        wrong_authority = attacks(alice, decision, now + 200)
        for offset, (entries, writer) in enumerate(
            [(unsigned, None), (unknown, mallory), (wrong_authority, bob_key)]
        ):
            key = segment_key(now + 300 + offset, "bob", ATTACK_SEQ + offset)
            data = (
                encode_segment(entries) if writer is None else sealed_segment(writer, key, entries)
            )
            bucket.create(key, data)
        # Under alice's own name: unsigned, signed by a stranger, and a real one copied.
        real = bucket.read(own_segments(bucket, "alice")[0])
        impostor = Signer("alice", generate_key())
        under_alice = [segment_key(now + 310 + n, "alice", ATTACK_SEQ + n) for n in range(3)]
        bucket.create(under_alice[0], encode_segment(attacks(alice, decision, now + 400, "alice")))
        bucket.create(
            under_alice[1],
            sealed_segment(impostor, under_alice[1], attacks(alice, decision, now + 500, "alice")),
        )
        bucket.create(under_alice[2], real)

        def all_recorded() -> dict[str, tuple[str, str]] | None:
            found = entry_statuses(alice, wrong_authority)
            return found if len(found) == len(wrong_authority) else None

        statuses = wait_until(all_recorded, what="alice to record every forged entry", context=logs)
        expected = ["not_operator"] * 5 + [
            "not_decision_owner",
            "not_decision_owner",
            "claims_other_peer",
        ]
        for entry, reason in zip(wrong_authority, expected, strict=True):
            status, recorded = statuses[entry.id]
            assert status == "rejected" and reason in recorded, (entry.KIND, recorded)

        def counted() -> dict[str, float] | None:
            found = rejected_counts(ports["alice"])
            sealed = rejected_counts(ports["alice"], SEAL_METRIC)
            wanted = {
                "not_operator": 5,
                "not_decision_owner": 2,
                "claims_other_peer": 1,
                "not_written_here": 3,
            }
            enough = all(found.get(r, 0) >= n for r, n in wanted.items()) and all(
                sealed.get(r, 0) >= 1 for r in ("unsigned", "unknown_key")
            )
            return {**found, **{f"seal:{r}": n for r, n in sealed.items()}} if enough else None

        alice_counts = wait_until(counted, what="alice to count every rejection", context=logs)
        assert alice_counts["not_written_here"] == 3, alice_counts
        # The unsigned segment and the stranger's were refused by their seals before a line
        # was decoded: none of their entries is recorded anywhere (a flood costs no row).
        assert entry_statuses(alice, unsigned + unknown) == {}

        def bob_counted() -> dict[str, float] | None:
            found = rejected_counts(ports["bob"], SEAL_METRIC)
            enough = all(found.get(r, 0) >= 1 for r in ("unsigned", "unknown_key", "wrong_object"))
            return found if enough else None

        wait_until(bob_counted, what="bob to count the segments under alice's name", context=logs)

        cycles = alice.cycles_done()
        wait_until(lambda: alice.cycles_done() > cycles + 1, what="two more cycles")
        assert memory_state(alice) == before
        for oversized in (unsigned[-1], unknown[-1]):
            assert isinstance(oversized, PulseEntry)
            assert alice.pulse_status(oversized.pulse.pulse_id) is None
        # Seal failures are logged once per object, not per entry or per cycle.
        assert alice_daemon.log().count("segment refused by its seal") == 2, alice_daemon.log_tail()
        # Her decision: no foreign outcome recorded, no pulse published in her name for it,
        # and the attribution is still her own.
        outcomes = alice.query(
            "SELECT outcome_id FROM outcomes WHERE decision_hash = ?", [decision]
        )
        assert outcomes == []
        pulses = alice.query("SELECT count(*) FROM outbox WHERE kind = 'salience_pulse'")
        assert pulses == [(0,)]
        owner = alice.query("SELECT peer FROM attributions WHERE decision_hash = ?", [decision])
        assert owner == [("alice",)]

        # The mesh still works: bob's next pulse reaches alice.
        second = emitted_id(bob.pulse_emit("pulse", "--text", "loops", "--kind", "reward"))
        wait_until(
            lambda: alice.pulse_status(second) == "applied",
            what="bob's second pulse applied on alice",
            context=logs,
        )
        assert np.isfinite([row[4] for row in memory_state(alice)]).all()

        # An operator's key, trusted while alice runs, may delete a pinned chunk.
        carol = Signer("carol", generate_key())
        alice.dreamcycle(
            "keys", "trust", "carol", "--public-key", carol.public_key, "--role", "operator"
        )
        # Stamped now: a key older than alice's cursor minus the window is never listed.
        later = HybridLogicalClock(SystemClock().now_ms).now()
        target = attacks(alice, decision, later, "carol")[0]
        assert isinstance(target, TombstoneEntry)
        key = segment_key(later + 10, "carol", 1)
        bucket.create(key, sealed_segment(carol, key, [target]))
        wait_until(
            lambda: entry_statuses(alice, [target]).get(target.id, ("", ""))[0] == "applied",
            what="the operator's tombstone applied on alice",
            context=logs,
        )
        deleted = alice.scalar(
            "SELECT deleted_at IS NOT NULL FROM observations WHERE content_hash = ?",
            [target.content_hash],
        )
        assert deleted == 1
        keyring = json.loads(alice.keyring_path.read_text(encoding="utf-8"))
        assert {k["peer_id"]: k["roles"] for k in keyring["keys"]}["carol"] == ["operator"]
        assert alice_daemon.terminate() == 0
        assert bob_daemon.terminate() == 0
