"""The SalientPulse wire type (seed section 4), its canonical bytes, id and invariants."""

from __future__ import annotations

import base64
import enum
import json
import math
from dataclasses import dataclass, field, replace
from typing import Any

import blake3
import numpy as np
import numpy.typing as npt

from pulses.constants import EPSILON, PULSE_ID_BYTES, SIGMA_MIN


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
        """Decode and verify a received pulse. Raises InvalidPulse with the reason."""
        try:
            raw = base64.b64decode(obj["seed_embedding"], validate=True)
            if len(raw) % 4:
                raise InvalidPulse("seed_embedding: length is not a multiple of 4 bytes")
            emb = np.frombuffer(raw, dtype="<f4").astype(np.float32)
            if int(obj["dim"]) != emb.shape[0]:
                raise InvalidPulse(
                    f"dim {obj['dim']} does not match seed_embedding ({emb.shape[0]})"
                )
            strength_raw = obj["strength"]
            strength = math.inf if strength_raw == "inf" else float(strength_raw)
            pulse = cls(
                seed_embedding=emb,
                kind=PulseKind(obj["kind"]),
                strength=strength,
                sigma=float(obj["sigma"]),
                max_hops=_as_int(obj["max_hops"], "max_hops"),
                k=_as_int(obj["k"], "k"),
                decay_per_hop=float(obj["decay_per_hop"]),
                ts=_as_int(obj["ts"], "ts"),
                origin_peer=str(obj["origin_peer"]),
                reason=str(obj["reason"]),
                ttl_s=float(obj["ttl_s"]),
                index_version=str(obj["index_version"]),
                seed_hash=None if obj.get("seed_hash") is None else str(obj["seed_hash"]),
                pulse_id=str(obj["pulse_id"]),
            )
        except InvalidPulse:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidPulse(f"malformed pulse: {type(exc).__name__}: {exc}") from None
        if pulse.pulse_id != pulse.computed_id():
            raise InvalidPulse(f"pulse_id {pulse.pulse_id} does not match its content")
        return pulse

    # ---- invariants ---------------------------------------------------------

    def validate(self) -> None:
        """Check every invariant of seed section 4.2 and DESIGN.md section 5."""
        validate_parameters(
            kind=self.kind,
            strength=self.strength,
            sigma=self.sigma,
            max_hops=self.max_hops,
            k=self.k,
            decay_per_hop=self.decay_per_hop,
            ttl_s=self.ttl_s,
        )
        emb = self.seed_embedding
        if emb.ndim != 1 or emb.shape[0] == 0:
            raise InvalidPulse("seed_embedding must be a non-empty vector")
        if not np.all(np.isfinite(emb)):
            raise InvalidPulse("seed_embedding contains NaN or infinity")
        if not self.origin_peer:
            raise InvalidPulse("origin_peer must not be empty")

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
) -> None:
    """Raise InvalidPulse naming the first broken rule; used at emit and at receipt."""
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


def _as_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPulse(f"{name} must be an integer, got {value!r}")
    return value
