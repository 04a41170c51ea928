"""Validation of entry fields: one rule per field, and the wire form of each value.

A rule takes a field's name and value and returns the value the entry keeps
(normalised), or raises InvalidEntry (OverLimit past a protocol limit) naming the
field. Fields whose JSON form differs from their Python value (embeddings, pulses)
have a wire decoder that runs before the rule, and `to_wire` for the way back.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, Final, TypeAlias

import numpy as np

from dreamcycle.pulses.constants import (
    ATTRIBUTION_MAX_CHUNKS,
    EMBEDDING_DIM_MAX,
    INDEX_VERSION_MAX_CHARS,
    REASON_MAX_CHARS,
)
from dreamcycle.pulses.pulse import InvalidPulse, PulseKind, SalientPulse
from dreamcycle.pulses.vectors import Vector
from dreamcycle.zeitgeist._entry_wire import (
    HASH_HEX_LEN,
    KEY_ID_HEX_LEN,
    LABEL_MAX_CHARS,
    SIGNATURE_B64_LEN,
    TITLE_MAX_CHARS,
    InvalidEntry,
    OverLimit,
)
from dreamcycle.zeitgeist.object_keys import InvalidPeerId, validate_peer_id

#: The fields a reconsolidate entry may change; anything else needs a new assert.
RECONSOLIDATE_FIELDS: Final = frozenset({"title", "topic_key", "pin_floor", "importance"})

_HASH_RE: Final = re.compile(rf"[0-9a-f]{{{HASH_HEX_LEN}}}")
_KEY_ID_RE: Final = re.compile(rf"[0-9a-f]{{{KEY_ID_HEX_LEN}}}")
_SIG_RE: Final = re.compile(rf"[A-Za-z0-9+/]{{{SIGNATURE_B64_LEN - 2}}}==")

Embedding = Vector
ChangeValue: TypeAlias = str | float | None


def prefixed(exc: InvalidEntry, prefix: str) -> InvalidEntry:
    """`exc` with `prefix` before its message, of the same class (so its refusal holds)."""
    return type(exc)(f"{prefix}: {exc}")


Rule = Callable[[str, Any], Any]


def _fail(name: str, problem: str) -> InvalidEntry:
    return InvalidEntry(f"field {name!r}: {problem}")


def type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _fail(name, f"expected a string, got {type_name(value)}")
    return value


def _name(name: str, value: Any) -> str:
    if not _text(name, value):
        raise _fail(name, "must not be empty")
    return str(value)


def finite_number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _fail(name, f"expected a number, got {type_name(value)}")
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


def text_within(limit: int, *, required: bool = False, optional: bool = False) -> Rule:
    """A rule for text of at most `limit` characters (non-empty if `required`, or null if
    `optional`)."""

    def rule(name: str, value: Any) -> str | None:
        if optional and value is None:
            return None
        text = _name(name, value) if required else _text(name, value)
        return _check_chars(name, text, limit)

    return rule


def _optional_number(name: str, value: Any) -> float | None:
    return None if value is None else finite_number(name, value)


def unit_interval(name: str, value: Any) -> float:
    number = finite_number(name, value)
    if not 0.0 <= number <= 1.0:
        raise _fail(name, f"must be in [0, 1], got {number}")
    return number


def optional_ms(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _fail(name, f"expected null or a non-negative integer, got {value!r}")
    return value


def hex_hash(name: str, value: Any) -> str:
    if not isinstance(value, str) or _HASH_RE.fullmatch(value) is None:
        raise _fail(name, f"expected {HASH_HEX_LEN} lowercase hex digits, got {value!r}")
    return value


def hash_tuple(name: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple):
        raise _fail(name, f"expected a list of hashes, got {type_name(value)}")
    if len(value) > ATTRIBUTION_MAX_CHUNKS:
        raise _over(name, f"{len(value)} hashes, more than the limit of {ATTRIBUTION_MAX_CHUNKS}")
    return tuple(hex_hash(f"{name}[{i}]", item) for i, item in enumerate(value))


def peer_id(name: str, value: Any) -> str:
    try:
        return validate_peer_id(value)
    except InvalidPeerId as exc:
        raise _fail(name, str(exc)) from None


def embedding(name: str, value: Any) -> Embedding:
    if not isinstance(value, np.ndarray):
        raise _fail(name, f"expected a float32 vector, got {type_name(value)}")
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


def salient_pulse(name: str, value: Any) -> SalientPulse:
    if not isinstance(value, SalientPulse):
        raise _fail(name, f"expected a SalientPulse, got {type_name(value)}")
    if value.pulse_id != value.computed_id():
        raise _fail(name, f"pulse_id {value.pulse_id!r} does not match its content (use with_id())")
    return value


def optional_forget_pulse(name: str, value: Any) -> SalientPulse | None:
    if value is None:
        return None
    pulse = salient_pulse(name, value)
    if pulse.kind is not PulseKind.FORGET:
        raise _fail(name, f"a tombstone carries only a forget pulse, got {pulse.kind.value}")
    return pulse


TITLE: Final = text_within(TITLE_MAX_CHARS)
LABEL: Final = text_within(LABEL_MAX_CHARS, required=True)
OPTIONAL_LABEL: Final = text_within(LABEL_MAX_CHARS, optional=True)
REASON: Final = text_within(REASON_MAX_CHARS)

_CHANGE_RULES: Final[Mapping[str, Rule]] = {
    "title": TITLE,
    "topic_key": OPTIONAL_LABEL,
    "pin_floor": unit_interval,
    "importance": _optional_number,
}


def changes(name: str, value: Any) -> Mapping[str, ChangeValue]:
    if not isinstance(value, Mapping):
        raise _fail(name, f"expected an object, got {type_name(value)}")
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


def embedding_from_wire(name: str, value: Any) -> Embedding:
    if not isinstance(value, str):
        raise _fail(name, f"expected base64 text, got {type_name(value)}")
    if len(value) > _EMBEDDING_B64_MAX_CHARS:
        raise _over(name, f"more than the limit of {EMBEDDING_DIM_MAX} float32 values")
    try:
        raw = base64.b64decode(value, validate=True)
    except ValueError as exc:
        raise _fail(name, f"invalid base64: {exc}") from None
    if len(raw) % 4:
        raise _fail(name, f"{len(raw)} bytes is not a whole number of float32 values")
    return np.frombuffer(raw, dtype="<f4").astype(np.float32)


def pulse_from_wire(name: str, value: Any) -> SalientPulse:
    if not isinstance(value, dict):
        raise _fail(name, f"expected a pulse object, got {type_name(value)}")
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


def optional_pulse_from_wire(name: str, value: Any) -> SalientPulse | None:
    return None if value is None else pulse_from_wire(name, value)


def to_wire(value: Any) -> Any:
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


def check_signature_fields(key_id: Any, sig: Any) -> None:
    """Both absent, or a key id and a base64 Ed25519 signature; InvalidEntry otherwise."""
    if key_id is None and sig is None:
        return
    if not isinstance(key_id, str) or _KEY_ID_RE.fullmatch(key_id) is None:
        raise _fail("key_id", f"expected {KEY_ID_HEX_LEN} lowercase hex digits, got {key_id!r}")
    if not isinstance(sig, str) or _SIG_RE.fullmatch(sig) is None:
        raise _fail("sig", f"expected {SIGNATURE_B64_LEN} characters of base64, got {sig!r}")
