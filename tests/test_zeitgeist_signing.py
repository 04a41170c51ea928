"""Signatures on entries, seals on segments, and the keyring's verdicts; the key and
keyring files and `dreamcycle keys`."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.signing_keys import (
    KeyExists,
    KeyUnavailable,
    check_can_run,
    init_key,
    open_keys,
    read_keyring,
    read_signer,
)
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.directory import DirectoryBackend
from dreamcycle.zeitgeist.entries import (
    FORMAT_VERSION,
    SIGNED_VERSION,
    Entry,
    PulseEntry,
    TombstoneEntry,
    decode_entry,
    decode_segment,
    encode_entry,
    encode_segment,
)
from dreamcycle.zeitgeist.hlc import hlc_from_ms
from dreamcycle.zeitgeist.log import Heartbeat
from dreamcycle.zeitgeist.object_keys import heartbeat_key
from dreamcycle.zeitgeist.signing import (
    InvalidKeyring,
    Keyring,
    Rejection,
    Signer,
    TrustedKey,
    Verifier,
    generate_key,
)
from dreamcycle.zeitgeist.snapshot import fold_entries
from tests.daemon_helpers import BASE_SETTINGS, DREAMCYCLE

T0_MS = 1_700_000_000_000
HASH = "ab" * 32


def signer(peer_id: str) -> Signer:
    return Signer(peer_id, generate_key())


def tombstone(origin: str = "alice", at_ms: int = T0_MS) -> TombstoneEntry:
    return TombstoneEntry(
        hlc=hlc_from_ms(at_ms),
        origin=origin,
        content_hash=HASH,
        reason="wrong",
        collectable_after_ms=None,
        forget_pulse=None,
    )


def pulse_entry(origin: str = "alice", at_ms: int = T0_MS) -> PulseEntry:
    pulse = SalientPulse(
        seed_embedding=np.full(4, 0.5, dtype=np.float32),
        kind=PulseKind.REWARD,
        strength=0.3,
        sigma=0.3,
        max_hops=2,
        k=3,
        decay_per_hop=0.3,
        ts=hlc_from_ms(at_ms),
        origin_peer=origin,
        reason="test",
        ttl_s=3600.0,
        index_version="v",
    ).with_id()
    return PulseEntry(hlc=pulse.ts, origin=origin, pulse=pulse)


def verdict_reason(verifier: Verifier, entry: Any) -> str | None:
    verdict = verifier.check_entry(entry)
    return None if verdict is None else verdict.reason.value


# ---- entries ------------------------------------------------------------------------------


def test_signing_keeps_the_id_and_round_trips_as_version_2() -> None:
    alice = signer("alice")
    for entry in (tombstone(), pulse_entry()):
        signed = alice.sign_entry(entry)
        assert signed.id == entry.id  # ids (and pulse ids) stay content hashes
        wire = encode_entry(signed)
        assert wire["v"] == SIGNED_VERSION and wire["key_id"] == alice.key_id
        assert encode_entry(entry)["v"] == FORMAT_VERSION and "sig" not in encode_entry(entry)
        again = decode_entry(json.loads(json.dumps(wire)))
        assert again == signed and again.sig == signed.sig
        # The signature covers the line without "sig": the same bytes every time.
        assert json.loads(signed.signing_bytes(alice.key_id)) == {
            k: v for k, v in wire.items() if k != "sig"
        }


def test_a_signer_signs_only_its_own_entries() -> None:
    entry = tombstone(origin="bob")
    assert signer("alice").sign_entry(entry) is entry


def test_verdicts_for_every_kind_of_forgery() -> None:
    alice, bob, mallory = signer("alice"), signer("bob"), signer("alice")
    ring = Keyring.of([alice.trusted_key(), bob.trusted_key()])
    strict = Verifier(ring, strict=True)
    good = alice.sign_entry(tombstone())
    assert strict.check_entry(good) is None
    assert verdict_reason(strict, tombstone()) == Rejection.UNSIGNED
    # Signed by a key that says it is alice's but is not in the keyring.
    assert verdict_reason(strict, mallory.sign_entry(tombstone())) == Rejection.UNKNOWN_KEY
    # A trusted key signing for another origin.
    as_bob = bob.sign_entry(tombstone(origin="bob"))
    claimed = replace(tombstone(origin="alice"), key_id=as_bob.key_id, sig=as_bob.sig)
    assert verdict_reason(strict, claimed) == Rejection.SIGNER_NOT_ORIGIN
    # Content changed after signing: same key, signature no longer matches.
    tampered = replace(good, reason="rewritten")
    assert verdict_reason(strict, tampered) == Rejection.BAD_SIGNATURE
    revoked = Verifier(ring.revoke(alice.key_id), strict=True)
    assert verdict_reason(revoked, good) == Rejection.REVOKED_KEY


def test_permissive_accepts_unsigned_and_unknown_but_not_bad_signatures() -> None:
    alice = signer("alice")
    permissive = Verifier(Keyring.of([alice.trusted_key()]), strict=False)
    assert permissive.check_entry(tombstone()) is None
    assert permissive.check_entry(signer("alice").sign_entry(tombstone())) is None
    tampered = replace(alice.sign_entry(tombstone()), reason="rewritten")
    assert verdict_reason(permissive, tampered) == Rejection.BAD_SIGNATURE


def test_rotation_two_valid_keys_and_validity_at_the_entrys_time() -> None:
    old, new = signer("alice"), signer("alice")
    switch_ms = T0_MS + 60_000
    ring = Keyring.of(
        [
            replace(old.trusted_key(), not_after_ms=switch_ms),
            replace(new.trusted_key(), not_before_ms=T0_MS),
        ]
    )
    verifier = Verifier(ring, strict=True)
    # Both keys valid during the overlap: no gap while the peer switches.
    assert verifier.check_entry(old.sign_entry(tombstone(at_ms=T0_MS + 1))) is None
    assert verifier.check_entry(new.sign_entry(tombstone(at_ms=T0_MS + 1))) is None
    # What the old key signed before its end still verifies; after it, not.
    late = old.sign_entry(tombstone(at_ms=switch_ms + 1))
    assert verdict_reason(verifier, late) == Rejection.KEY_EXPIRED
    early = new.sign_entry(tombstone(at_ms=T0_MS - 1))
    assert verdict_reason(verifier, early) == Rejection.KEY_NOT_YET_VALID


# ---- segments and snapshots ------------------------------------------------------------------


def test_segment_seal_covers_object_key_and_lines() -> None:
    alice = signer("alice")
    verifier = Verifier(Keyring.of([alice.trusted_key()]), strict=True)
    key = "seg/0000000000000001-alice-00000001.ndjson.gz"
    entries: list[Entry] = [alice.sign_entry(tombstone()), alice.sign_entry(pulse_entry())]
    data = encode_segment(entries, seal=lambda digest: alice.seal(key, digest))
    decoded = decode_segment(data)
    assert decoded.entries == entries and decoded.rejected == [] and not decoded.skipped
    assert decoded.seal is not None and decoded.seal.key_id == alice.key_id
    assert verifier.check_seal(decoded.seal, key, "alice", decoded.body_digest, T0_MS) is None
    # The same object under another key, or claimed by another writer.
    other = key.replace("00000001.ndjson", "00000002.ndjson")
    wrong = verifier.check_seal(decoded.seal, other, "alice", decoded.body_digest, T0_MS)
    assert wrong is not None and wrong.reason is Rejection.WRONG_OBJECT
    foreign = verifier.check_seal(decoded.seal, key, "bob", decoded.body_digest, T0_MS)
    assert foreign is not None and foreign.reason is Rejection.SIGNER_NOT_ORIGIN
    # A line dropped after sealing.
    trimmed = decode_segment(
        encode_segment(entries[:1], seal=lambda _digest: decoded.seal)  # type: ignore[arg-type, return-value]
    )
    changed = verifier.check_seal(trimmed.seal, key, "alice", trimmed.body_digest, T0_MS)
    assert changed is not None and changed.reason is Rejection.DIGEST_MISMATCH
    unsealed = decode_segment(encode_segment(entries))
    missing = verifier.check_seal(unsealed.seal, key, "alice", unsealed.body_digest, T0_MS)
    assert missing is not None and missing.reason is Rejection.UNSIGNED


def test_an_older_reader_skips_signed_lines_and_seals_as_a_newer_version() -> None:
    alice = signer("alice")
    mixed: list[Entry] = [alice.sign_entry(tombstone()), tombstone(origin="bob")]
    data = encode_segment(
        mixed,
        seal=lambda digest: alice.seal("seg/x", digest),
    )
    lines = [json.loads(line) for line in __import__("gzip").decompress(data).splitlines()]
    assert [line["v"] for line in lines] == [SIGNED_VERSION, SIGNED_VERSION, FORMAT_VERSION]


def test_folding_keeps_signed_tombstones_whole() -> None:
    alice = signer("alice")
    forget = replace(
        pulse_entry().pulse, kind=PulseKind.FORGET, seed_hash=HASH, ttl_s=1.0
    ).with_id()
    signed = alice.sign_entry(replace(tombstone(), forget_pulse=forget))
    fold = fold_entries([signed], [], now_ms=T0_MS + 3_600_000)
    assert fold.entries == [signed] and fold.forget_pulses_stripped == 0
    verifier = Verifier(Keyring.of([alice.trusted_key()]), strict=True)
    assert verifier.check_entry(fold.entries[0]) is None


# ---- the keyring -----------------------------------------------------------------------------


def test_keyring_round_trips_and_refuses_bad_keys() -> None:
    alice = signer("alice")
    key = replace(alice.trusted_key(roles=("peer", "operator")), not_after_ms=T0_MS)
    ring = Keyring.of([key])
    assert Keyring.from_json(json.loads(json.dumps(ring.to_json()))) == ring
    wire = key.to_json()
    problems = {
        "key id": {**wire, "key_id": "0" * 16},
        "32": {**wire, "public_key": "AAAA"},
        "roles": {**wire, "roles": ["root"]},
        "unknown field": {**wire, "colour": "red"},
        "not_after_ms": {**wire, "not_after_ms": -1},
        "peer id": {**wire, "peer_id": "a/b"},
    }
    for expected, bad in problems.items():
        with pytest.raises(InvalidKeyring, match=expected):
            TrustedKey.from_json(bad)
    with pytest.raises(InvalidKeyring, match="twice"):
        Keyring.of([key, key])
    with pytest.raises(InvalidKeyring, match="version"):
        Keyring.from_json({"keys": []})


# ---- files and the CLI ---------------------------------------------------------------------


def config_for(tmp_path: Path, **settings: str) -> Config:
    overrides = {"peer.data_dir": str(tmp_path / "data"), "peer.id": "alice", **settings}
    return load_config(environ={}, overrides=overrides)


def test_key_file_is_0600_never_overwritten_and_refused_when_readable(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    with pytest.raises(KeyUnavailable, match="keys init"):
        check_can_run(config)
    created, _ = init_key(config)
    assert os.stat(config.key_path).st_mode & 0o777 == 0o600
    loaded = read_signer(config)
    assert loaded is not None and loaded.key_id == created.key_id
    with pytest.raises(KeyExists):
        init_key(config)
    rotated, retired = init_key(config, rotate=True)
    assert retired is not None and retired.exists() and rotated.key_id != created.key_id
    os.chmod(config.key_path, 0o640)
    with pytest.raises(KeyUnavailable, match="0640"):
        read_signer(config)


def test_own_key_verifies_without_being_listed(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    own, _ = init_key(config)
    signer_read, verifier = open_keys(config)
    assert signer_read is not None and read_keyring(config.keyring_path).keys == {}
    assert verifier.check_entry(own.sign_entry(tombstone())) is None
    assert verifier.strict


def test_permissive_mode_warns_at_start(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    check_can_run(config_for(tmp_path, **{"signing.mode": "permissive"}))
    assert any(r.levelname == "WARNING" and "permissive" in r.getMessage() for r in caplog.records)


def keys_cli(tmp_path: Path, peer: str, *args: str, expect: int = 0) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    env.update(BASE_SETTINGS)
    result = subprocess.run(
        [DREAMCYCLE, "keys", *args, "--data-dir", str(tmp_path / peer), "--peer-id", peer],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == expect, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_keys_cli_init_show_trust_revoke_list(tmp_path: Path) -> None:
    keys_cli(tmp_path, "alice", "show", expect=3)
    assert "public key" in keys_cli(tmp_path, "alice", "init")
    keys_cli(tmp_path, "alice", "init", expect=3)
    shown = json.loads(keys_cli(tmp_path, "alice", "show", "--json"))
    public, key_id = shown["public_key"], shown["key_id"]
    keys_cli(
        tmp_path, "bob", "trust", "alice", "--public-key", public, "--key-id", "0" * 16, expect=2
    )
    keys_cli(tmp_path, "bob", "trust", "alice", "--public-key", "not base64!", expect=2)
    keys_cli(tmp_path, "bob", "trust", "alice", "--public-key", public, "--role", "observer")
    keyring = json.loads(keys_cli(tmp_path, "bob", "list", "--json"))
    assert [(k["peer_id"], k["key_id"], k["roles"]) for k in keyring["keys"]] == [
        ("alice", key_id, ["observer"])
    ]
    assert key_id in keys_cli(tmp_path, "bob", "list")
    # Giving the key an end date keeps its roles.
    keys_cli(
        tmp_path, "bob", "trust", "alice", "--public-key", public,
        "--not-after", "2030-01-01T00:00:00Z",
    )  # fmt: skip
    (updated,) = json.loads(keys_cli(tmp_path, "bob", "list", "--json"))["keys"]
    assert updated["roles"] == ["observer"] and updated["not_after_ms"] == 1_893_456_000_000
    keys_cli(tmp_path, "bob", "revoke", "f" * 16, expect=2)
    keys_cli(tmp_path, "bob", "revoke", key_id)
    assert json.loads(keys_cli(tmp_path, "bob", "list", "--json"))["keys"][0]["revoked"] is True
    keys_cli(tmp_path, "bob", "trust", "alice", "--public-key", public, expect=2)
    os.chmod(tmp_path / "alice" / "peer.key", 0o644)
    assert "chmod 600" in keys_cli(tmp_path, "alice", "show", expect=3)


def test_run_without_a_key_is_refused(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    env.update(BASE_SETTINGS)
    result = subprocess.run(
        [DREAMCYCLE, "run", "--once", "--data-dir", str(tmp_path / "d"), "--peer-id", "p"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert result.returncode == 3, result.stderr
    assert "dreamcycle keys init" in result.stderr
    assert not (tmp_path / "d" / "dreamcycle.db").exists()


def test_keys_trust_takes_a_heartbeats_key_only_when_its_id_is_the_one_expected(
    tmp_path: Path,
) -> None:
    zeitgeist_dir = tmp_path / "zeitgeist"
    carol = signer("carol")
    DirectoryBackend(zeitgeist_dir).write_overwrite(
        heartbeat_key("carol"),
        Heartbeat(
            peer_id="carol", cursor_hlc=0, last_seen_ms=T0_MS, index_version="v",
            public_key=carol.public_key, seq=0,
        ).to_bytes(),
    )  # fmt: skip
    where = ("--zeitgeist-dir", str(zeitgeist_dir))
    keys_cli(tmp_path, "bob", "trust", "dora", *where, expect=2)  # no heartbeat
    keys_cli(tmp_path, "bob", "trust", "carol", "--key-id", "0" * 16, *where, expect=2)
    assert read_keyring(tmp_path / "bob" / "keyring.json").keys == {}
    keys_cli(tmp_path, "bob", "trust", "carol", "--key-id", carol.key_id, *where)
    trusted = read_keyring(tmp_path / "bob" / "keyring.json").keys[carol.key_id]
    assert (trusted.peer_id, trusted.public_key) == ("carol", carol.public_key)
