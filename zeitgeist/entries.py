"""The versioned entry codec: eight entry kinds, one JSON object per line, gzip'd segments.

Every entry carries the envelope fields "v" (format version), "kind", "id", "hlc"
and "origin" next to its own fields. The id of a salience_pulse entry is its
pulse's pulse_id; every other id is the first 128 bits of blake3 over the
canonical JSON (sorted keys, compact separators) of the entry's version-1 form
without "id". A receiver recomputes the id and rejects a line whose id does not match.

Version 2 is version 1 plus a signature: "key_id" names the origin peer's
Ed25519 key and "sig" signs the canonical JSON of the line without "sig". The id
stays a content hash (signing an entry does not change it), and readers decode
both versions; whether an unsigned entry is accepted is the receiver's policy
(zeitgeist/signing.py). A segment may begin with a seal line (kind "segment",
version 2): the writer's signature over the segment's object key and the
blake3 digest of the lines after it.

Decoding is forgiving per line and strict per field: entries of an unknown
version or kind are skipped and counted (a newer peer may write them), malformed
lines are rejected with a reason, and the rest of the segment still decodes.
Pulse invariants (seed section 4.2) are not checked here: the receiver checks
them when applying, so it can record the reason against the pulse id.

Everything read is bounded before it costs more than its size: every string and
list field has a protocol limit (an entry beyond one is rejected as over_limit),
a line longer than MAX_LINE_BYTES is rejected alone, and a segment beyond its
SegmentLimits (bytes before and after decompression, lines) is refused whole.
Lines are read one at a time from the decompressor, so memory follows the
longest line and the entries kept, not the number of lines.
"""

from __future__ import annotations

import base64
import enum
import gzip
import io
import json
import math
import re
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any, ClassVar, Final, Self, TypeAlias

import blake3
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.constants import (
    ATTRIBUTION_MAX_CHUNKS,
    DECISION_TEXT_MAX_CHARS,
    EMBEDDING_DIM_MAX,
    INDEX_VERSION_MAX_CHARS,
    REASON_MAX_CHARS,
)
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse
from dreamcycle.zeitgeist.hlc import InvalidHlc, check_hlc
from dreamcycle.zeitgeist.keys import InvalidPeerId, validate_peer_id

FORMAT_VERSION: Final = 1
#: The version of a signed line: FORMAT_VERSION plus "key_id" and "sig".
SIGNED_VERSION: Final = 2
READABLE_VERSIONS: Final = frozenset({FORMAT_VERSION, SIGNED_VERSION})
SIGNATURE_FIELDS: Final = ("key_id", "sig")
#: The kind of a segment's seal line; never an entry.
SEAL_KIND: Final = "segment"
#: Hex digits of a key id (the first 64 bits of blake3 over the raw public key).
KEY_ID_HEX_LEN: Final = 16
#: Base64 characters of an Ed25519 signature (64 bytes).
SIGNATURE_B64_LEN: Final = 88
#: Bytes of blake3 kept for an entry id (128 bits), the same width as a pulse_id.
ENTRY_ID_BYTES: Final = 16
ENTRY_ID_HEX_LEN: Final = 2 * ENTRY_ID_BYTES
#: A content hash or decision hash: full 256-bit blake3, lowercase hex.
HASH_HEX_LEN: Final = 64
ENVELOPE_FIELDS: Final = ("v", "kind", "id", "hlc", "origin")
#: The fields a reconsolidate entry may change; anything else needs a new assert.
RECONSOLIDATE_FIELDS: Final = frozenset({"title", "topic_key", "pin_floor", "importance"})
#: Largest decompressed segment accepted, so a corrupt or hostile object cannot
#: exhaust memory (a cycle's segment is normally a few hundred kilobytes).
MAX_SEGMENT_BYTES: Final = 256 * 1024 * 1024
#: Largest gzip'd segment read (a cycle publishes at most 5,000 entries: a few MiB).
MAX_SEGMENT_COMPRESSED_BYTES: Final = 64 * 1024 * 1024
#: Most lines of a segment, blank ones included: the seal, 5,000 entries a cycle
#: publishes at most, and room for entries of newer kinds.
MAX_SEGMENT_LINES: Final = 20_000
#: A snapshot folds the whole history, so it may be far larger than a segment.
MAX_SNAPSHOT_COMPRESSED_BYTES: Final = 1024 * 1024 * 1024
MAX_SNAPSHOT_BYTES: Final = 4 * 1024 * 1024 * 1024
MAX_SNAPSHOT_LINES: Final = 5_000_000

# ---- protocol limits on fields: every peer must agree on these -----------------------------

#: Longest chunk content, in characters.
CONTENT_MAX_CHARS: Final = 1_000_000
#: Longest chunk title, in characters.
TITLE_MAX_CHARS: Final = 10_000
#: Longest short label of a chunk (type, scope, kind, project, topic, session, tool, model).
LABEL_MAX_CHARS: Final = 1_000
#: Longest line: the largest entry the field limits allow (content of astral characters,
#: each written as a 12-byte surrogate pair, and the widest embedding) fits with room.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Bytes read from the decompressor at a time while skipping the rest of an over-long line.
_SKIP_CHUNK_BYTES: Final = 1024 * 1024
#: Longest unknown kind name kept verbatim as a counter label.
MAX_KIND_LABEL: Final = 64

_HASH_RE: Final = re.compile(rf"[0-9a-f]{{{HASH_HEX_LEN}}}")
_ID_RE: Final = re.compile(rf"[0-9a-f]{{{ENTRY_ID_HEX_LEN}}}")
_KEY_ID_RE: Final = re.compile(rf"[0-9a-f]{{{KEY_ID_HEX_LEN}}}")
_SIG_RE: Final = re.compile(rf"[A-Za-z0-9+/]{{{SIGNATURE_B64_LEN - 2}}}==")

Embedding = npt.NDArray[np.float32]
ChangeValue: TypeAlias = str | float | None


class Refusal(enum.StrEnum):
    """Why a line, segment or key of the log was refused: the label it is counted by."""

    #: A line that is not JSON, not an object, or not a valid entry.
    MALFORMED_LINE = "malformed_line"
    #: An entry with a string, list or embedding beyond its protocol limit.
    OVER_LIMIT = "over_limit"
    LINE_TOO_LONG = "line_too_long"
    #: Not gzip, truncated, or not UTF-8.
    CORRUPT_SEGMENT = "corrupt_segment"
    #: More bytes before or after decompression than SegmentLimits allow.
    SEGMENT_TOO_LARGE = "segment_too_large"
    SEGMENT_TOO_MANY_LINES = "segment_too_many_lines"
    #: A segment, snapshot or heartbeat key that does not parse.
    MALFORMED_KEY = "malformed_key"
    #: A segment or snapshot key dated beyond the allowed clock skew.
    FROM_THE_FUTURE = "from_the_future"
    #: A snapshot holding an entry dated after itself, or lacking what the snapshot it
    #: was folded from held.
    SNAPSHOT_INCONSISTENT = "snapshot_inconsistent"


class InvalidEntry(ValueError):
    """An entry field that is missing, mistyped or out of range; the message names it."""

    refusal: ClassVar[Refusal] = Refusal.MALFORMED_LINE


class OverLimit(InvalidEntry):
    """A string, list or embedding longer than the protocol allows; the message names it."""

    refusal: ClassVar[Refusal] = Refusal.OVER_LIMIT


class CorruptSegment(ValueError):
    """A segment that is not gzip, is truncated, or is not UTF-8 text at all."""

    def __init__(self, message: str, refusal: Refusal = Refusal.CORRUPT_SEGMENT) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class SegmentLimits:
    """What one segment (or snapshot) may cost a reader; beyond any of them it is refused."""

    compressed_bytes: int = MAX_SEGMENT_COMPRESSED_BYTES
    expanded_bytes: int = MAX_SEGMENT_BYTES
    #: Lines, blank ones included: each costs a step of the reader.
    lines: int = MAX_SEGMENT_LINES

    def __post_init__(self) -> None:
        for name in ("compressed_bytes", "expanded_bytes", "lines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"segment limit {name} must be a positive integer, got {value!r}")


SEGMENT_LIMITS: Final = SegmentLimits()
SNAPSHOT_LIMITS: Final = SegmentLimits(
    compressed_bytes=MAX_SNAPSHOT_COMPRESSED_BYTES,
    expanded_bytes=MAX_SNAPSHOT_BYTES,
    lines=MAX_SNAPSHOT_LINES,
)


def _prefixed(exc: InvalidEntry, prefix: str) -> InvalidEntry:
    """`exc` with `prefix` before its message, of the same class (so its refusal holds)."""
    return type(exc)(f"{prefix}: {exc}")


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """The one byte form that ids are computed over and segments are written in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


# ---- field rules: validate and normalise one field value ---------------------------

Rule = Callable[[str, Any], Any]


def _fail(name: str, problem: str) -> InvalidEntry:
    return InvalidEntry(f"field {name!r}: {problem}")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(name, f"expected a string, got {_type_name(value)}")
    return value


def _name(name: str, value: Any) -> str:
    if not _text(name, value):
        raise _fail(name, "must not be empty")
    return str(value)


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(name, f"expected a number, got {_type_name(value)}")
    try:
        number = float(value)
    except OverflowError:
        # An integer literal beyond 1e308: JSON allows it, no float holds it.
        raise _fail(name, "must be finite, got an integer too large for a float") from None
    if not math.isfinite(number):
        raise _fail(name, f"must be finite, got {value}")
    return number


def _over(name: str, problem: str) -> OverLimit:
    return OverLimit(f"field {name!r}: {problem}")


def _check_chars(name: str, value: str, limit: int) -> str:
    if len(value) > limit:
        raise _over(name, f"{len(value)} characters, more than the limit of {limit}")
    return value


def _text_within(limit: int, *, required: bool = False, optional: bool = False) -> Rule:
    """A rule for text of at most `limit` characters (non-empty if `required`, or null if
    `optional`)."""

    def rule(name: str, value: Any) -> str | None:
        if optional and value is None:
            return None
        text = _name(name, value) if required else _text(name, value)
        return _check_chars(name, text, limit)

    return rule


def _optional_number(name: str, value: Any) -> float | None:
    return None if value is None else _number(name, value)


def _unit_interval(name: str, value: Any) -> float:
    number = _number(name, value)
    if not 0.0 <= number <= 1.0:
        raise _fail(name, f"must be in [0, 1], got {number}")
    return number


def _optional_ms(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(name, f"expected null or a non-negative integer, got {value!r}")
    return value


def _hash(name: str, value: Any) -> str:
    if not isinstance(value, str) or _HASH_RE.fullmatch(value) is None:
        raise _fail(name, f"expected {HASH_HEX_LEN} lowercase hex digits, got {value!r}")
    return value


def _hash_tuple(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(name, f"expected a list of hashes, got {_type_name(value)}")
    if len(value) > ATTRIBUTION_MAX_CHUNKS:
        raise _over(name, f"{len(value)} hashes, more than the limit of {ATTRIBUTION_MAX_CHUNKS}")
    return tuple(_hash(f"{name}[{i}]", item) for i, item in enumerate(value))


def _peer(name: str, value: Any) -> str:
    try:
        return validate_peer_id(value)
    except InvalidPeerId as exc:
        raise _fail(name, str(exc)) from None


def _embedding(name: str, value: Any) -> Embedding:
    if not isinstance(value, np.ndarray):
        raise _fail(name, f"expected a float32 vector, got {_type_name(value)}")
    vector = np.array(value, dtype=np.float32, copy=True)
    if vector.ndim != 1 or vector.shape[0] == 0:
        raise _fail(name, f"expected a non-empty 1-d vector, got shape {value.shape}")
    if vector.shape[0] > EMBEDDING_DIM_MAX:
        raise _over(
            name, f"{vector.shape[0]} dimensions, more than the limit of {EMBEDDING_DIM_MAX}"
        )
    if not np.all(np.isfinite(vector)):
        raise _fail(name, "contains NaN or infinity")
    vector.setflags(write=False)  # the entry id covers these bytes
    return vector


def _pulse(name: str, value: Any) -> SalientPulse:
    if not isinstance(value, SalientPulse):
        raise _fail(name, f"expected a SalientPulse, got {_type_name(value)}")
    if value.pulse_id != value.computed_id():
        raise _fail(name, f"pulse_id {value.pulse_id!r} does not match its content (use with_id())")
    return value


def _optional_forget_pulse(name: str, value: Any) -> SalientPulse | None:
    if value is None:
        return None
    pulse = _pulse(name, value)
    if pulse.kind is not PulseKind.FORGET:
        raise _fail(name, f"a tombstone carries only a forget pulse, got {pulse.kind.value}")
    return pulse


_TITLE: Final = _text_within(TITLE_MAX_CHARS)
_LABEL: Final = _text_within(LABEL_MAX_CHARS, required=True)
_OPTIONAL_LABEL: Final = _text_within(LABEL_MAX_CHARS, optional=True)
_REASON: Final = _text_within(REASON_MAX_CHARS)

_CHANGE_RULES: Final[Mapping[str, Rule]] = {
    "title": _TITLE,
    "topic_key": _OPTIONAL_LABEL,
    "pin_floor": _unit_interval,
    "importance": _optional_number,
}


def _changes(name: str, value: Any) -> Mapping[str, ChangeValue]:
    if not isinstance(value, Mapping):
        raise _fail(name, f"expected an object, got {_type_name(value)}")
    if not value:
        raise _fail(name, "must change at least one field")
    unknown = sorted(str(key) for key in value if key not in RECONSOLIDATE_FIELDS)
    if unknown:
        allowed = ", ".join(sorted(RECONSOLIDATE_FIELDS))
        raise _fail(name, f"cannot change {', '.join(unknown)} (allowed: {allowed})")
    checked = {key: _CHANGE_RULES[key](f"{name}.{key}", value[key]) for key in sorted(value)}
    return MappingProxyType(checked)


# ---- wire decoders for fields whose JSON form differs from the Python value --------


#: Base64 characters of the widest embedding accepted.
_EMBEDDING_B64_MAX_CHARS: Final = 4 * -(-4 * EMBEDDING_DIM_MAX // 3)


def _embedding_from_wire(name: str, value: Any) -> Embedding:
    if not isinstance(value, str):
        raise _fail(name, f"expected base64 text, got {_type_name(value)}")
    if len(value) > _EMBEDDING_B64_MAX_CHARS:
        raise _over(name, f"more than the limit of {EMBEDDING_DIM_MAX} float32 values")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise _fail(name, f"invalid base64: {exc}") from None
    if len(raw) % 4:
        raise _fail(name, f"{len(raw)} bytes is not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def _pulse_from_wire(name: str, value: Any) -> SalientPulse:
    if not isinstance(value, dict):
        raise _fail(name, f"expected a pulse object, got {_type_name(value)}")
    try:
        pulse = SalientPulse.from_json(value)
    except InvalidPulse as exc:
        raise _fail(name, f"invalid pulse: {exc}") from None
    # What no canonical line can hold (a Forget pulse's strength is +inf, written "inf");
    # the line parser refuses these constants, a wire object built otherwise may carry them.
    for number in ("strength", "sigma", "decay_per_hop", "ttl_s"):
        value = getattr(pulse, number)
        if math.isnan(value) or value == -math.inf or (value == math.inf and number != "strength"):
            raise _fail(f"{name}.{number}", f"must be finite, got {value}")
    # Sizes only: the invariants are the receiver's to check when it applies the pulse.
    dim = pulse.seed_embedding.shape[0]
    if dim > EMBEDDING_DIM_MAX:
        raise _over(name, f"seed_embedding: {dim} dimensions, more than {EMBEDDING_DIM_MAX}")
    _check_chars(f"{name}.reason", pulse.reason, REASON_MAX_CHARS)
    _check_chars(f"{name}.index_version", pulse.index_version, INDEX_VERSION_MAX_CHARS)
    return pulse


def _optional_pulse_from_wire(name: str, value: Any) -> SalientPulse | None:
    return None if value is None else _pulse_from_wire(name, value)


def _to_wire(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        little_endian = np.ascontiguousarray(value, dtype="<f4")
        return base64.b64encode(little_endian.tobytes()).decode("ascii")
    if isinstance(value, SalientPulse):
        return value.to_json()
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# ---- entry kinds --------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class EntryBase:
    """Envelope shared by every kind. Equality and hashing follow the wire bytes."""

    KIND: ClassVar[str]
    #: Per-field validation; the value it returns (normalised) is what the entry keeps.
    RULES: ClassVar[Mapping[str, Rule]]
    #: Fields whose wire form needs decoding before the rule sees it.
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {}
    #: Fields added after a kind first shipped: absent from the wire (and from the id)
    #: when empty, so entries written before them keep their ids.
    OPTIONAL: ClassVar[Mapping[str, Any]] = {}

    hlc: int
    origin: str
    #: The signing key's id and the signature (both None on an unsigned entry); neither
    #: is part of the id.
    key_id: str | None = None
    sig: str | None = None

    def __post_init__(self) -> None:
        try:
            check_hlc(self.hlc, "hlc")
            check_signature_fields(self.key_id, self.sig)
        except InvalidHlc as exc:
            raise InvalidEntry(f"{self.KIND} entry: {exc}") from None
        except InvalidEntry as exc:
            raise _prefixed(exc, f"{self.KIND} entry") from None
        for name, rule in (("origin", _peer), *self.RULES.items()):
            try:
                normalised = rule(name, getattr(self, name))
            except InvalidEntry as exc:
                raise _prefixed(exc, f"{self.KIND} entry") from None
            object.__setattr__(self, name, normalised)

    def body(self) -> dict[str, Any]:
        """The kind's own fields in wire form."""
        return {
            name: _to_wire(getattr(self, name))
            for name in self.RULES
            if name not in self.OPTIONAL or getattr(self, name) != self.OPTIONAL[name]
        }

    def unsigned_wire(self) -> dict[str, Any]:
        """The wire object without "id": what a non-pulse id is computed over."""
        envelope = {"v": FORMAT_VERSION, "kind": self.KIND, "hlc": self.hlc, "origin": self.origin}
        return {**envelope, **self.body()}

    def computed_id(self) -> str:
        return blake3.blake3(canonical_json(self.unsigned_wire())).digest(ENTRY_ID_BYTES).hex()

    @cached_property
    def id(self) -> str:
        return self.computed_id()

    @property
    def signed(self) -> bool:
        return self.sig is not None

    def signing_bytes(self, key_id: str) -> bytes:
        """What the signature covers: the signed line without "sig"."""
        return canonical_json(
            {**self.unsigned_wire(), "v": SIGNED_VERSION, "id": self.id, "key_id": key_id}
        )

    def wire(self) -> dict[str, Any]:
        """The wire object: version 1 when unsigned, version 2 with key_id and sig."""
        wire = {**self.unsigned_wire(), "id": self.id}
        if self.key_id is not None and self.sig is not None:
            wire.update(v=SIGNED_VERSION, key_id=self.key_id, sig=self.sig)
        return wire

    @cached_property
    def wire_bytes(self) -> bytes:
        """The entry's canonical line, without the newline."""
        return canonical_json(self.wire())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EntryBase):
            return NotImplemented
        return self.wire_bytes == other.wire_bytes

    def __hash__(self) -> int:
        return hash(self.wire_bytes)

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> Self:
        """Build the entry from its wire object; InvalidEntry names the bad field."""
        expected = {*ENVELOPE_FIELDS, *cls.RULES}
        if obj.get("v") == SIGNED_VERSION:
            expected.update(SIGNATURE_FIELDS)
        missing = sorted(expected - obj.keys() - cls.OPTIONAL.keys())
        if missing:
            raise InvalidEntry(f"{cls.KIND} entry: missing field(s) {', '.join(missing)}")
        unexpected = sorted(obj.keys() - expected)
        if unexpected:
            raise InvalidEntry(f"{cls.KIND} entry: unexpected field(s) {', '.join(unexpected)}")
        values: dict[str, Any] = {}
        for name in cls.RULES:
            decode = cls.WIRE_DECODERS.get(name)
            if name not in obj:
                values[name] = cls.OPTIONAL[name]
                continue
            try:
                values[name] = obj[name] if decode is None else decode(name, obj[name])
            except InvalidEntry as exc:
                raise _prefixed(exc, f"{cls.KIND} entry") from None
        return cls(
            hlc=obj["hlc"],
            origin=obj["origin"],
            key_id=obj.get("key_id"),
            sig=obj.get("sig"),
            **values,
        )


def check_signature_fields(key_id: Any, sig: Any) -> None:
    """Both absent, or a key id and a base64 Ed25519 signature; InvalidEntry otherwise."""
    if key_id is None and sig is None:
        return
    if not isinstance(key_id, str) or _KEY_ID_RE.fullmatch(key_id) is None:
        raise _fail("key_id", f"expected {KEY_ID_HEX_LEN} lowercase hex digits, got {key_id!r}")
    if not isinstance(sig, str) or _SIG_RE.fullmatch(sig) is None:
        raise _fail("sig", f"expected {SIGNATURE_B64_LEN} characters of base64, got {sig!r}")


@dataclass(frozen=True, eq=False, kw_only=True)
class AssertEntry(EntryBase):
    """A chunk, content-addressed, with its embedding so peers need not re-embed it."""

    KIND: ClassVar[str] = "assert"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "content_hash": _hash,
        "title": _TITLE,
        "content": _text_within(CONTENT_MAX_CHARS),
        "obs_type": _LABEL,
        "project": _OPTIONAL_LABEL,
        "scope": _LABEL,
        "topic_key": _OPTIONAL_LABEL,
        "session_id": _OPTIONAL_LABEL,
        "tool_name": _OPTIONAL_LABEL,
        "chunk_kind": _LABEL,
        "pin_floor": _unit_interval,
        "embedding": _embedding,
        "model_id": _LABEL,
        "index_version": _text_within(INDEX_VERSION_MAX_CHARS, required=True),
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"embedding": _embedding_from_wire}

    content_hash: str
    title: str
    content: str
    obs_type: str
    project: str | None
    scope: str
    topic_key: str | None
    session_id: str | None
    tool_name: str | None
    chunk_kind: str
    pin_floor: float
    embedding: Embedding = field(repr=False)
    model_id: str
    index_version: str


@dataclass(frozen=True, eq=False, kw_only=True)
class SupersedeEntry(EntryBase):
    """`new_hash` replaces `old_hash`: the new chunk inherits salience, the old is tombstoned."""

    KIND: ClassVar[str] = "supersede"
    RULES: ClassVar[Mapping[str, Rule]] = {"old_hash": _hash, "new_hash": _hash, "reason": _REASON}

    old_hash: str
    new_hash: str
    reason: str

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.old_hash == self.new_hash:
            raise InvalidEntry(
                f"supersede entry: a chunk cannot supersede itself ({self.old_hash})"
            )


@dataclass(frozen=True, eq=False, kw_only=True)
class ReconsolidateEntry(EntryBase):
    """Metadata changes to an existing chunk (only RECONSOLIDATE_FIELDS)."""

    KIND: ClassVar[str] = "reconsolidate"
    RULES: ClassVar[Mapping[str, Rule]] = {"content_hash": _hash, "changes": _changes}

    content_hash: str
    changes: Mapping[str, ChangeValue]


@dataclass(frozen=True, eq=False, kw_only=True)
class TombstoneEntry(EntryBase):
    """A permanent retraction; a Forget pulse, if any, travels with it."""

    KIND: ClassVar[str] = "tombstone"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "content_hash": _hash,
        "reason": _REASON,
        "collectable_after_ms": _optional_ms,
        "forget_pulse": _optional_forget_pulse,
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"forget_pulse": _optional_pulse_from_wire}

    content_hash: str
    reason: str
    collectable_after_ms: int | None
    forget_pulse: SalientPulse | None

    def __post_init__(self) -> None:
        super().__post_init__()
        pulse = self.forget_pulse
        if pulse is not None and pulse.seed_hash not in (None, self.content_hash):
            raise InvalidEntry(
                f"tombstone entry: forget pulse seed_hash {pulse.seed_hash} "
                f"differs from content_hash {self.content_hash}"
            )


@dataclass(frozen=True, eq=False, kw_only=True)
class PulseEntry(EntryBase):
    """A Reward or Decay pulse; its id is the pulse's own content id."""

    KIND: ClassVar[str] = "salience_pulse"
    RULES: ClassVar[Mapping[str, Rule]] = {"pulse": _pulse}
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"pulse": _pulse_from_wire}

    pulse: SalientPulse

    def computed_id(self) -> str:
        return self.pulse.pulse_id


@dataclass(frozen=True, eq=False, kw_only=True)
class OutcomeEntry(EntryBase):
    """A decision's observed result (seed section 7); its time is the envelope hlc."""

    KIND: ClassVar[str] = "outcome"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "decision_hash": _hash,
        "reward": _number,
        "observer_peer": _peer,
        "reason": _REASON,
        "cited": _hash_tuple,
    }
    OPTIONAL: ClassVar[Mapping[str, Any]] = {"cited": ()}

    decision_hash: str
    reward: float
    observer_peer: str
    reason: str
    #: The recalled chunks the decision actually used; only they are credited.
    cited: tuple[str, ...] = ()


@dataclass(frozen=True, eq=False, kw_only=True)
class RetrievalKeyEntry(EntryBase):
    """A credited outcome teaching a chunk a question it answers (or unlearning one).

    The query travels as its embedding; its words only when the deciding peer is
    configured to share them.
    """

    KIND: ClassVar[str] = "retrieval_key"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "decision_hash": _hash,
        "chunk_hash": _hash,
        "embedding": _embedding,
        "text": _text_within(DECISION_TEXT_MAX_CHARS, optional=True),
        "amount": _number,
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"embedding": _embedding_from_wire}

    decision_hash: str
    chunk_hash: str
    embedding: Embedding = field(repr=False)
    text: str | None
    amount: float

    def __post_init__(self) -> None:
        super().__post_init__()
        if not -1.0 <= self.amount <= 1.0:
            raise InvalidEntry(f"retrieval_key entry: amount {self.amount} is outside [-1, 1]")


@dataclass(frozen=True, eq=False, kw_only=True)
class AttributionEntry(EntryBase):
    """Which chunks were in context when a decision was made."""

    KIND: ClassVar[str] = "attribution"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "decision_hash": _hash,
        "chunk_hashes": _hash_tuple,
        "decision_text": _text_within(DECISION_TEXT_MAX_CHARS),
    }

    decision_hash: str
    chunk_hashes: tuple[str, ...]
    decision_text: str


Entry: TypeAlias = (
    AssertEntry
    | SupersedeEntry
    | ReconsolidateEntry
    | TombstoneEntry
    | PulseEntry
    | OutcomeEntry
    | AttributionEntry
    | RetrievalKeyEntry
)

ENTRY_TYPES: Final[Mapping[str, type[Entry]]] = MappingProxyType(
    {
        cls.KIND: cls
        for cls in (
            AssertEntry,
            SupersedeEntry,
            ReconsolidateEntry,
            TombstoneEntry,
            PulseEntry,
            OutcomeEntry,
            AttributionEntry,
            RetrievalKeyEntry,
        )
    }
)


# ---- entries and segments -----------------------------------------------------------


def encode_entry(entry: Entry) -> dict[str, Any]:
    """The wire object of `entry`, envelope (and signature, if any) included."""
    return entry.wire()


def _readable(version: Any) -> bool:
    # Any JSON value may stand here: an object or a list is not hashable.
    return (
        isinstance(version, int) and not isinstance(version, bool) and version in READABLE_VERSIONS
    )


def decode_entry(obj: Mapping[str, Any]) -> Entry:
    """One wire object of a readable version and a known kind; InvalidEntry otherwise."""
    version = obj.get("v")
    if not _readable(version):
        raise InvalidEntry(f"format version {version!r} is not one of {sorted(READABLE_VERSIONS)}")
    if obj.get("kind") == SEAL_KIND:
        raise InvalidEntry("a segment seal is not an entry")
    kind = obj.get("kind")
    entry_type = ENTRY_TYPES.get(kind) if isinstance(kind, str) else None
    if entry_type is None:
        raise InvalidEntry(f"unknown entry kind {kind!r}")
    claimed_id = obj.get("id")
    if not isinstance(claimed_id, str) or _ID_RE.fullmatch(claimed_id) is None:
        raise InvalidEntry(f"field 'id': expected {ENTRY_ID_HEX_LEN} lowercase hex digits")
    entry = entry_type.from_wire(obj)
    try:
        entry_id = entry.id
    except ValueError as exc:
        # A value no canonical line can hold (NaN or infinity inside a forget pulse).
        raise InvalidEntry(f"{entry.KIND} entry: not canonical JSON: {exc}") from None
    if entry_id != claimed_id:
        raise InvalidEntry(
            f"id mismatch: the line says {claimed_id}, its content hashes to {entry_id}"
        )
    return entry


def entry_order_key(entry: Entry) -> tuple[int, str, str]:
    """The deterministic interleave order of entries from every peer: (hlc, origin, id)."""
    return (entry.hlc, entry.origin, entry.id)


@dataclass(frozen=True)
class RejectedLine:
    """A line that could not be decoded; `line_no` counts from 1."""

    line_no: int
    reason: str
    refusal: Refusal = Refusal.MALFORMED_LINE


@dataclass
class DecodedSegment:
    """What one segment held.

    `skipped` counts entries this version does not understand, by reason
    ("unknown_version:2", "unknown_kind:foo"); `unknown` keeps their raw objects
    so compaction can carry them forward for newer peers.
    """

    entries: list[Entry] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    rejected: list[RejectedLine] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    #: The writer's seal, if the segment has one, and the digest of the lines it covers.
    seal: SegmentSeal | None = None
    body_digest: str = ""


@dataclass(frozen=True)
class SegmentSeal:
    """A segment's first line: who wrote it, under which object key, over which lines."""

    signer: str
    key_id: str
    object_key: str
    #: blake3 (hex) of every byte after the seal line.
    digest: str
    sig: str

    def signing_bytes(self) -> bytes:
        return canonical_json(self.unsigned_wire())

    def unsigned_wire(self) -> dict[str, Any]:
        return {
            "v": SIGNED_VERSION,
            "kind": SEAL_KIND,
            "signer": self.signer,
            "key_id": self.key_id,
            "object": self.object_key,
            "digest": self.digest,
        }

    def wire_bytes(self) -> bytes:
        return canonical_json({**self.unsigned_wire(), "sig": self.sig})

    @classmethod
    def from_wire(cls, obj: Mapping[str, Any]) -> SegmentSeal:
        expected = {"v", "kind", "signer", "key_id", "object", "digest", "sig"}
        if obj.keys() != expected:
            raise InvalidEntry(
                f"segment seal: fields must be exactly {', '.join(sorted(expected))}"
            )
        check_signature_fields(obj["key_id"], obj["sig"])
        if not all(isinstance(obj[name], str) for name in ("object", "digest")):
            raise InvalidEntry("segment seal: object and digest must be strings")
        return cls(
            signer=_peer("signer", obj["signer"]),
            key_id=obj["key_id"],
            object_key=obj["object"],
            digest=obj["digest"],
            sig=obj["sig"],
        )


#: Seals a segment: given the digest of its lines, the seal to put before them.
Sealer: TypeAlias = Callable[[str], SegmentSeal]


def payload_digest(payload: bytes) -> str:
    return blake3.blake3(payload).hexdigest()


def encode_segment(
    entries: Iterable[Entry],
    unknown: Iterable[Mapping[str, Any]] = (),
    *,
    seal: Sealer | None = None,
) -> bytes:
    """Gzip'd ndjson; the same entries always give the same bytes (gzip mtime 0)."""
    lines = [entry.wire_bytes for entry in entries]
    lines.extend(canonical_json(obj) for obj in unknown)
    payload = b"".join(line + b"\n" for line in lines)
    if seal is not None:
        payload = seal(payload_digest(payload)).wire_bytes() + b"\n" + payload
    return gzip.compress(payload, mtime=0)


def _skip_reason(obj: Mapping[str, Any]) -> str | None:
    """Why a structurally sound object is not for this version to decode, if so."""
    version = obj["v"]
    if version == SIGNED_VERSION and obj.get("kind") == SEAL_KIND:
        # A seal anywhere but the first line (copied along by an older compactor).
        return "misplaced_seal"
    if not _readable(version):
        return f"unknown_version:{version}"
    kind = obj.get("kind")
    if isinstance(kind, str) and kind not in ENTRY_TYPES:
        return f"unknown_kind:{kind[:MAX_KIND_LABEL]}"
    return None


def parse_json(line: str | bytes) -> Any:
    """The JSON value of one line; ValueError for anything that is not plain JSON.

    NaN and infinities are refused (no canonical line can hold them), and so is nesting
    too deep for the parser: one hostile line must not fail a whole segment.
    """
    try:
        return json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _decode_line(line: str, line_no: int, into: DecodedSegment) -> None:
    try:
        obj = parse_json(line)
    except ValueError as exc:
        into.rejected.append(RejectedLine(line_no, f"invalid JSON: {exc}"))
        return
    if not isinstance(obj, dict):
        problem = f"expected a JSON object, got {_type_name(obj)}"
        into.rejected.append(RejectedLine(line_no, problem))
        return
    version = obj.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        into.rejected.append(RejectedLine(line_no, "field 'v': expected an integer version"))
        return
    skip = _skip_reason(obj)
    if skip is not None:
        into.skipped[skip] += 1
        if skip != "misplaced_seal":
            into.unknown.append(obj)
        return
    try:
        into.entries.append(decode_entry(obj))
    except InvalidEntry as exc:
        into.rejected.append(RejectedLine(line_no, str(exc), exc.refusal))


class _LineReader:
    """The lines of a gzip'd payload, one at a time, within SegmentLimits.

    Yields each non-empty line without its newline (None when it was longer than
    MAX_LINE_BYTES and was skipped); `lines` counts every line so far, empty ones too,
    which are skipped a buffer at a time rather than one by one. Once `hasher` is set,
    every byte read after is hashed, so a seal can be checked without holding the payload.
    """

    def __init__(self, data: bytes, limits: SegmentLimits) -> None:
        self.limits = limits
        self._stream = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
        self.expanded = 0
        self.lines = 0
        self.hasher: Any = None

    def _read(self, size: int) -> bytes:
        return self._counted(self._stream.readline(size))

    def _counted(self, chunk: bytes) -> bytes:
        self.expanded += len(chunk)
        if self.expanded > self.limits.expanded_bytes:
            raise CorruptSegment(
                f"segment expands beyond {self.limits.expanded_bytes} bytes",
                Refusal.SEGMENT_TOO_LARGE,
            )
        if self.hasher is not None:
            self.hasher.update(chunk)
        return chunk

    def __iter__(self) -> Iterator[bytes | None]:
        with self._stream:
            while True:
                self._skip_empty_lines()
                line = self._read(MAX_LINE_BYTES + 1)
                if not line:
                    return
                self._count_lines(1)
                if line.endswith(b"\n"):
                    yield line[:-1]
                elif len(line) <= MAX_LINE_BYTES:
                    yield line  # the last line, without a newline
                else:
                    self._skip_rest_of_line()
                    yield None

    def _count_lines(self, count: int) -> None:
        self.lines += count
        if self.lines > self.limits.lines:
            raise CorruptSegment(
                f"segment has more than {self.limits.lines} lines",
                Refusal.SEGMENT_TOO_MANY_LINES,
            )

    def _skip_empty_lines(self) -> None:
        # A run of newlines costs one step per buffer, not one per line (a megabyte of
        # them would otherwise take seconds).
        while True:
            ahead = self._stream.peek(1)
            run = len(ahead) - len(ahead.lstrip(b"\n"))
            if run == 0:
                return
            self._count_lines(len(self._counted(self._stream.read(run))))

    def _skip_rest_of_line(self) -> None:
        while True:
            chunk = self._read(_SKIP_CHUNK_BYTES)
            if not chunk or chunk.endswith(b"\n"):
                return


def decode_segment(data: bytes, limits: SegmentLimits = SEGMENT_LIMITS) -> DecodedSegment:
    """Every line of a segment, read lazily within `limits`.

    Raises CorruptSegment (its `refusal` says why) for a segment that is not gzip'd
    UTF-8, or is beyond `limits`; a line beyond a limit is rejected alone.
    """
    if len(data) > limits.compressed_bytes:
        raise CorruptSegment(
            f"segment has {len(data)} bytes, more than the limit of {limits.compressed_bytes}",
            Refusal.SEGMENT_TOO_LARGE,
        )
    decoded = DecodedSegment()
    reader = _LineReader(data, limits)
    try:
        for raw in reader:
            line_no = reader.lines
            if raw is None:
                problem = f"line is longer than {MAX_LINE_BYTES} bytes"
                decoded.rejected.append(RejectedLine(line_no, problem, Refusal.LINE_TOO_LONG))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptSegment(f"segment is not UTF-8 text: {exc}") from None
            if line_no == 1:
                reader.hasher = blake3.blake3()
                seal = _seal_or_none(line) if line.startswith("{") else None
                if seal is not None:
                    decoded.seal = seal
                    continue
            if line.strip():
                _decode_line(line, line_no, decoded)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorruptSegment(f"segment is not valid gzip: {exc or type(exc).__name__}") from None
    if decoded.seal is not None:
        decoded.body_digest = reader.hasher.hexdigest()
    return decoded


def _seal_or_none(line: str) -> SegmentSeal | None:
    """The seal a first line holds; None when it is an ordinary line (or a broken seal,
    which then counts as no seal: the receiver's policy decides about unsealed segments)."""
    try:
        obj = parse_json(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("kind") != SEAL_KIND or obj.get("v") != SIGNED_VERSION:
        return None
    try:
        return SegmentSeal.from_wire(obj)
    except InvalidEntry:
        return None
