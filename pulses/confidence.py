"""Confidence and stability of a memory, and what follows from them.

Confidence (0-1) is how sure the store is that a memory is accurate. It starts from
where the memory came from: a statement saved on purpose (type `manual`) is worth more
than a pattern someone inferred, and a memory of an inferred kind (`insight`,
`summary`) is never more certain than an inference. It rises by a bounded step towards
1 each time the same content is saved again or a user reinforces it, and falls by a
bounded step towards 0 when a user penalizes it; a step never reaches either end, so
a later verification or doubt can always still move it.

Stability (0-1) is how resistant a memory is to change: a birthday or a founding date
is stable, a project's status or a mood is not. It sets the decay: a memory's
half-life is its kind's half-life scaled by (1 + gain * stability) relative to a
memory of the kind's usual stability, so a memory of default stability decays
exactly at the configured half-life of its kind.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

#: A memory's type says how it was stated. Explicit statements (`manual`: saved on
#: purpose) are near-certain; records of what was decided or configured are facts of
#: the work; discoveries and learnings are conclusions; patterns and session summaries
#: are inferred or condensed from other memories.
CONFIDENCE_BY_TYPE: Final[Mapping[str, float]] = {
    "manual": 0.9,
    "decision": 0.8,
    "config": 0.8,
    "architecture": 0.8,
    "bugfix": 0.8,
    "discovery": 0.7,
    "learning": 0.7,
    "pattern": 0.6,
    "session_summary": 0.6,
}
#: Any other type (a tool's output, a document): worth less than a statement, more
#: than an inference.
CONFIDENCE_OTHER_TYPE: Final = 0.7
#: Kinds that are inferences or condensations: never more certain than this by default.
CONFIDENCE_CAP_BY_KIND: Final[Mapping[str, float]] = {"insight": 0.6, "summary": 0.6}

#: Usual stability of each kind: facts (birthdays, addresses) rarely change;
#: preferences drift; notes and insights are about the work in progress; summaries
#: describe a moment.
STABILITY_BY_KIND: Final[Mapping[str, float]] = {
    "fact": 0.9,
    "preference": 0.6,
    "note": 0.4,
    "insight": 0.4,
    "summary": 0.2,
}
#: Stability of a kind this table does not know.
STABILITY_OTHER_KIND: Final = 0.5

#: A verification (the same content saved again, a reinforce) closes this share of the
#: distance to 1; a penalize takes this share of the confidence away.
DEFAULT_VERIFY_STEP: Final = 0.2
DEFAULT_PENALTY_STEP: Final = 0.2
#: Half-life at stability 1 is (1 + gain) times that at stability 0.
DEFAULT_STABILITY_GAIN: Final = 4.0


class InvalidConfidence(ValueError):
    """A confidence, stability or step outside its range; the message names it."""


def check_unit(name: str, value: float) -> float:
    """`value` if it is a number in [0, 1]; otherwise an error naming `name`."""
    if isinstance(value, bool) or not (math.isfinite(value) and 0.0 <= value <= 1.0):
        raise InvalidConfidence(f"{name} {value} is outside [0, 1]")
    return float(value)


def default_confidence(obs_type: str, kind: str) -> float:
    by_type = CONFIDENCE_BY_TYPE.get(obs_type, CONFIDENCE_OTHER_TYPE)
    return min(by_type, CONFIDENCE_CAP_BY_KIND.get(kind, 1.0))


def default_stability(kind: str) -> float:
    return STABILITY_BY_KIND.get(kind, STABILITY_OTHER_KIND)


def verified(confidence: float, step: float = DEFAULT_VERIFY_STEP) -> float:
    """Confidence after one verification: `step` of the way to 1, never past it."""
    check_unit("confidence", confidence)
    check_unit("verify step", step)
    return confidence + step * (1.0 - confidence)


def doubted(confidence: float, step: float = DEFAULT_PENALTY_STEP) -> float:
    """Confidence after one penalty: `step` of it taken away, never below 0."""
    check_unit("confidence", confidence)
    check_unit("penalty step", step)
    return confidence * (1.0 - step)


def stable_half_life(
    kind_half_life_s: float, stability: float, reference: float, gain: float
) -> float:
    """A memory's half-life: its kind's, scaled by (1 + gain * stability) against a memory
    of the kind's usual stability `reference` (which keeps the kind's half-life exactly)."""
    check_unit("stability", stability)
    check_unit("reference stability", reference)
    if not (math.isfinite(gain) and gain >= 0.0):
        raise InvalidConfidence(f"stability gain must be finite and >= 0, got {gain}")
    if stability == reference or gain == 0.0:
        return kind_half_life_s
    return kind_half_life_s * (1.0 + gain * stability) / (1.0 + gain * reference)
