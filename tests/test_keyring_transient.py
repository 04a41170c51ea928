"""A keyring file that is missing, unreadable or broken for a while, under a running peer.

Once a keyring was read, the file going missing (an operator replacing it by hand), empty
or half-written (a copy caught mid-write) keeps the keyring read last, and the next good
file is taken. A data directory that never had a keyring starts with an empty one.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import SIGNING_KEYRING_FILE
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.signing_keys import KeyringFile, init_key, open_keys, write_keyring
from dreamcycle.zeitgeist.entries import ReconsolidateEntry, TombstoneEntry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from dreamcycle.zeitgeist.signing import InvalidKeyring, Keyring, Signer, generate_key
from tests.daemon_helpers import trust_key
from tests.test_daemon_robustness import entry_status, peer, publish_signed, wall_clock_ms

__all__ = ["peer"]  # the fixture, shared with the robustness tests

T0_MS: Final = 1_700_000_000_000
LOGGER: Final = "dreamcycle.keys"


def signer(peer_id: str) -> Signer:
    return Signer(peer_id, generate_key())


def ring(*signers: Signer) -> Keyring:
    return Keyring.of(s.trusted_key() for s in signers)


def kept_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "keyring unchanged" in r.getMessage()]


def config_for(tmp_path: Path) -> Config:
    overrides = {"peer.data_dir": str(tmp_path / "data"), "peer.id": "alice"}
    return load_config(environ={}, overrides=overrides)


def signed_tombstone(by: Signer) -> TombstoneEntry:
    return by.sign_entry(
        TombstoneEntry(
            hlc=hlc_from_ms(T0_MS),
            origin=by.peer_id,
            content_hash="ab" * 32,
            reason="wrong",
            collectable_after_ms=None,
            forget_pulse=None,
        )
    )


def test_removed_emptied_and_half_written_files_keep_the_last_good_keys(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = tmp_path / SIGNING_KEYRING_FILE
    own, bob, carol = signer("alice"), signer("bob"), signer("carol")
    write_keyring(path, ring(bob))
    keyring = KeyringFile(path, own)
    good = keyring.current()
    assert set(good.keys) == {own.key_id, bob.key_id}

    text = path.read_text(encoding="utf-8")
    cut_in_a_character = json.dumps({"v": 1, "keys": [], "note": "é"}, ensure_ascii=False).encode()[
        :-3
    ]
    breakages = {
        "removed": lambda: path.unlink(),
        "emptied": lambda: path.write_bytes(b""),
        "half-written": lambda: path.write_text(text[: len(text) // 2], encoding="utf-8"),
        "cut inside a character": lambda: path.write_bytes(cut_in_a_character),
        "not a keyring": lambda: path.write_text("[]", encoding="utf-8"),
    }
    for name, breakage in breakages.items():
        before = len(kept_lines(caplog))
        breakage()
        assert keyring.current() is good, name
        assert keyring.current() is good, name
        # One line per change of the file, not one per read.
        assert len(kept_lines(caplog)) == before + 1, name

    write_keyring(path, ring(bob, carol))
    assert set(keyring.current().keys) == {own.key_id, bob.key_id, carol.key_id}
    # A valid file is taken as it is, a key left out included.
    write_keyring(path, ring(carol))
    assert set(keyring.current().keys) == {own.key_id, carol.key_id}


def test_a_file_unreadable_for_a_while_is_read_again_when_it_can_be(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / SIGNING_KEYRING_FILE
    own, bob, carol = signer("alice"), signer("bob"), signer("carol")
    write_keyring(path, ring(bob))
    keyring = KeyringFile(path, own)
    good = keyring.current()
    write_keyring(path, ring(bob, carol))
    read_bytes = Path.read_bytes

    def failing(self: Path) -> bytes:
        if self == path:
            raise OSError(errno.EIO, os.strerror(errno.EIO), str(self))
        return read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", failing)
    assert keyring.current() is good
    assert keyring.current() is good
    assert len(kept_lines(caplog)) == 1
    monkeypatch.undo()
    # The file did not change since the refused read, and it is read again all the same.
    assert set(keyring.current().keys) == {own.key_id, bob.key_id, carol.key_id}


def test_a_data_directory_without_a_keyring_starts_empty_and_takes_one_later(
    tmp_path: Path,
) -> None:
    path = tmp_path / SIGNING_KEYRING_FILE
    own, bob = signer("alice"), signer("bob")
    keyring = KeyringFile(path, own)
    assert set(keyring.current().keys) == {own.key_id}
    write_keyring(path, ring(bob))
    assert set(keyring.current().keys) == {own.key_id, bob.key_id}


def test_a_trusted_peers_entry_verifies_while_the_keyring_file_is_missing(
    tmp_path: Path,
) -> None:
    config = config_for(tmp_path)
    init_key(config)
    bob = signer("bob")
    write_keyring(config.keyring_path, ring(bob))
    _, verifier = open_keys(config)
    entry = signed_tombstone(bob)
    verifier.refresh()
    assert verifier.check_entry(entry) is None
    config.keyring_path.unlink()
    verifier.refresh()
    assert verifier.check_entry(entry) is None


def test_entries_published_while_the_keyring_is_missing_are_applied(
    peer: Peer, tmp_path: Path
) -> None:
    """On the daemon's real phases: the entry is not refused `unknown_key` for good."""
    keyring_path = tmp_path / "a" / SIGNING_KEYRING_FILE
    carol = Signer("c", generate_key())
    trust_key(keyring_path, carol)
    run_cycle_blocking(peer)  # the keyring with carol's key is read
    chunk = peer.db.observation(2)
    assert chunk is not None
    keyring_path.unlink()

    entry = ReconsolidateEntry(
        hlc=HybridLogicalClock(wall_clock_ms).now(),
        origin="c",
        content_hash=chunk.content_hash,
        changes={"title": "while the keyring was missing"},
    )
    publish_signed(tmp_path, carol, [entry])
    run_cycle_blocking(peer)

    assert entry_status(peer, entry) == ("applied", None)
    held = peer.db.observation(2)
    assert held is not None and held.title == "while the keyring was missing"


def test_a_keyring_half_written_when_a_daemon_starts_is_read_once_it_lands(
    tmp_path: Path,
) -> None:
    """The daemon reads the keyring as it opens its peer: a copy caught half-written then is
    read again until it lands, rather than stopping the daemon."""
    path = tmp_path / SIGNING_KEYRING_FILE
    own, bob = signer("alice"), signer("bob")
    write_keyring(path, ring(bob))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) // 2])
    landing = threading.Timer(0.3, lambda: path.write_bytes(whole))
    landing.start()
    try:
        keyring = KeyringFile(path, own)
    finally:
        landing.join()
    assert set(keyring.current().keys) == {own.key_id, bob.key_id}


def test_a_keyring_that_stays_broken_at_start_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / SIGNING_KEYRING_FILE
    path.write_text('{"v": 1, "keys": [', encoding="utf-8")
    with pytest.raises(InvalidKeyring, match=str(path)):
        KeyringFile(path, signer("alice"))
