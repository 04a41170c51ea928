"""The SalientPulse wire type, its canonical bytes, id, invariants and bounds.

The convergence invariants (decay_per_hop * k < 1, max_hops <= floor(-ln(epsilon) / sigma))
keep a pulse's series finite, not small: strength 1e308 with k 255, max_hops 23 and
decay_per_hop 0.0039 satisfies both and drives every chunk it reaches to zero. So
`validate` also checks bounds (constants in pulses/constants.py), chosen from what the
project itself emits and what its interfaces document:

* outcomes (pulses/outcome.py) seed one pulse per credited chunk with strength |credit|
  <= |reward| <= 1 (pulses/credit.py only scales rewards down), sigma 0.15, k 3,
  max_hops 2, decay_per_hop 0.3: at most 1 * (3 * 0.3 + 9 * 0.09) = 1.71 moved;
* reinforce / penalize (daemon/api) have the outcome's shape, strength at most 1
  (0.5 by default): again at most 1.71;
* `pulse-emit pulse` defaults (daemon/defaults/pulses.py) are strength 0.3, sigma 0.3, k 3,
  max_hops 2, decay_per_hop 0.3: 0.51 moved;
* a tombstone's Forget pulse has infinite strength and max_hops 0: BFS moves nothing
  (the tombstone itself does the forgetting), so its strength is not bounded;
* the API documents (docs/api.md, daemon/api/edit_models.py) strength in (0, 1], sigma
  in (0, 10], k in 1..64, max_hops in 0..16, a ttl of at most ten years and reasons of at
  most 1000 characters.

Hence STRENGTH_MAX 1 (a pulse's strength is a reward's magnitude), K_MAX 64,
MAX_HOPS_MAX 16, SIGMA_MAX 10 (distances never exceed 2, so wider kernels are all flat),
TTL_MAX_S ten years and REASON_MAX_CHARS 1000: each the documented range, which every
pulse above sits inside. The CLI, the API and receipt apply the same numbers, so a
request is refused alike whichever way it travels. decay_per_hop needs no constant of
its own: the convergence invariant keeps it below 1 / k, and it enters the bound below.

Per field, those ranges still allow strength 1 along a chain of 16 hops with k 1 and
decay_per_hop 0.99: about 15 chunks' worth of salience. `moved_salience_bound` is the
worst case of propagation (pulses/propagate.py): hop h reaches at most k ** h chunks,
each changed by at most strength * decay_per_hop ** h (the kernel is at most 1, the
clamp only shortens a change), so a pulse moves at most
strength * sum_{h=1..max_hops} (k * decay_per_hop) ** h. MOVED_SALIENCE_MAX is 4: 2.3
times the largest the project emits (1.71), and at most four chunks taken from full
salience to none by one pulse. A peer that sends many pulses is held by a budget per
origin and cycle (pulses/budget.py).

Peer ids are at most 64 characters (daemon/config/host.py), index versions are a model id and
its width, seed hashes are blake3 content hashes, embeddings are 384 wide today: their
bounds (128, 256, 64 hex digits, 4096) leave room without letting one pulse be huge.
"""

from __future__ import annotations

import base64
import enum
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final, TypeVar

import blake3
import numpy as np
import numpy.typing as npt

from dreamcycle.pulses.constants import (
    EMBEDDING_DIM_MAX,
    EPSILON,
    INDEX_VERSION_MAX_CHARS,
    K_MAX,
    MAX_HOPS_MAX,
    MOVED_SALIENCE_MAX,
    PEER_ID_MAX_CHARS,
    PULSE_ID_BYTES,
    REASON_MAX_CHARS,
    SIGMA_MAX,
    SIGMA_MIN,
    STRENGTH_MAX,
    TTL_MAX_S,
)

#: A seed hash is a blake3 content hash: 64 lowercase hex digits.
_SEED_HASH: Final = re.compile(r"[0-9a-f]{64}")

T = TypeVar("T")


class PulseKind(enum.StrEnum):
    REWARD = "reward"
    DECAY = "decay"
    FORGET = "forget"

    @property
    def sign(self) -> float:
        return 1.0 if self is PulseKind.REWARD else -1.0


class InvalidPulse(ValueError):
    """A pulse that breaks an invariant; the message names the field and the rule."""


@dataclass(frozen=True)
class SalientPulse:
    """One salience pulse. `pulse_id` is derived from every other field.

    `ts` is the hybrid logical clock of the emitting peer (physical ms << 16 | counter);
    `ttl_s` is in seconds; `seed_embedding` is float32, unit-normalised by the emitter.
    """

    seed_embedding: npt.NDArray[np.float32] = field(compare=False, repr=False)
    kind: PulseKind
    strength: float
    sigma: float
    max_hops: int
    k: int
    decay_per_hop: float
    ts: int
    origin_peer: str
    reason: str
    ttl_s: float
    index_version: str
    seed_hash: str | None = None
    pulse_id: str = ""

    # ---- canonical encoding -------------------------------------------------

    def body(self) -> dict[str, Any]:
        """Every field but pulse_id, as JSON-ready values (embedding as base64 LE float32)."""
        emb = np.ascontiguousarray(self.seed_embedding, dtype="<f4")
        strength: float | str = float(self.strength) if math.isfinite(self.strength) else "inf"
        return {
            "seed_embedding": base64.b64encode(emb.tobytes()).decode("ascii"),
            "dim": int(emb.shape[0]),
            "seed_hash": self.seed_hash,
            "kind": self.kind.value,
            "strength": strength,
            "sigma": float(self.sigma),
            "max_hops": int(self.max_hops),
            "k": int(self.k),
            "decay_per_hop": float(self.decay_per_hop),
            "ts": int(self.ts),
            "origin_peer": self.origin_peer,
            "reason": self.reason,
            "ttl_s": float(self.ttl_s),
            "index_version": self.index_version,
        }

    def canonical_bytes(self) -> bytes:
        return json.dumps(self.body(), sort_keys=True, separators=(",", ":")).encode("utf-8")

    def computed_id(self) -> str:
        return blake3.blake3(self.canonical_bytes()).digest(length=PULSE_ID_BYTES).hex()

    def with_id(self) -> SalientPulse:
        """This pulse with `pulse_id` set from its canonical bytes."""
        return replace(self, pulse_id=self.computed_id())

    def to_json(self) -> dict[str, Any]:
        return {**self.body(), "pulse_id": self.pulse_id}

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> SalientPulse:
        """Decode and verify a received pulse. Raises InvalidPulse naming the field at fault.

        Every conversion is guarded: a hostile value (a number too large for a float, an
        infinite dim, a list where text belongs) is an InvalidPulse, never another error.
        """
        if not isinstance(obj, dict):
            raise InvalidPulse(f"a pulse is a JSON object, got {type(obj).__name__}")
        raw = _field(obj, "seed_embedding", lambda text: base64.b64decode(text, validate=True))
        if len(raw) % 4:
            raise InvalidPulse("seed_embedding: length is not a multiple of 4 bytes")
        emb = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        dim = _field(obj, "dim", int)
        if dim != emb.shape[0]:
            raise InvalidPulse(f"dim {dim} does not match seed_embedding ({emb.shape[0]})")
        seed_hash = None if obj.get("seed_hash") is None else _field(obj, "seed_hash", str)
        pulse = cls(
            seed_embedding=emb,
            kind=_field(obj, "kind", PulseKind),
            strength=_field(obj, "strength", _strength),
            sigma=_field(obj, "sigma", float),
            max_hops=_as_int(_field(obj, "max_hops", _identity), "max_hops"),
            k=_as_int(_field(obj, "k", _identity), "k"),
            decay_per_hop=_field(obj, "decay_per_hop", float),
            ts=_as_int(_field(obj, "ts", _identity), "ts"),
            origin_peer=_field(obj, "origin_peer", str),
            reason=_field(obj, "reason", str),
            ttl_s=_field(obj, "ttl_s", float),
            index_version=_field(obj, "index_version", str),
            seed_hash=seed_hash,
            pulse_id=_field(obj, "pulse_id", str),
        )
        if pulse.pulse_id != pulse.computed_id():
            raise InvalidPulse(f"pulse_id {preview(pulse.pulse_id)} does not match its content")
        return pulse

    # ---- invariants ---------------------------------------------------------

    def validate(self) -> None:
        """Check every invariant of a pulse (convergence, ranges), and the bounds
        of the module docstring."""
        validate_parameters(
            kind=self.kind,
            strength=self.strength,
            sigma=self.sigma,
            max_hops=self.max_hops,
            k=self.k,
            decay_per_hop=self.decay_per_hop,
            ttl_s=self.ttl_s,
            reason=self.reason,
        )
        emb = self.seed_embedding
        if emb.ndim != 1 or emb.shape[0] == 0:
            raise InvalidPulse("seed_embedding must be a non-empty vector")
        if emb.shape[0] > EMBEDDING_DIM_MAX:
            raise InvalidPulse(
                f"seed_embedding has {emb.shape[0]} dimensions, more than the limit of "
                f"{EMBEDDING_DIM_MAX}"
            )
        if not np.all(np.isfinite(emb)):
            raise InvalidPulse("seed_embedding contains NaN or infinity")
        if not self.origin_peer:
            raise InvalidPulse("origin_peer must not be empty")
        check_length("origin_peer", self.origin_peer, PEER_ID_MAX_CHARS)
        check_length("index_version", self.index_version, INDEX_VERSION_MAX_CHARS)
        if self.seed_hash is not None and not _SEED_HASH.fullmatch(self.seed_hash):
            raise InvalidPulse(
                f"seed_hash must be 64 lowercase hex digits, got {preview(self.seed_hash)}"
            )

    def moved_salience_bound(self) -> float:
        """The most salience this pulse can move; see the function of that name."""
        return moved_salience_bound(
            strength=self.strength,
            k=self.k,
            max_hops=self.max_hops,
            decay_per_hop=self.decay_per_hop,
        )

    def is_expired(self, now_ms: int) -> bool:
        return (self.ts >> 16) + self.ttl_s * 1000.0 < now_ms


def max_hops_allowed(sigma: float, epsilon: float = EPSILON) -> int:
    """floor(-ln(epsilon) / sigma): the deepest BFS worth running at this width."""
    return math.floor(-math.log(epsilon) / sigma)


def validate_parameters(
    *,
    kind: PulseKind,
    strength: float,
    sigma: float,
    max_hops: int,
    k: int,
    decay_per_hop: float,
    ttl_s: float,
    reason: str = "",
) -> None:
    """Raise InvalidPulse naming the first broken rule; used at emit and at receipt.

    The convergence invariants first, then the bounds of the module docstring.
    """
    if kind is PulseKind.FORGET:
        if max_hops != 0:
            raise InvalidPulse(f"forget pulses must have max_hops = 0, got {max_hops}")
    else:
        if not math.isfinite(strength) or strength < 0:
            raise InvalidPulse(f"strength must be finite and >= 0, got {strength}")
    if not (math.isfinite(sigma) and sigma >= SIGMA_MIN):
        raise InvalidPulse(f"sigma must be finite and >= {SIGMA_MIN:g}, got {sigma}")
    if k < 1 or k > 255:
        raise InvalidPulse(f"k must be in 1..255, got {k}")
    if max_hops < 0 or max_hops > 255:
        raise InvalidPulse(f"max_hops must be in 0..255, got {max_hops}")
    if not (math.isfinite(decay_per_hop) and decay_per_hop >= 0):
        raise InvalidPulse(f"decay_per_hop must be finite and >= 0, got {decay_per_hop}")
    if decay_per_hop * k >= 1:
        raise InvalidPulse(
            "decay_per_hop * k must be < 1 (convergence), "
            f"got {decay_per_hop} * {k} = {decay_per_hop * k:g}"
        )
    limit = max_hops_allowed(sigma)
    if max_hops > limit:
        raise InvalidPulse(
            f"max_hops {max_hops} exceeds floor(-ln({EPSILON:g}) / sigma) = {limit} "
            f"for sigma {sigma}"
        )
    if not (math.isfinite(ttl_s) and ttl_s > 0):
        raise InvalidPulse(f"ttl must be > 0 seconds, got {ttl_s}")
    if kind is not PulseKind.FORGET and strength > STRENGTH_MAX:
        raise InvalidPulse(f"strength {strength:g} exceeds the limit of {STRENGTH_MAX:g}")
    if k > K_MAX:
        raise InvalidPulse(f"k {k} exceeds the limit of {K_MAX}")
    if max_hops > MAX_HOPS_MAX:
        raise InvalidPulse(f"max_hops {max_hops} exceeds the limit of {MAX_HOPS_MAX}")
    if sigma > SIGMA_MAX:
        raise InvalidPulse(f"sigma {sigma:g} exceeds the limit of {SIGMA_MAX:g}")
    if ttl_s > TTL_MAX_S:
        raise InvalidPulse(f"ttl {ttl_s:g} s exceeds the limit of {TTL_MAX_S:g} s")
    moved = moved_salience_bound(
        strength=strength, k=k, max_hops=max_hops, decay_per_hop=decay_per_hop
    )
    if moved > MOVED_SALIENCE_MAX:
        raise InvalidPulse(
            f"strength {strength:g}, k {k}, max_hops {max_hops} and decay_per_hop "
            f"{decay_per_hop:g} may move {moved:.3g} salience in all, more than the limit of "
            f"{MOVED_SALIENCE_MAX:g} (strength * sum over hops h of (k * decay_per_hop) ** h)"
        )
    check_length("reason", reason, REASON_MAX_CHARS)


def moved_salience_bound(*, strength: float, k: int, max_hops: int, decay_per_hop: float) -> float:
    """strength * sum over hops h = 1..max_hops of (k * decay_per_hop) ** h.

    Propagation reaches at most k ** h chunks at hop h and changes each by at most
    strength * decay_per_hop ** h, so this bounds the total |change| of one pulse; a pulse
    with max_hops 0 (a Forget) moves nothing. The powers are built by multiplication, so
    parameters that break the convergence invariant give infinity rather than an error.
    """
    total, term = 0.0, 1.0
    fan_out = k * float(decay_per_hop)
    for _ in range(max_hops):
        term *= fan_out
        total += term
    return float(strength) * total if total else 0.0


def check_length(name: str, value: str, limit: int, error: type[ValueError] = InvalidPulse) -> None:
    """`error` naming `name` when `value` is longer than `limit` characters."""
    if len(value) > limit:
        raise error(f"{name} has {len(value)} characters, more than the limit of {limit}")


def check_text(name: str, value: str) -> None:
    """ValueError naming `name` if `value` cannot be written as UTF-8: a command-line
    argument that was not UTF-8 arrives with lone surrogates, and an entry holding one
    would be queued here and then refused by every peer, this one included."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"{name} is not valid UTF-8 text (at character {exc.start + 1})") from None


def preview(value: object, chars: int = 80) -> str:
    """repr of `value`, a string cut so that an oversized field does not flood a message."""
    if isinstance(value, str) and len(value) > chars:
        return repr(value[:chars] + "...")
    return repr(value)


def _field(obj: dict[str, Any], name: str, convert: Callable[[Any], T]) -> T:
    """`convert(obj[name])`; InvalidPulse naming `name` when it is missing or will not convert."""
    if name not in obj:
        raise InvalidPulse(f"{name} is missing")
    try:
        return convert(obj[name])
    # OverflowError: float() of an integer beyond 1e308, int() of an infinite float.
    except (TypeError, ValueError, OverflowError) as exc:
        raise InvalidPulse(f"{name} {preview(obj[name])} is malformed: {exc}") from None


def _identity(value: T) -> T:
    return value


def _strength(value: Any) -> float:
    """A tombstone's Forget pulse has infinite strength, written as the string "inf"."""
    return math.inf if value == "inf" else float(value)


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPulse(f"{name} must be an integer, got {value!r}")
    return value
