"""What recall has learned about ranking on this store, as stored: the vector/word split,
which similarity bands of learned keys it uses, the strength of its prior over the
candidates' sizes, and the weight of a cold chunk's relevance.

Both are derived state, learned by daemon.memory.learning from this peer's own cited
successes and kept in meta; neither is published. Unreadable means starting again
from the configured split and the keys' prior, never failing a recall.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from dreamcycle.daemon.config import Config
from dreamcycle.pulses import cold_weight, fusion, intrinsic
from dreamcycle.pulses.evidence import GridEvidence, InvalidEvidence
from dreamcycle.pulses.key_gate import KeyGate
from dreamcycle.store.database import Database

log = logging.getLogger("dreamcycle.learning")

#: meta key holding what cited successes taught about recall's vector/word split.
FUSION_META_KEY: Final = "recall_fusion_evidence"
#: meta key holding the key gate: per similarity band, what keys did to new questions.
KEY_GATE_META_KEY: Final = "recall_key_gate"
#: meta key holding what cited successes taught about the prior over candidates' sizes.
INTRINSIC_META_KEY: Final = "recall_intrinsic_evidence"
#: meta key holding what cited successes taught about the weight of cold relevance.
COLD_META_KEY: Final = "recall_cold_evidence"


def learns_fusion(config: Config) -> bool:
    """A list configured off (weight 0) stays off: then there is no split to learn."""
    recall = config.recall
    return config.learning.fusion and recall.vector_weight > 0 and recall.lexical_weight > 0


def configured_share(config: Config) -> float:
    recall = config.recall
    return recall.vector_weight / (recall.vector_weight + recall.lexical_weight)


def split_evidence(db: Database, config: Config) -> fusion.SplitEvidence:
    """What cited successes taught so far about the vector/word split (none at first)."""
    configured = configured_share(config)
    stored = db.get_meta(FUSION_META_KEY)
    if stored is None:
        return fusion.SplitEvidence(configured)
    try:
        return fusion.SplitEvidence.from_json(json.loads(stored), configured)
    except (ValueError, TypeError) as exc:
        log.warning("fusion evidence unreadable; starting again", extra={"reason": str(exc)})
        return fusion.SplitEvidence(configured)


def store_split_evidence(db: Database, evidence: fusion.SplitEvidence) -> None:
    db.set_meta(FUSION_META_KEY, json.dumps(evidence.to_json()))


def fusion_weights(db: Database, config: Config) -> tuple[float, float]:
    """(vector, lexical) weights of recall's fusion: configured, or learned from citations."""
    recall = config.recall
    if not learns_fusion(config):
        return recall.vector_weight, recall.lexical_weight
    share = fusion.best_share(split_evidence(db, config))
    return fusion.split_weights(share, recall.vector_weight + recall.lexical_weight)


def key_gate(db: Database) -> KeyGate:
    """Per similarity band, what learned keys did to this store's new questions."""
    stored = db.get_meta(KEY_GATE_META_KEY)
    if stored is None:
        return KeyGate()
    try:
        return KeyGate.from_json(json.loads(stored))
    except (ValueError, TypeError, InvalidEvidence) as exc:
        log.warning("key gate unreadable; starting again", extra={"reason": str(exc)})
        return KeyGate()


def store_key_gate(db: Database, gate: KeyGate) -> None:
    db.set_meta(KEY_GATE_META_KEY, json.dumps(gate.to_json()))


def open_key_bands(db: Database, config: Config) -> tuple[bool, ...]:
    """The key bands recall uses: as judged, or every band when the gate is off."""
    if not config.learning.key_gate:
        return tuple(True for _ in KeyGate().bands)
    return key_gate(db).open_bands()


def _grid_evidence(db: Database, key: str, grid: tuple[float, ...]) -> GridEvidence:
    stored = db.get_meta(key)
    if stored is None:
        return GridEvidence(grid)
    try:
        return GridEvidence.from_json(json.loads(stored), grid)
    except (ValueError, TypeError) as exc:
        log.warning(
            "learned ranking unreadable; starting again", extra={"key": key, "reason": str(exc)}
        )
        return GridEvidence(grid)


def intrinsic_evidence(db: Database) -> GridEvidence:
    """What cited successes taught so far about the prior over sizes (none at first)."""
    return _grid_evidence(db, INTRINSIC_META_KEY, intrinsic.STRENGTHS)


def cold_evidence(db: Database) -> GridEvidence:
    """What cited successes taught so far about the weight of cold relevance."""
    return _grid_evidence(db, COLD_META_KEY, cold_weight.WEIGHTS)


def store_evidence(db: Database, key: str, evidence: GridEvidence) -> None:
    db.set_meta(key, json.dumps(evidence.to_json()))


def intrinsic_strength(db: Database, config: Config) -> float:
    """The strength of recall's prior over candidates' sizes: learned, or none when off."""
    if not config.learning.intrinsic_prior:
        return 0.0
    return intrinsic_evidence(db).best(0.0)


def cold_factor(db: Database, config: Config) -> float:
    """The weight of a cold chunk's relevance: learned, or as configured when off."""
    configured = config.recall.cold_factor
    if not config.learning.cold_weight:
        return configured
    return cold_evidence(db).best(configured)
