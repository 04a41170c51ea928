"""Ed25519 signatures on entries, segments and snapshots, and the keyring that checks them.

A peer signs every entry it originates and seals every segment and snapshot it
writes (zeitgeist/entries.py defines the bytes covered). A receiver accepts an
entry only when its key is in the keyring, belongs to the entry's origin peer,
is valid at the entry's time, is not revoked, and verifies the signature. The
keyring is data the operator distributes (or fills by an explicit trust of a
peer's heartbeat): nothing here reads files or config.

Key validity is judged at the time the entry or segment says it was written
(its HLC), so a rotated-out key still verifies what it signed while it was
valid, and a peer may hold two valid keys at once while it rotates.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

import blake3
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dreamcycle.zeitgeist.entries import KEY_ID_HEX_LEN, Entry, SegmentSeal
from dreamcycle.zeitgeist.hlc import HybridLogicalClock
from dreamcycle.zeitgeist.object_keys import InvalidPeerId, validate_peer_id
from dreamcycle.zeitgeist.rejections import Rejection as Rejection  # its public face too

KEYRING_FORMAT_VERSION: Final = 1
PUBLIC_KEY_BYTES: Final = 32
#: What a key may be trusted for. Every trusted key may sign its own peer's entries;
#: "observer" and "operator" are the authority a later rule grants beyond that.
ROLES: Final = ("peer", "observer", "operator")
DEFAULT_ROLES: Final = ("peer",)

E = TypeVar("E", bound=Entry)


class InvalidKeyring(ValueError):
    """A keyring (or one of its keys) that cannot be used; the message names the problem."""


@dataclass(frozen=True)
class Verdict:
    """A rejection and the detail to record with it."""

    reason: Rejection
    detail: str

    def __str__(self) -> str:
        return f"{self.reason.value}: {self.detail}"


def key_id_of(public_raw: bytes) -> str:
    """A short, stable name for a public key: 64 bits of blake3 over its raw bytes."""
    return blake3.blake3(public_raw).digest(KEY_ID_HEX_LEN // 2).hex()


def encode_public_key(public_raw: bytes) -> str:
    return base64.b64encode(public_raw).decode("ascii")


def decode_public_key(text: Any) -> bytes:
    """The raw 32 bytes of a base64 public key; InvalidKeyring otherwise."""
    if not isinstance(text, str):
        raise InvalidKeyring(f"public key must be base64 text, got {type(text).__name__}")
    try:
        raw = base64.b64decode(text, validate=True)
    except binascii.Error as exc:
        raise InvalidKeyring(f"public key is not base64: {exc}") from None
    if len(raw) != PUBLIC_KEY_BYTES:
        raise InvalidKeyring(f"public key has {len(raw)} bytes, an Ed25519 key has 32")
    return raw


def _public_raw(key: Ed25519PublicKey) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return key.public_bytes(Encoding.Raw, PublicFormat.Raw)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


class Signer:
    """One peer's private key: signs the entries it originates and seals what it writes."""

    def __init__(self, peer_id: str, private_key: Ed25519PrivateKey) -> None:
        self.peer_id = validate_peer_id(peer_id)
        self._private = private_key
        self.public_raw = _public_raw(private_key.public_key())
        self.key_id = key_id_of(self.public_raw)

    @property
    def public_key(self) -> str:
        return encode_public_key(self.public_raw)

    def sign_entry(self, entry: E) -> E:
        """`entry` signed by this peer; entries of other origins cannot be, and are returned
        as they are (the receivers' policy decides about them)."""
        if entry.origin != self.peer_id or (entry.signed and entry.key_id == self.key_id):
            return entry
        sig = _b64(self._private.sign(entry.signing_bytes(self.key_id)))
        return replace(entry, key_id=self.key_id, sig=sig)

    def seal(self, object_key: str, digest: str) -> SegmentSeal:
        unsigned = SegmentSeal(
            signer=self.peer_id, key_id=self.key_id, object_key=object_key, digest=digest, sig=""
        )
        sig = _b64(self._private.sign(unsigned.signing_bytes()))
        return replace(unsigned, sig=sig)

    def trusted_key(self, roles: Iterable[str] = DEFAULT_ROLES) -> TrustedKey:
        """This key as a keyring entry, for the peers that are to trust it."""
        return TrustedKey(
            peer_id=self.peer_id,
            key_id=self.key_id,
            public_key=self.public_key,
            roles=tuple(roles),
        )


def _optional_ms(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidKeyring(f"{name} must be null or milliseconds since the epoch, got {value!r}")
    return value


@dataclass(frozen=True)
class TrustedKey:
    """One public key the keyring trusts, for one peer, within a validity window."""

    peer_id: str
    key_id: str
    public_key: str
    roles: tuple[str, ...] = DEFAULT_ROLES
    #: Validity at the signed object's time, both ends inclusive (None: unbounded).
    not_before_ms: int | None = None
    not_after_ms: int | None = None
    revoked: bool = False
    public_raw: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            validate_peer_id(self.peer_id)
        except InvalidPeerId as exc:
            raise InvalidKeyring(f"key {self.key_id!r}: {exc}") from None
        raw = decode_public_key(self.public_key)
        if key_id_of(raw) != self.key_id:
            raise InvalidKeyring(
                f"key id {self.key_id!r} of peer {self.peer_id} does not match its public key "
                f"(which has id {key_id_of(raw)})"
            )
        unknown = sorted(set(self.roles) - set(ROLES))
        if unknown or not self.roles:
            raise InvalidKeyring(
                f"key {self.key_id}: roles must be among {', '.join(ROLES)}, got {list(self.roles)}"
            )
        _optional_ms("not_before_ms", self.not_before_ms)
        _optional_ms("not_after_ms", self.not_after_ms)
        if (
            self.not_before_ms is not None
            and self.not_after_ms is not None
            and self.not_after_ms < self.not_before_ms
        ):
            raise InvalidKeyring(f"key {self.key_id}: not_after_ms is before not_before_ms")
        object.__setattr__(self, "roles", tuple(sorted(set(self.roles), key=ROLES.index)))
        object.__setattr__(self, "public_raw", raw)

    def to_json(self) -> dict[str, Any]:
        return {
            "peer_id": self.peer_id,
            "key_id": self.key_id,
            "public_key": self.public_key,
            "roles": list(self.roles),
            "not_before_ms": self.not_before_ms,
            "not_after_ms": self.not_after_ms,
            "revoked": self.revoked,
        }

    @classmethod
    def from_json(cls, obj: Any) -> TrustedKey:
        if not isinstance(obj, Mapping):
            raise InvalidKeyring(f"a key must be an object, got {type(obj).__name__}")
        required = {"peer_id", "key_id", "public_key"}
        missing = sorted(required - obj.keys())
        if missing:
            raise InvalidKeyring(f"a key lacks {', '.join(missing)}")
        allowed = required | {"roles", "not_before_ms", "not_after_ms", "revoked"}
        extra = sorted(str(k) for k in obj.keys() - allowed)
        if extra:
            raise InvalidKeyring(f"key {obj['key_id']!r} has unknown field(s) {', '.join(extra)}")
        roles = obj.get("roles", list(DEFAULT_ROLES))
        revoked = obj.get("revoked", False)
        if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
            raise InvalidKeyring(f"key {obj['key_id']!r}: roles must be a list of names")
        if not isinstance(revoked, bool):
            raise InvalidKeyring(f"key {obj['key_id']!r}: revoked must be true or false")
        if not isinstance(obj["key_id"], str):
            raise InvalidKeyring(f"key id must be text, got {obj['key_id']!r}")
        return cls(
            peer_id=obj["peer_id"],
            key_id=obj["key_id"],
            public_key=obj["public_key"],
            roles=tuple(roles),
            not_before_ms=obj.get("not_before_ms"),
            not_after_ms=obj.get("not_after_ms"),
            revoked=revoked,
        )

    def validity_problem(self, at_ms: int) -> Verdict | None:
        if self.revoked:
            return Verdict(Rejection.REVOKED_KEY, f"key {self.key_id} of {self.peer_id} is revoked")
        if self.not_before_ms is not None and at_ms < self.not_before_ms:
            return Verdict(
                Rejection.KEY_NOT_YET_VALID,
                f"key {self.key_id} is valid from {self.not_before_ms}, signed at {at_ms}",
            )
        if self.not_after_ms is not None and at_ms > self.not_after_ms:
            return Verdict(
                Rejection.KEY_EXPIRED,
                f"key {self.key_id} was valid until {self.not_after_ms}, signed at {at_ms}",
            )
        return None


@dataclass(frozen=True)
class Keyring:
    """The trusted public keys, by key id."""

    keys: Mapping[str, TrustedKey] = field(default_factory=dict)

    @classmethod
    def of(cls, keys: Iterable[TrustedKey]) -> Keyring:
        ring: dict[str, TrustedKey] = {}
        for key in keys:
            if key.key_id in ring:
                raise InvalidKeyring(f"key {key.key_id} is listed twice")
            ring[key.key_id] = key
        return cls(ring)

    @classmethod
    def from_json(cls, obj: Any) -> Keyring:
        if not isinstance(obj, Mapping):
            raise InvalidKeyring("a keyring must be a JSON object")
        if obj.get("v") != KEYRING_FORMAT_VERSION:
            raise InvalidKeyring(
                f"keyring format version {obj.get('v')!r} is not {KEYRING_FORMAT_VERSION}"
            )
        keys = obj.get("keys")
        if not isinstance(keys, list):
            raise InvalidKeyring("a keyring needs a list of keys")
        return cls.of(TrustedKey.from_json(item) for item in keys)

    def to_json(self) -> dict[str, Any]:
        ordered = sorted(self.keys.values(), key=lambda k: (k.peer_id, k.key_id))
        return {"v": KEYRING_FORMAT_VERSION, "keys": [key.to_json() for key in ordered]}

    def with_key(self, key: TrustedKey) -> Keyring:
        """This keyring with `key` added, or replacing the entry of the same id."""
        return Keyring({**self.keys, key.key_id: key})

    def revoke(self, key_id: str) -> Keyring:
        if key_id not in self.keys:
            raise KeyError(key_id)
        return self.with_key(replace(self.keys[key_id], revoked=True))

    def of_peer(self, peer_id: str) -> list[TrustedKey]:
        return [key for key in self.keys.values() if key.peer_id == peer_id]


class Verifier:
    """Checks signed entries and seals against a keyring.

    `strict`: an unsigned object or an unknown key is rejected. Otherwise (a mesh
    migrating to signatures) both are accepted; a known key that fails is rejected
    either way.
    """

    def __init__(
        self, keyring: Keyring, *, strict: bool, source: Callable[[], Keyring] | None = None
    ) -> None:
        """`source`, if given, is asked for the current keyring on `refresh()` (a file the
        operator edits while the daemon runs)."""
        self.keyring = keyring
        self.strict = strict
        self._source = source
        #: Each public key parsed once, not per entry.
        self._public: dict[str, Ed25519PublicKey] = {}

    def refresh(self) -> None:
        if self._source is None:
            return
        current = self._source()
        if current is not self.keyring:
            self.keyring = current
            self._public.clear()

    def has_role(self, entry: Entry, role: str) -> bool:
        """Whether `entry` is signed by a trusted key of its origin that holds `role`
        (an entry the signature check accepted; unsigned entries hold no role)."""
        key = None if entry.key_id is None else self.keyring.keys.get(entry.key_id)
        return (
            key is not None
            and key.peer_id == entry.origin
            and not key.revoked
            and role in key.roles
        )

    def check_entry(self, entry: Entry) -> Verdict | None:
        """None when `entry` may be applied; else why not."""
        at_ms = HybridLogicalClock.physical_ms(entry.hlc)
        if entry.key_id is None or entry.sig is None:
            return self._unverifiable(Rejection.UNSIGNED, f"{entry.KIND} entry is not signed")
        key_id = entry.key_id
        return self._check(
            entry.origin, key_id, entry.sig, at_ms, lambda: entry.signing_bytes(key_id)
        )

    def check_seal(
        self, seal: SegmentSeal | None, object_key: str, writer: str, body_digest: str, at_ms: int
    ) -> Verdict | None:
        """None when the segment or snapshot `object_key`, written by `writer`, may be read."""
        if seal is None:
            return self._unverifiable(Rejection.UNSIGNED, f"{object_key} has no seal")
        if seal.object_key != object_key:
            return Verdict(Rejection.WRONG_OBJECT, f"seal names {seal.object_key}")
        if seal.digest != body_digest:
            return Verdict(Rejection.DIGEST_MISMATCH, f"{object_key} changed after sealing")
        return self._check(writer, seal.key_id, seal.sig, at_ms, seal.signing_bytes)

    def _unverifiable(self, reason: Rejection, detail: str) -> Verdict | None:
        return Verdict(reason, detail) if self.strict else None

    def _check(
        self,
        claimed_peer: str,
        key_id: str,
        sig: str,
        at_ms: int,
        payload: Callable[[], bytes],
    ) -> Verdict | None:
        key = self.keyring.keys.get(key_id)
        if key is None:
            return self._unverifiable(
                Rejection.UNKNOWN_KEY, f"key {key_id} (claimed by {claimed_peer}) is not trusted"
            )
        if key.peer_id != claimed_peer:
            return Verdict(
                Rejection.SIGNER_NOT_ORIGIN,
                f"key {key_id} belongs to {key.peer_id}, not to {claimed_peer}",
            )
        problem = key.validity_problem(at_ms)
        if problem is not None:
            return problem
        public = self._public.get(key_id)
        if public is None:
            public = self._public[key_id] = Ed25519PublicKey.from_public_bytes(key.public_raw)
        try:
            public.verify(base64.b64decode(sig), payload())
        except (InvalidSignature, binascii.Error):
            return Verdict(Rejection.BAD_SIGNATURE, f"signature by {key_id} does not verify")
        return None


def generate_key() -> Ed25519PrivateKey:
    return Ed25519PrivateKey.generate()
