"""Writes to the log by someone who can write the bucket but holds no trusted key.

Two attacks must never fence, stall or stop a peer that signs, in strict or permissive
mode:

- forged claims at the peer's next sequence numbers, any number of them (junk, an
  unsealed segment key, a key sealed by a stranger): the writer skips the whole run at
  once, with one listing, and the daemon publishes within the cycle under the first free
  number, counting every forged claim (`forged_claim`) and logging one line;
- junk written at the segment key a fresh claim names (an attacker watching
  `claim/<peer>/`): the writer sees no seal of this peer on it, and the daemon prepares
  the entries again under a new number and key, counting it (`not_written_here`) and
  logging it once. Readers refuse the junk and read on.

A claim or segment sealed by this peer's own key is still a fence. Directory backend,
real keys, the real log layer and the daemon's real cycle in-process.
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import SIGNING_KEYRING_FILE
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import init_key
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import (
    SEGMENT_LIMITS,
    CorruptSegment,
    SegmentLimits,
    TombstoneEntry,
    encode_entry,
    encode_segment,
    payload_digest,
)
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.log import ClaimTaken, FencedOut, Zeitgeist
from dreamcycle.zeitgeist.object_keys import SEGMENT_PREFIX, claim_key, claim_prefix, segment_key
from dreamcycle.zeitgeist.signing import Keyring, Rejection, Signer, Verifier, generate_key
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import entry_status, open_peer
from tests.test_zeitgeist_codec import BASE_MS, one_of_each_kind
from tests.test_zeitgeist_log import CountingBackend, ManualClock, make_zeitgeist

FORGED: Final = 300
#: A segment limit small enough to write junk beyond it in a test.
LIMITS: Final = SegmentLimits(
    compressed_bytes=256 * 1024,
    expanded_bytes=SEGMENT_LIMITS.expanded_bytes,
    lines=SEGMENT_LIMITS.lines,
)
REJECTED_METRIC: Final = "dreamcycle_entries_rejected_total"


def signed_log(
    backend: CountingBackend | DirectoryBackend,
    signer: Signer,
    keyring: Keyring,
    *,
    strict: bool = True,
    wall: ManualClock | None = None,
) -> Zeitgeist:
    verifier = Verifier(keyring, strict=strict)
    return make_zeitgeist(
        backend,
        signer.peer_id,
        wall or ManualClock(BASE_MS),
        signer=signer,
        verifier=verifier,
        segment_limits=LIMITS,
    )


def sealed_claim(signer: Signer, claim: str, named: str) -> bytes:
    seal = signer.seal(claim, payload_digest(named.encode()))
    return seal.wire_bytes() + b"\n" + named.encode()


def forge_claims(backend: DirectoryBackend, peer_id: str, seqs: range) -> None:
    """Claims at `seqs` that no key of `peer_id` sealed: junk, an unsealed segment key (the
    format of a peer without a key), and a segment key sealed by a stranger's key."""
    stranger = Signer(peer_id, generate_key())
    for seq in seqs:
        claim = claim_key(peer_id, seq)
        named = segment_key(hlc_from_ms(BASE_MS + seq), peer_id, seq)
        body = (b"junk %d" % seq, named.encode(), sealed_claim(stranger, claim, named))[seq % 3]
        backend.create(claim, body)


class ClaimWatcher(CountingBackend):
    """An attacker who watches `claim/<peer>/` and, as soon as a claim is created, writes
    junk at the segment key it names (the next `times` claims), before the peer can."""

    def __init__(self, inner: DirectoryBackend, peer_id: str, junk: Callable[[str], bytes]):
        super().__init__(inner, on_create=self._watch)
        self.prefix = claim_prefix(peer_id)
        self.junk = junk
        self.times = 0
        self.junked: list[str] = []

    def _watch(self, key: str) -> None:
        if not key.startswith(self.prefix) or self.times <= 0:
            return
        self.times -= 1
        named = self.inner.read(key).rsplit(b"\n", 1)[-1].decode()
        self.inner.create(named, self.junk(named))
        self.junked.append(named)


# ---- forged claims ------------------------------------------------------------------------


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "permissive"])
def test_any_number_of_forged_claims_is_skipped_at_once(tmp_path: Path, strict: bool) -> None:
    directory = DirectoryBackend(tmp_path / "log")
    alice = Signer("alice", generate_key())
    keyring = Keyring.of([alice.trusted_key()])
    first = signed_log(directory, alice, keyring, strict=strict)
    for seq in (1, 2):
        first.publish(first.prepare(one_of_each_kind("alice", BASE_MS + seq), seq))
    # The peer is stopped; its next numbers are claimed, and one far ahead, at the very top.
    forge_claims(directory, "alice", range(3, 3 + FORGED))
    forge_claims(directory, "alice", range(0xFFFF_FFFF, 0xFFFF_FFFF + 1))

    backend = CountingBackend(directory)
    restarted = signed_log(backend, alice, keyring, strict=strict)
    with pytest.raises(ClaimTaken) as taken:
        restarted.publish(restarted.prepare(one_of_each_kind("alice", BASE_MS + 3), 3))
    assert (taken.value.seq, taken.value.skipped) == (3, FORGED)
    assert taken.value.next_seq == 3 + FORGED  # the first number no claim takes
    assert taken.value.verdict.reason == Rejection.UNSIGNED
    assert restarted.counters["claim_forged"] == FORGED
    # Bounded: the listing at the first publish, one of the claims above seq 3, and at most
    # 64 claims read for each, beside the claim of seq 3 itself.
    assert backend.calls["list_after"] == 2
    assert backend.calls["read"] <= 1 + 2 * 64

    published = restarted.publish(
        restarted.prepare(one_of_each_kind("alice", BASE_MS + 4), taken.value.next_seq)
    )
    assert directory.read(published.key)
    # Every start after: its own claim is now the highest, and the peer goes on.
    again = signed_log(directory, alice, keyring, strict=strict)
    seq = taken.value.next_seq + 1
    assert again.publish(again.prepare(one_of_each_kind("alice", BASE_MS + 5), seq)).key
    # A reader takes the segments published past the forged claims.
    reader = signed_log(directory, Signer("bob", generate_key()), keyring, strict=True)
    keys = reader.poll(0, lambda key: False)
    assert published.key in keys
    assert reader.seal_problem(published.key, reader.fetch(published.key)) is None


def test_a_second_process_ahead_among_forged_claims_is_still_a_fence(tmp_path: Path) -> None:
    """Skipping a run of claims reads its highest ones: one sealed by this peer's key is a
    second process under this peer's id, ahead of this one, not a forgery."""
    directory = DirectoryBackend(tmp_path / "log")
    alice = Signer("alice", generate_key())
    keyring = Keyring.of([alice.trusted_key()])
    log = signed_log(directory, alice, keyring)
    log.publish(log.prepare(one_of_each_kind("alice", BASE_MS), 1))
    # Then: forged claims, a second process with alice's key claiming seq 11, more forgeries.
    forge_claims(directory, "alice", range(2, 11))
    twin = signed_log(directory, alice, keyring)
    twin_segment = twin.prepare(one_of_each_kind("alice", BASE_MS + 11), 11)
    claim = claim_key("alice", 11)
    directory.create(claim, sealed_claim(alice, claim, twin_segment.key))
    forge_claims(directory, "alice", range(12, 20))

    with pytest.raises(FencedOut, match=r"claim for seq 11 .* sealed by this peer's key"):
        log.publish(log.prepare(one_of_each_kind("alice", BASE_MS + 2), 2))


# ---- junk at the segment key a claim names ------------------------------------------------


def _other_entries(key: str) -> list[TombstoneEntry]:
    return [
        TombstoneEntry(
            hlc=hlc_from_ms(BASE_MS),
            origin="alice",
            content_hash="ab" * 32,
            reason=f"written at {key}",
            collectable_after_ms=None,
            forget_pulse=None,
        )
    ]


def _stranger_sealed(key: str) -> bytes:
    stranger = Signer("alice", generate_key())
    signed = [stranger.sign_entry(e) for e in _other_entries(key)]
    return encode_segment(signed, seal=lambda digest: stranger.seal(key, digest))


def _copied(alice: Signer) -> Callable[[str], bytes]:
    """A real segment of alice's, sealed for another key, copied to this one."""

    def copy(key: str) -> bytes:
        elsewhere = segment_key(hlc_from_ms(BASE_MS - 1), "alice", 0)
        signed = [alice.sign_entry(e) for e in _other_entries(key)]
        return encode_segment(signed, seal=lambda digest: alice.seal(elsewhere, digest))

    return copy


JUNK: Final[dict[str, tuple[Callable[[Signer], Callable[[str], bytes]], Rejection]]] = {
    "not a segment": (lambda _: lambda key: b"junk", Rejection.UNSIGNED),
    "unsealed": (
        lambda _: lambda key: encode_segment(_other_entries(key)),
        Rejection.UNSIGNED,
    ),
    "sealed by a stranger": (lambda _: _stranger_sealed, Rejection.UNKNOWN_KEY),
    "this peer's segment copied": (_copied, Rejection.WRONG_OBJECT),
    "beyond the segment limit": (
        lambda _: lambda key: gzip.compress(b"x" * 10, mtime=0) + b"\0" * LIMITS.compressed_bytes,
        Rejection.UNSIGNED,
    ),
}


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "permissive"])
@pytest.mark.parametrize("kind", list(JUNK))
def test_junk_at_the_segment_key_a_claim_names_is_skipped(
    tmp_path: Path, kind: str, strict: bool
) -> None:
    directory = DirectoryBackend(tmp_path / "log")
    alice, bob = Signer("alice", generate_key()), Signer("bob", generate_key())
    keyring = Keyring.of([alice.trusted_key(), bob.trusted_key()])
    make_junk, reason = JUNK[kind]
    watcher = ClaimWatcher(directory, "alice", make_junk(alice))
    log = signed_log(watcher, alice, keyring, strict=strict)
    log.publish(log.prepare(one_of_each_kind("alice", BASE_MS), 1))

    watcher.times = 1
    entries = one_of_each_kind("alice", BASE_MS + 1)
    prepared = log.prepare(entries, 2)
    with pytest.raises(ClaimTaken) as taken:
        log.publish(prepared)
    assert watcher.junked == [prepared.key]
    assert taken.value.junk_segment == prepared.key
    assert (taken.value.seq, taken.value.next_seq) == (2, 3)
    assert taken.value.verdict.reason == reason
    assert log.counters["segment_not_written_here"] == 1
    assert directory.read(claim_key("alice", 2))  # this peer's claim stays

    again = log.prepare(entries, taken.value.next_seq)
    assert log.publish(again).key == again.key
    assert log.publish(again).key == again.key  # a retry is still fine
    restarted = signed_log(directory, alice, keyring, strict=strict)
    assert restarted.publish(restarted.prepare(entries, 4)).key

    # A reader refuses the junk (unreadable, or not sealed by alice for its key) and reads on.
    reader = signed_log(directory, bob, keyring, strict=True)
    listed = reader.poll(0, lambda key: False)
    assert prepared.key in listed and again.key in listed
    try:
        decoded = reader.fetch(prepared.key)
    except CorruptSegment:
        pass
    else:
        assert reader.seal_problem(prepared.key, decoded) is not None
    real = reader.fetch(again.key)
    assert reader.seal_problem(again.key, real) is None
    assert {e.id for e in real.entries} == {e.id for e in entries}


def test_only_a_segment_sealed_by_this_peers_key_is_a_fence(tmp_path: Path) -> None:
    directory = DirectoryBackend(tmp_path / "log")
    alice = Signer("alice", generate_key())
    keyring = Keyring.of([alice.trusted_key()])

    def sealed_by_alice(key: str) -> bytes:
        signed = [alice.sign_entry(e) for e in _other_entries(key)]
        return encode_segment(signed, seal=lambda digest: alice.seal(key, digest))

    junk_then_twin: list[Callable[[str], bytes]] = [lambda key: b"junk", sealed_by_alice]
    watcher = ClaimWatcher(directory, "alice", lambda key: junk_then_twin.pop(0)(key))
    log = signed_log(watcher, alice, keyring)
    watcher.times = 2
    with pytest.raises(ClaimTaken) as taken:
        log.publish(log.prepare(one_of_each_kind("alice", BASE_MS), 1))
    # Another segment sealed by alice's own key for that very key: a second process.
    with pytest.raises(FencedOut, match="exists with different content"):
        log.publish(log.prepare(one_of_each_kind("alice", BASE_MS), taken.value.next_seq))


# ---- the daemon's cycle -------------------------------------------------------------------


@pytest.fixture
def signed_peer_dir(tmp_path: Path) -> Path:
    """Peer a's data directory, with a signing key."""
    init_key(
        load_config(environ={}, overrides={"peer.id": "a", "peer.data_dir": str(tmp_path / "a")})
    )
    return tmp_path / "a"


@pytest.fixture
def reopen(tmp_path: Path, signed_peer_dir: Path) -> Iterator[Callable[[], Peer]]:
    """Open peer a (a restart closes the one open before)."""
    opened: list[Peer] = []

    def restart() -> Peer:
        while opened:
            old = opened.pop()
            old.close()
            old.runtime.close()
        opened.append(open_peer(tmp_path))
        return opened[0]

    yield restart
    for peer in opened:
        peer.close()
        peer.runtime.close()


def queue_entry(peer: Peer, n: int) -> TombstoneEntry:
    """An entry of this peer's own, queued for publishing as `pulse-emit` queues one."""
    entry = TombstoneEntry(
        hlc=hlc_from_ms(peer.now_ms()) + n,
        origin=peer.peer_id,
        content_hash=f"{n:064x}",
        reason=f"entry {n}",
        collectable_after_ms=None,
        forget_pulse=None,
    )
    with peer.db.transaction():
        peer.db.outbox_add(
            entry.id, entry.KIND, entry.hlc, encode_entry(entry), now_ms=peer.now_ms(), applied=True
        )
    return entry


def segments(peer: Peer) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for seq, status in peer.db.conn.execute("SELECT seq, status FROM segments_out ORDER BY seq"):
        found.setdefault(str(status), []).append(int(seq))
    return found


def rejections(reason: str) -> float:
    return metrics.REGISTRY.get_sample_value(REJECTED_METRIC, {"reason": reason}) or 0.0


def skip_lines(caplog: pytest.LogCaptureFixture, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if what in r.getMessage()]


def test_a_daemon_publishes_past_hundreds_of_forged_claims_within_a_cycle(
    tmp_path: Path, reopen: Callable[[], Peer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dreamcycle.cycle")
    peer = reopen()
    queue_entry(peer, 1)
    run_cycle_blocking(peer)
    assert segments(peer) == {"published": [1]}
    # Stopped (reopened below), its next 300 numbers claimed by someone without its key.
    forge_claims(DirectoryBackend(tmp_path / "zeitgeist"), "a", range(2, 2 + FORGED))
    before = rejections("forged_claim")

    peer = reopen()
    queue_entry(peer, 2)
    run_cycle_blocking(peer)  # a FencedOut would raise FatalCycleError here
    assert segments(peer) == {"published": [1, 2 + FORGED], "superseded": [2]}
    assert rejections("forged_claim") - before == FORGED
    assert len(skip_lines(caplog, "claim under this peer's name not written here")) == 1
    # A cycle later, and at every start after: the peer goes on publishing.
    queue_entry(peer, 3)
    run_cycle_blocking(peer)
    peer = reopen()
    queue_entry(peer, 4)
    run_cycle_blocking(peer)
    assert segments(peer) == {"published": [1, 302, 303, 304], "superseded": [2]}
    assert len(skip_lines(caplog, "claim under this peer's name not written here")) == 1


def test_a_daemon_skips_junk_at_its_segment_key_and_a_reader_reads_on(
    tmp_path: Path, reopen: Callable[[], Peer], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="dreamcycle.cycle")
    peer = reopen()
    queue_entry(peer, 1)
    run_cycle_blocking(peer)
    directory = DirectoryBackend(tmp_path / "zeitgeist")
    watcher = ClaimWatcher(directory, "a", lambda key: encode_segment(_other_entries(key)))
    real_backend = peer.zeitgeist.backend
    peer.zeitgeist.backend = watcher  # the attacker wins the race after each claim
    before = rejections(Rejection.NOT_WRITTEN_HERE)

    watcher.times = 1
    entry = queue_entry(peer, 2)
    run_cycle_blocking(peer)  # a FencedOut would raise FatalCycleError here
    assert segments(peer) == {"published": [1, 3], "superseded": [2]}
    assert rejections(Rejection.NOT_WRITTEN_HERE) - before == 1
    assert len(skip_lines(caplog, "segment key not written here")) == 1
    peer.zeitgeist.backend = real_backend
    peer = reopen()  # the junk stays; every start after goes on
    queue_entry(peer, 3)
    run_cycle_blocking(peer)
    assert segments(peer) == {"published": [1, 3, 4], "superseded": [2]}

    # Peer b, trusting a's key, reads past the junk and applies a's entry.
    b_settings = {"peer.id": "b", "peer.data_dir": str(tmp_path / "b")}
    init_key(load_config(environ={}, overrides=b_settings))
    a_signer = peer.zeitgeist.signer
    assert a_signer is not None
    trust_key(tmp_path / "b" / SIGNING_KEYRING_FILE, a_signer)
    b = open_peer(tmp_path, **b_settings)
    try:
        run_cycle_blocking(b)
        assert entry_status(b, entry)[0] == "applied"
        junk = watcher.junked[0]
        assert junk in directory.list_after(SEGMENT_PREFIX, "")
        assert b.db.segment_applied(junk)  # recorded as read (refused), not waited for
    finally:
        b.close()
        b.runtime.close()
