"""Hostile input a signed mesh still has to refuse, against two daemons on a real S3 server.

alice (the victim, adopting remote chunks, with a small budget per origin) and bob run
as separate processes and trust each other's keys. An attacker with write access to
the bucket, holding bob's key for what needs a trusted signature:

- writes five claim files for alice's next sequence numbers: alice is not fenced out,
  keeps publishing under the next free number (bob applies her pulse) and counts each
  forged claim (`forged_claim`);
- signs, as bob, an assert whose embedding is another chunk's: not adopted, counted
  (`embedding_mismatch`), while an honest assert in the same segment, titled and embedded
  with its title as every peer embeds a chunk, is adopted;
- signs, as bob, ten pulses stamped within one window of bob's time: those within the
  budget apply, the rest are refused and counted (`over_budget`);
- and the same segment carries thirty older pulses of bob's, three in each of ten
  windows, as a peer catching up after an outage reads them all at once: every one
  applies.

Then two attacks by a writer of the bucket holding no key, each against a real alice
that must keep cycling, publishing what bob applies, and never exit: 300 forged claims
at her next sequence numbers while she is stopped, and junk written at the segment key
each of her fresh claims names, by an attacker watching her claims who wins every race
(a proxy between alice and the S3 server).
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import urllib.parse
from collections import deque
from collections.abc import Callable, Iterator
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
from dreamcycle.zeitgeist.object_keys import claim_key, segment_key
from dreamcycle.zeitgeist.s3 import S3Backend
from scripts.local_servers import RunningS3
from tests.daemon_helpers import Daemon, Peer, emitted_id, wait_until, write_jsonl
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
#: Forged claims written while alice is stopped, far more than one skip used to pass.
MANY_FORGED_CLAIMS: Final = 300
#: Races on alice's claims the watching attacker wins.
JUNK_WRITES: Final = 2
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
        assert superseded == 1  # the whole run of forged claims skipped at once
        assert alice_daemon.log().count("not written here; publishing under the next") == 1

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


# ---- writers of the bucket without a key: forged claims, junk at a fresh segment key ------


class ClaimRacingProxy:
    """A loopback TCP proxy between one peer and the S3 server, standing for an attacker who
    watches `claim/<peer>/` and wins the race: when the server accepts a PUT of one of the
    peer's claims (the next `armed` of them), junk is written at the segment key that claim
    names before the answer is passed on, so the peer's create of its segment finds it."""

    def __init__(self, server: RunningS3, bucket: S3Backend, prefix: str, peer_id: str) -> None:
        endpoint = urllib.parse.urlsplit(server.endpoint_url)
        self.upstream = (endpoint.hostname or "127.0.0.1", endpoint.port or 80)
        self.bucket = bucket
        path = re.escape(f"/{server.bucket}/{prefix}/claim/{peer_id}/")
        self.claim_put = re.compile(rb"PUT " + path.encode() + rb"([0-9a-f]{8})[ ?]")
        self.peer_id = peer_id
        self.armed = 0
        self.junked: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._closed.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.upstream)
            except OSError:
                return
            # The claims PUT on this connection, answers awaited (one request at a time).
            pending: deque[str] = deque()
            threading.Thread(
                target=self._requests, args=(client, upstream, pending), daemon=True
            ).start()
            threading.Thread(
                target=self._answers, args=(upstream, client, pending), daemon=True
            ).start()

    def _requests(
        self, client: socket.socket, upstream: socket.socket, pending: deque[str]
    ) -> None:
        with contextlib.suppress(OSError):
            while data := client.recv(65536):
                for match in self.claim_put.finditer(data):
                    pending.append(f"claim/{self.peer_id}/{match[1].decode()}")
                upstream.sendall(data)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _answers(self, upstream: socket.socket, client: socket.socket, pending: deque[str]) -> None:
        held = b""
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if pending:
                    held += data
                    if b"\r\n\r\n" not in held:
                        continue
                    if not held.startswith(b"HTTP/1.1 1"):  # 100 Continue: the body follows
                        self._race(pending.popleft(), accepted=held.startswith(b"HTTP/1.1 200"))
                    data, held = held, b""
                client.sendall(data)
        with contextlib.suppress(OSError):
            client.close()
        upstream.close()

    def _race(self, claim: str, *, accepted: bool) -> None:
        with self._lock:
            if not accepted or self.armed <= 0:
                return
            self.armed -= 1
        named = self.bucket.read(claim).rsplit(b"\n", 1)[-1].decode()
        self.bucket.create(named, b"junk written by someone watching the claims")
        self.junked.append(named)


@contextlib.contextmanager
def running(peer: Peer) -> Iterator[Daemon]:
    with peer.start("--interval", CYCLE_INTERVAL) as daemon:
        daemon.wait_ready()
        yield daemon
        assert daemon.returncode() is None, daemon.log_tail()
        assert daemon.terminate() == 0, daemon.log_tail()


def emit_applied(alice: Peer, bob: Peer, text: str, logs: Callable[[], str]) -> None:
    emitted = emitted_id(alice.pulse_emit("pulse", "--text", text, "--kind", "decay"))
    wait_until(
        lambda: bob.pulse_status(emitted) == "applied",
        what=f"alice's pulse {text!r} applied on bob",
        context=logs,
    )


def cycles_later(peer: Peer, cycles: int, logs: Callable[[], str]) -> None:
    target = peer.cycles_done() + cycles
    wait_until(lambda: peer.cycles_done() >= target, what=f"{cycles} cycles", context=logs)


def prepared_segments(peer: Peer) -> int:
    return int(peer.scalar("SELECT count(*) FROM segments_out WHERE status = 'prepared'"))


def two_peers(
    s3_server: RunningS3, tmp_path: Path, prefix: str
) -> tuple[Peer, Peer, S3Backend, int]:
    """alice (metrics on the port returned) and bob on one prefix, their chunks ingested."""
    settings = mesh_settings(s3_server, prefix)
    alice, bob = make_peer(tmp_path, "alice", settings), make_peer(tmp_path, "bob", settings)
    port = free_port()
    alice.settings["DREAMCYCLE_METRICS_LISTEN"] = f"127.0.0.1:{port}"
    chunks = write_jsonl(tmp_path / "chunks.jsonl", chunk_rows())
    ingest_all([(alice, chunks), (bob, chunks)])
    return alice, bob, s3_server.backend(prefix), port


def test_hundreds_of_forged_claims_neither_fence_nor_stall_a_peer(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    alice, bob, bucket, port = two_peers(s3_server, tmp_path, f"claims-{tmp_path.name}")
    with bob.start("--interval", CYCLE_INTERVAL) as bob_daemon:
        with running(alice) as alice_daemon:
            wait_started([alice, bob], [alice_daemon, bob_daemon])
            wait_until(
                lambda: alice.scalar(
                    "SELECT count(*) FROM segments_out WHERE status = 'published'"
                ),
                what="alice's first segment",
                context=alice_daemon.log_tail,
            )
        # alice stopped: her next 300 numbers claimed, with junk or a plausible segment key.
        seq = int(alice.scalar("SELECT max(seq) FROM segments_out"))
        for n in range(1, MANY_FORGED_CLAIMS + 1):
            named = segment_key(hlc_from_ms(SystemClock().now_ms()) + n, "alice", seq + n)
            bucket.create(claim_key("alice", seq + n), b"seg/forged" if n % 2 else named.encode())

        with running(alice) as alice_daemon:

            def logs() -> str:
                return "\n".join(d.log_tail() for d in (alice_daemon, bob_daemon))

            first = emitted_id(alice.pulse_emit("pulse", "--text", "exceptions", "--kind", "decay"))
            cycles_later(alice, 1, logs)
            second = emitted_id(alice.pulse_emit("pulse", "--text", "loops", "--kind", "decay"))
            # Each published within a cycle: nothing stays prepared for later cycles.
            cycles_later(alice, 2, logs)
            assert prepared_segments(alice) == 0
            wait_until(
                lambda: all(bob.pulse_status(e) == "applied" for e in (first, second)),
                what="alice's pulses, published past the forged claims, applied on bob",
                context=logs,
            )
            counts = rejected_counts(port)
            assert counts.get("forged_claim") == MANY_FORGED_CLAIMS, counts
            assert alice_daemon.log().count("not written here; publishing under the next") == 1
        superseded = alice.scalar("SELECT count(*) FROM segments_out WHERE status = 'superseded'")
        assert superseded == 1
        # Every start after: her own claim is now above the forged ones.
        with running(alice) as alice_daemon:
            emit_applied(alice, bob, "context managers", alice_daemon.log_tail)
        assert bob_daemon.returncode() is None, bob_daemon.log_tail()
        assert bob_daemon.terminate() == 0


def test_junk_at_a_peers_fresh_segment_keys_neither_fences_nor_stops_it(
    s3_server: RunningS3, tmp_path: Path
) -> None:
    prefix = f"junk-{tmp_path.name}"
    alice, bob, bucket, port = two_peers(s3_server, tmp_path, prefix)
    proxy = ClaimRacingProxy(s3_server, bucket, prefix, "alice")
    alice.settings["DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL"] = proxy.url
    try:
        with bob.start("--interval", CYCLE_INTERVAL) as bob_daemon:
            with running(alice) as alice_daemon:

                def logs() -> str:
                    return "\n".join(d.log_tail() for d in (alice_daemon, bob_daemon))

                wait_started([alice, bob], [alice_daemon, bob_daemon])
                proxy.armed = JUNK_WRITES
                emit_applied(alice, bob, "exceptions", logs)
                assert len(proxy.junked) == JUNK_WRITES
                cycles_later(alice, 2, logs)
                assert prepared_segments(alice) == 0
                counts = rejected_counts(port)
                assert counts.get("not_written_here") == JUNK_WRITES, counts
                skips = alice_daemon.log().count("segment key not written here")
                assert skips == JUNK_WRITES  # one line each
            # Every start after, the junk still there: alice goes on, bob reads past it.
            with running(alice) as alice_daemon:
                emit_applied(alice, bob, "loops", alice_daemon.log_tail)
            assert bob_daemon.returncode() is None, bob_daemon.log_tail()
            assert bob_daemon.terminate() == 0
    finally:
        proxy.close()
    assert all(key in bucket.list_after("seg/", "") for key in proxy.junked)
