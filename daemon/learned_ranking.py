"""What recall has learned about ranking on this store, as stored: the vector/word split,
which similarity bands of learned keys it uses, and the strength of its prior over the
candidates' sizes.

Both are derived state, learned by daemon.learning from this peer's own cited
successes and kept in meta; neither is published. Unreadable means starting again
from the configured split and the keys' prior, never failing a recall.
"""

from __future__ import annotations

import json
import logging
from typing import Final

from dreamcycle.daemon.config import Config
from dreamcycle.pulses import fusion, intrinsic
from dreamcycle.pulses.evidence import InvalidEvidence
from dreamcycle.pulses.key_gate import KeyGate
from dreamcycle.store.database import Database

log = logging.getLogger("dreamcycle.learning")

#: meta key holding what cited successes taught about recall's vector/word split.
FUSION_META_KEY: Final = "recall_fusion_evidence"
#: meta key holding the key gate: per similarity band, what keys did to new questions.
KEY_GATE_META_KEY: Final = "recall_key_gate"
#: meta key holding what cited successes taught about the prior over candidates' sizes.
INTRINSIC_META_KEY: Final = "recall_intrinsic_evidence"


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


def intrinsic_evidence(db: Database) -> intrinsic.PriorEvidence:
    """What cited successes taught so far about the prior over sizes (none at first)."""
    stored = db.get_meta(INTRINSIC_META_KEY)
    if stored is None:
        return intrinsic.PriorEvidence()
    try:
        return intrinsic.PriorEvidence.from_json(json.loads(stored))
    except (ValueError, TypeError) as exc:
        log.warning(
            "intrinsic prior evidence unreadable; starting again", extra={"reason": str(exc)}
        )
        return intrinsic.PriorEvidence()


def store_intrinsic_evidence(db: Database, evidence: intrinsic.PriorEvidence) -> None:
    db.set_meta(INTRINSIC_META_KEY, json.dumps(evidence.to_json()))


def intrinsic_strength(db: Database, config: Config) -> float:
    """The strength of recall's prior over candidates' sizes: learned, or none when off."""
    if not config.learning.intrinsic_prior:
        return 0.0
    return intrinsic.best_strength(intrinsic_evidence(db))
