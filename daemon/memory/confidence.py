"""Changes to a memory's confidence, and the stability-scaled half-lives downscale uses.

Confidence moves by bounded steps (pulses/confidence.py): up when the same content is
saved again or a user reinforces the memory (a verification), down when a user
penalizes it. Each change is a `confidence` step of the journal, the audit trail
`explain` reads, with what it was before and after and why. Replay ignores these
steps: confidence is not salience, and rebuild reproduces salience only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dreamcycle.daemon import defaults
from dreamcycle.daemon.config import DownscaleConfig
from dreamcycle.daemon.journal_kinds import JournalKind
from dreamcycle.pulses.confidence import default_stability, doubted, stable_half_life, verified
from dreamcycle.store.database import CHUNK_KINDS, Added, Database

#: The journal's kind of step for a change of confidence.


class Cause(StrEnum):
    SAVED_AGAIN = "saved again"
    REINFORCED = "reinforced"
    PENALIZED = "penalized"


def corroborate(db: Database, added: Sequence[Added], *, now_ms: int) -> None:
    """Raise the confidence of every chunk among `added` that was already stored (inside
    the caller's transaction): the same content stated again is a verification."""
    for chunk in added:
        if not chunk.created:
            change_confidence(db, chunk.content_hash, Cause.SAVED_AGAIN, reason="", now_ms=now_ms)


def change_confidence(
    db: Database, digest: str, cause: Cause, *, reason: str, now_ms: int
) -> float | None:
    """Step the chunk's confidence for `cause` and journal it (inside the caller's
    transaction). Returns the new confidence; None for a chunk unknown or tombstoned,
    which is never changed."""
    row = db.fetch_one(
        "SELECT id, confidence FROM observations WHERE content_hash = ? AND deleted_at IS NULL",
        (digest,),
    )
    if row is None:
        return None
    rowid, before = int(row[0]), float(row[1])
    if cause is Cause.PENALIZED:
        after = doubted(before, defaults.CONFIDENCE_PENALTY_STEP)
    else:
        after = verified(before, defaults.CONFIDENCE_VERIFY_STEP)
    db.conn.execute("UPDATE observations SET confidence = ? WHERE id = ?", (after, rowid))
    body = {"rowid": rowid, "before": before, "after": after, "cause": str(cause)}
    db.journal(JournalKind.CONFIDENCE, digest, {**body, "reason": reason}, now_ms=now_ms)
    return after


@dataclass(frozen=True)
class HalfLives:
    """Half-life by kind and how stability stretches it: what one downscale step decays by.

    Journaled with the step (`journal()`), so a replay decays alike whatever the config
    or the defaults are then.
    """

    by_kind: Mapping[str, float]
    stability_gain: float
    reference_stability: Mapping[str, float]

    @classmethod
    def from_config(cls, config: DownscaleConfig) -> HalfLives:
        return cls(
            by_kind={kind: config.half_life(kind) for kind in CHUNK_KINDS},
            stability_gain=config.stability_gain,
            reference_stability={kind: default_stability(kind) for kind in CHUNK_KINDS},
        )

    @classmethod
    def from_journal(cls, body: Mapping[str, Any], config: DownscaleConfig) -> HalfLives:
        """A downscale step's half-lives; a step journaled before stability existed decays
        every chunk at its kind's half-life (gain 0), one before half-lives were journaled
        at the current config's."""
        current = cls.from_config(config)
        by_kind = {**current.by_kind, **{k: v for k, v in body.get("half_life_s", {}).items() if v}}
        return cls(
            by_kind=by_kind,
            stability_gain=float(body.get("stability_gain", 0.0)),
            reference_stability={
                **current.reference_stability,
                **body.get("reference_stability", {}),
            },
        )

    def journal(self) -> dict[str, Any]:
        return {
            "half_life_s": dict(self.by_kind),
            "stability_gain": self.stability_gain,
            "reference_stability": dict(self.reference_stability),
        }

    def of(self, kind: str, stability: float) -> float:
        """The half-life of a chunk of this kind and stability."""
        return stable_half_life(
            self.by_kind[kind],
            stability,
            self.reference_stability.get(kind, default_stability(kind)),
            self.stability_gain,
        )
