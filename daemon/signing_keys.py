"""This peer's signing key and the keyring on disk, and the gate remote entries pass.

The private key is a PKCS#8 PEM file created 0600 in the data directory and
refused when group or others may read it. The keyring is a JSON file of trusted
public keys (zeitgeist/signing.py) that the operator distributes or that
`dreamcycle keys trust` fills; nothing adds a key to it implicitly.
"""

from __future__ import annotations

import json
import logging
import os
import stat
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, Protocol

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config import Config
from dreamcycle.daemon.observe import metrics
from dreamcycle.zeitgeist.entries import Entry
from dreamcycle.zeitgeist.log import LogOnce
from dreamcycle.zeitgeist.signing import (
    InvalidKeyring,
    Keyring,
    Rejection,
    Signer,
    Verdict,
    Verifier,
    generate_key,
)

log = logging.getLogger("dreamcycle.keys")


class KeyUnavailable(RuntimeError):
    """No usable private key here (missing in strict mode, or readable by others)."""


class KeyExists(RuntimeError):
    """`keys init` would overwrite a key."""


#: What a refusal of an unusable key file tells the operator to do; both work.
_REPLACE_UNUSABLE: Final = (
    "`dreamcycle keys init --rotate` moves it aside (kept, never deleted) and makes a new "
    "key, which the other peers must then trust (SECURITY.md)"
)


def key_permission_problem(path: Path) -> str | None:
    """Why the key file must not be used, if group or others can read or write it."""
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        return (
            f"private key {path} has mode {mode:04o}: group or others can access it; "
            f"if no one else could have read it, run `chmod 600 {path}`; otherwise "
            f"{_REPLACE_UNUSABLE}"
        )
    return None


def write_private_key(path: Path, key: Ed25519PrivateKey) -> None:
    """Create `path` 0600 and write the key; never replaces an existing file."""
    pem = key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, defaults.KEY_FILE_MODE)
    with os.fdopen(fd, "wb") as handle:
        handle.write(pem)
        handle.flush()
        os.fsync(handle.fileno())


def read_signer(config: Config) -> Signer | None:
    """This peer's signer; None when there is no key file. KeyUnavailable when it is unsafe
    or unreadable."""
    path = config.key_path
    if not path.exists():
        return None
    try:
        problem = key_permission_problem(path)
    except OSError as exc:
        raise KeyUnavailable(
            f"private key {path} cannot be read: {exc.strerror}; {_REPLACE_UNUSABLE}"
        ) from None
    if problem is not None:
        raise KeyUnavailable(problem)
    try:
        key = load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyUnavailable(
            f"private key {path} cannot be read: {exc}; {_REPLACE_UNUSABLE}"
        ) from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyUnavailable(f"private key {path} is not an Ed25519 key; {_REPLACE_UNUSABLE}")
    return Signer(config.peer.id, key)


def first_key(config: Config) -> Signer | None:
    """A signing key for a data directory that has neither a key nor a database yet (a new
    peer: what `dreamcycle keys init` makes, and a strict daemon needs to start); None
    otherwise. A peer with a store and no key is left to its operator: it may have lost the
    key its mesh trusts."""
    if not config.signing.strict or config.key_path.exists() or config.database_path.exists():
        return None
    config.data_dir.mkdir(parents=True, exist_ok=True)
    signer, _ = init_key(config)
    return signer


def init_key(config: Config, *, rotate: bool = False) -> tuple[Signer, Path | None]:
    """A new key for this peer. With `rotate`, the current key file is kept beside it and
    replaced: renamed with its key id, or, when it cannot be used (unreadable, not a key,
    open to other users), renamed `<file>.unusable-<UTC time>` and made 0600. Without
    `rotate`, an existing key is refused. Returns the new signer and where the old file
    went."""
    path = config.key_path
    retired: Path | None = None
    if os.path.lexists(path):
        try:
            old = read_signer(config)
            if old is None:
                raise KeyUnavailable(f"private key {path} is a link to nothing")
        except KeyUnavailable as exc:
            if not rotate:
                raise KeyExists(f"{path} holds an unusable key: {exc}") from None
            retired = _set_aside_unusable(path, str(exc))
        else:
            if not rotate:
                raise KeyExists(
                    f"{path} already holds this peer's key; `dreamcycle keys show` prints "
                    "it, `dreamcycle keys init --rotate` replaces it"
                )
            retired = path.with_name(f"{path.name}.{old.key_id}.retired")
            os.replace(path, retired)
    key = generate_key()
    write_private_key(path, key)
    return Signer(config.peer.id, key), retired


def _set_aside_unusable(path: Path, problem: str) -> Path:
    """Move the unusable key file at `path` to a new name beside it, never over another file."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    base = f"{path.name}.{defaults.SIGNING_KEY_UNUSABLE_SUFFIX}-{stamp}"
    aside = path.with_name(base)
    number = 1
    while os.path.lexists(aside):
        number += 1
        aside = path.with_name(f"{base}.{number}")
    os.replace(path, aside)
    # It may still be a working secret: no longer open to others, now that nothing reads it.
    if aside.is_file() and not aside.is_symlink():
        aside.chmod(defaults.KEY_FILE_MODE)
    log.warning(
        "unusable private key moved aside; a new key replaces it",
        extra={"moved_to": str(aside), "problem": problem},
    )
    return aside


def read_keyring(path: Path) -> Keyring:
    """The keyring at `path` (empty when there is none); InvalidKeyring names the problem."""
    found = _read_keyring_file(path)
    return Keyring() if found is None else found


def _read_keyring_file(path: Path) -> Keyring | None:
    """The keyring at `path`, None when there is no file; InvalidKeyring names the problem."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise InvalidKeyring(f"keyring {path} cannot be read: {exc}") from None
    try:
        # Decoded here, not by read_text: a file cut inside a multi-byte character is
        # refused like any other broken file, not raised past the caller.
        return Keyring.from_json(json.loads(data.decode("utf-8")))
    except ValueError as exc:
        raise InvalidKeyring(f"keyring {path}: {exc}") from None


def write_keyring(path: Path, keyring: Keyring) -> None:
    """Replace the keyring atomically: a reader sees the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(keyring.to_json(), indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, path)


#: What `os.stat` tells of the keyring file (inode, mtime, size); None when there is none.
_FileStamp = tuple[int, int, int] | None


#: A keyring file that is not valid when first read is read again this many times, this
#: long apart, before it is refused: long enough for a copy being written to land.
KEYRING_SETTLE_READS: Final = 20
KEYRING_SETTLE_PAUSE_S: Final = 0.1


class KeyringFile:
    """The keyring file, read again when it changes (`keys trust` and `keys revoke` take
    effect in the running daemon's next cycle).

    Once a keyring was read, a file that goes missing, cannot be read or is not a valid
    keyring keeps the keyring read last, with one line logged per change of the file: an
    operator replacing it by hand, or a copy caught half-written, must not leave trusted
    peers' entries refused (`unknown_key`), since a refused entry is never read again. The
    file is read again at every call until it is good. A data directory that never had a
    keyring starts with an empty one.

    This peer's own key verifies its own entries (met again in snapshots) without being
    listed in the file.
    """

    def __init__(self, path: Path, own: Signer | None) -> None:
        self.path = path
        self.own = own
        # Taken before the read: a change made while reading is read again next time.
        self._stamp = self._stat()
        found = self._first_read()
        #: Whether a keyring file was read: from then on a missing one is not an empty one.
        self._held_file = found is not None
        #: Whether `keyring` is what the file at `_stamp` holds (else it is read again).
        self._settled = True
        self.keyring = self._with_own(Keyring() if found is None else found)

    def _first_read(self) -> Keyring | None:
        """The file's keyring, read before any was held: a copy caught half-written (an
        operator's edit, a deployment) is read again a few times before it is refused, as
        a daemon starting at that moment would otherwise exit."""
        for _ in range(KEYRING_SETTLE_READS - 1):
            try:
                return _read_keyring_file(self.path)
            except InvalidKeyring:
                time.sleep(KEYRING_SETTLE_PAUSE_S)
                self._stamp = self._stat()
        return _read_keyring_file(self.path)

    def _stat(self) -> _FileStamp:
        try:
            info = self.path.stat()
        except FileNotFoundError:
            return None
        except OSError:
            # Unreadable metadata is a change too: the read that follows says why.
            return (-1, -1, -1)
        return (info.st_ino, info.st_mtime_ns, info.st_size)

    def _with_own(self, keyring: Keyring) -> Keyring:
        own = self.own
        if own is None or own.key_id in keyring.keys:
            return keyring
        return keyring.with_key(own.trusted_key())

    def current(self) -> Keyring:
        stamp = self._stat()
        if stamp == self._stamp and self._settled:
            return self.keyring
        changed = stamp != self._stamp
        self._stamp = stamp
        try:
            found = _read_keyring_file(self.path)
        except InvalidKeyring as exc:
            self._keep(changed, logging.ERROR, "the new file is refused", str(exc))
            return self.keyring
        if found is None and self._held_file:
            self._keep(changed, logging.WARNING, "the file is missing", f"no file {self.path}")
            return self.keyring
        self._settled = True
        self._held_file = found is not None
        self.keyring = self._with_own(Keyring() if found is None else found)
        log.info("keyring reloaded", extra={"keys": len(self.keyring.keys)})
        return self.keyring

    def _keep(self, changed: bool, level: int, why: str, error: str) -> None:
        """Go on with the keyring read last; read the file again at the next call."""
        self._settled = False
        if changed:
            log.log(level, f"keyring unchanged: {why}", extra={"error": error})


def open_keys(config: Config) -> tuple[Signer | None, Verifier]:
    """The signer (if this peer has a key) and the verifier of remote objects."""
    signer = read_signer(config)
    keyring = KeyringFile(config.keyring_path, signer)
    verifier = Verifier(keyring.keyring, strict=config.signing.strict, source=keyring.current)
    return signer, verifier


def check_can_run(config: Config) -> None:
    """Before the daemon starts: refuse strict mode without a key; warn in permissive mode."""
    signer = read_signer(config)
    if config.signing.strict and signer is None:
        raise KeyUnavailable(
            f"no private key at {config.key_path}: run `dreamcycle keys init`, give the "
            "other peers its public key (`dreamcycle keys show`), and trust theirs "
            '(`dreamcycle keys trust PEER`); or set signing.mode = "permissive" while migrating'
        )
    read_keyring(config.keyring_path)  # a broken keyring is refused now, not mid-cycle
    if not config.signing.strict:
        log.warning(
            "signing.mode is permissive: unsigned entries and entries signed by unknown keys "
            "are APPLIED; any writer of the zeitgeist can change this peer's memory",
            extra={"signing": "on" if signer is not None else "off (no key)"},
        )


def count_rejection(reason: Rejection) -> None:
    metrics.ENTRIES_REJECTED.labels(reason.value).inc()


class _Fetched(Protocol):
    key: str
    entries: list[Entry]


class EntryGate:
    """Screens remote entries before they are applied: each verdict is counted, and each
    rejected object is logged once (a segment read again after a crash is not logged
    again, and a flood of forgeries cannot flood the log)."""

    def __init__(self, verifier: Verifier) -> None:
        self.verifier = verifier
        self._logged = LogOnce(defaults.REJECTION_LOG_MEMORY)

    def screen(
        self,
        segments: Sequence[_Fetched],
        seal_problems: dict[str, Verdict],
        trusted_ids: Iterable[str] = (),
    ) -> dict[str, str]:
        """Entry id -> reason, for every entry that must not be applied.

        An id that one segment carries with a valid signature (or that this peer queued
        itself, `trusted_ids`) is not rejected because another segment carries a copy
        that fails: a forged copy cannot silence the real one.
        """
        self.verifier.refresh()
        failing: list[tuple[str, Verdict]] = []
        accepted: set[str] = set(trusted_ids)
        for segment in segments:
            sealed = seal_problems.get(segment.key)
            for entry in segment.entries:
                verdict = sealed if sealed is not None else self.verifier.check_entry(entry)
                if verdict is None:
                    accepted.add(entry.id)
                else:
                    failing.append((entry.id, verdict))
        rejected: dict[str, Verdict] = {}
        # Every forged copy is counted, though one reason per id is recorded.
        for entry_id, verdict in failing:
            if entry_id not in accepted:
                count_rejection(verdict.reason)
                rejected.setdefault(entry_id, verdict)
        self._log_once(segments, seal_problems, rejected)
        return {entry_id: f"signature: {verdict}" for entry_id, verdict in rejected.items()}

    def _log_once(
        self,
        segments: Iterable[_Fetched],
        seal_problems: dict[str, Verdict],
        rejected: dict[str, Verdict],
    ) -> None:
        for segment in segments:
            ids = [e.id for e in segment.entries if e.id in rejected]
            if not ids or not self._logged.first_time(segment.key):
                continue
            reasons = sorted({rejected[i].reason.value for i in ids})
            log.warning(
                "entries rejected",
                extra={
                    "key": segment.key,
                    "rejected": len(ids),
                    "reasons": ",".join(reasons),
                    "first": str(seal_problems.get(segment.key) or rejected[ids[0]]),
                },
            )
