"""Claims under a signing peer's name: only a claim sealed by one of its own keys fences it.

Directory backend, real keys. A forged claim (unsealed, sealed by a stranger, or by
another trusted peer) raises ClaimTaken, which the daemon answers by preparing the
segment again under the next sequence number; a second process holding the same key
still collides and is fenced out, and a claim this peer sealed with a key it has since
rotated away from still counts as its own.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import payload_digest
from dreamcycle.zeitgeist.log import ClaimTaken, FencedOut, Zeitgeist
from dreamcycle.zeitgeist.object_keys import claim_key, segment_key
from dreamcycle.zeitgeist.signing import Keyring, Rejection, Signer, Verifier, generate_key
from tests.test_zeitgeist_codec import BASE_MS, one_of_each_kind
from tests.test_zeitgeist_log import ManualClock, make_zeitgeist


def signed_log(backend: DirectoryBackend, signer: Signer, keyring: Keyring) -> Zeitgeist:
    verifier = Verifier(keyring, strict=True)
    return make_zeitgeist(
        backend, signer.peer_id, ManualClock(BASE_MS), signer=signer, verifier=verifier
    )


def sealed_claim(signer: Signer, claim: str, named: str) -> bytes:
    seal = signer.seal(claim, payload_digest(named.encode()))
    return seal.wire_bytes() + b"\n" + named.encode()


def test_forged_claims_are_not_fences_but_the_same_key_is(tmp_path: Path) -> None:
    backend = DirectoryBackend(tmp_path / "log")
    alice, bob, stranger = (Signer(p, generate_key()) for p in ("alice", "bob", "alice"))
    keyring = Keyring.of([alice.trusted_key(), bob.trusted_key()])
    log = signed_log(backend, alice, keyring)
    forged_key = segment_key(BASE_MS << 16, "alice", 9)
    forgeries = {
        0: forged_key.encode(),  # the unsealed format of a peer without a key
        1: sealed_claim(stranger, claim_key("alice", 1), forged_key),
        2: sealed_claim(bob, claim_key("alice", 2), forged_key),
        3: sealed_claim(alice, claim_key("alice", 0), forged_key),  # alice's seal, moved
        4: b"\xff\xfe not even text",
    }
    for seq, body in forgeries.items():
        backend.create(claim_key("alice", seq), body)
    reasons = []
    for seq in forgeries:
        with pytest.raises(ClaimTaken) as taken:
            log.publish(log.prepare(one_of_each_kind("alice"), seq))
        assert taken.value.seq == seq
        reasons.append(taken.value.verdict.reason)
    assert reasons == [
        Rejection.UNSIGNED,
        Rejection.UNKNOWN_KEY,
        Rejection.SIGNER_NOT_ORIGIN,
        Rejection.WRONG_OBJECT,
        Rejection.UNSIGNED,
    ]
    published = log.publish(log.prepare(one_of_each_kind("alice"), len(forgeries)))
    assert backend.read(published.key)
    # A retry of the same prepared segment (a crash after the claim) is still ours.
    prepared = log.prepare(one_of_each_kind("alice", BASE_MS + 5), len(forgeries) + 1)
    log.publish(prepared)
    log.publish(prepared)

    # A second process with alice's key claims the same sequence number: a real fence.
    twin = signed_log(backend, alice, keyring)
    with pytest.raises(FencedOut, match="another process is publishing as peer alice"):
        twin.publish(twin.prepare(one_of_each_kind("alice", BASE_MS + 9), len(forgeries)))

    # alice rotated her key (both trusted) and retries a segment claimed under the old one.
    rotated = Signer("alice", generate_key())
    both = keyring.with_key(rotated.trusted_key())
    waiting = log.prepare(one_of_each_kind("alice", BASE_MS + 20), len(forgeries) + 2)
    backend.create(
        claim_key("alice", waiting.seq),
        sealed_claim(alice, claim_key("alice", waiting.seq), waiting.key),
    )
    restarted = signed_log(backend, rotated, both)
    assert restarted.publish(waiting).key == waiting.key


def test_a_forged_claim_far_ahead_does_not_fence_the_peer(tmp_path: Path) -> None:
    """The high-water mark that fences a second process counts this peer's sealed claims
    only: a forgery at seq 1000 neither stops the peer nor lets a twin below it through."""
    backend = DirectoryBackend(tmp_path / "log")
    alice, stranger = Signer("alice", generate_key()), Signer("alice", generate_key())
    keyring = Keyring.of([alice.trusted_key()])
    first = signed_log(backend, alice, keyring)
    first.publish(first.prepare(one_of_each_kind("alice"), 0))
    first.publish(first.prepare(one_of_each_kind("alice", BASE_MS + 1), 1))
    far = segment_key((BASE_MS + 2) << 16, "alice", 1000)
    backend.create(claim_key("alice", 1000), sealed_claim(stranger, claim_key("alice", 1000), far))
    restarted = signed_log(backend, alice, keyring)
    assert restarted.publish(restarted.prepare(one_of_each_kind("alice", BASE_MS + 3), 2)).key
    twin = signed_log(backend, alice, keyring)
    with pytest.raises(FencedOut, match="seq 2 is claimed under this peer's key"):
        twin.publish(twin.prepare(one_of_each_kind("alice", BASE_MS + 4), 1))
