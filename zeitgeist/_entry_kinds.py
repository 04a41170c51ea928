"""The eight entry kinds, and one entry to and from its wire object.

Each kind lists its fields' rules (zeitgeist/_entry_fields.py); the envelope
(zeitgeist/_entry_envelope.py) checks them when an entry is built, so an entry that
exists is valid. `decode_entry` also checks that a line's id is its content's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, Final, TypeAlias

from dreamcycle.pulses.constants import DECISION_TEXT_MAX_CHARS, INDEX_VERSION_MAX_CHARS
from dreamcycle.pulses.pulse import SalientPulse
from dreamcycle.zeitgeist import _entry_fields as rule
from dreamcycle.zeitgeist._entry_envelope import EntryBase
from dreamcycle.zeitgeist._entry_fields import ChangeValue, Embedding, Rule
from dreamcycle.zeitgeist._entry_wire import (
    CONTENT_MAX_CHARS,
    ENTRY_ID_HEX_LEN,
    READABLE_VERSIONS,
    SEAL_KIND,
    InvalidEntry,
)

_ID_RE: Final = re.compile(rf"[0-9a-f]{{{ENTRY_ID_HEX_LEN}}}")


@dataclass(frozen=True, eq=False, kw_only=True)
class AssertEntry(EntryBase):
    """A chunk, content-addressed, with its embedding so peers need not re-embed it."""

    KIND: ClassVar[str] = "assert"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "content_hash": rule.hex_hash,
        "title": rule.TITLE,
        "content": rule.text_within(CONTENT_MAX_CHARS),
        "obs_type": rule.LABEL,
        "project": rule.OPTIONAL_LABEL,
        "scope": rule.LABEL,
        "topic_key": rule.OPTIONAL_LABEL,
        "session_id": rule.OPTIONAL_LABEL,
        "tool_name": rule.OPTIONAL_LABEL,
        "chunk_kind": rule.LABEL,
        "pin_floor": rule.unit_interval,
        "embedding": rule.embedding,
        "model_id": rule.LABEL,
        "index_version": rule.text_within(INDEX_VERSION_MAX_CHARS, required=True),
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"embedding": rule.embedding_from_wire}

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
    RULES: ClassVar[Mapping[str, Rule]] = {
        "old_hash": rule.hex_hash,
        "new_hash": rule.hex_hash,
        "reason": rule.REASON,
    }

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
    RULES: ClassVar[Mapping[str, Rule]] = {"content_hash": rule.hex_hash, "changes": rule.changes}

    content_hash: str
    changes: Mapping[str, ChangeValue]


@dataclass(frozen=True, eq=False, kw_only=True)
class TombstoneEntry(EntryBase):
    """A permanent retraction; a Forget pulse, if any, travels with it."""

    KIND: ClassVar[str] = "tombstone"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "content_hash": rule.hex_hash,
        "reason": rule.REASON,
        "collectable_after_ms": rule.optional_ms,
        "forget_pulse": rule.optional_forget_pulse,
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"forget_pulse": rule.optional_pulse_from_wire}

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
    RULES: ClassVar[Mapping[str, Rule]] = {"pulse": rule.salient_pulse}
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"pulse": rule.pulse_from_wire}

    pulse: SalientPulse

    def computed_id(self) -> str:
        return self.pulse.pulse_id


@dataclass(frozen=True, eq=False, kw_only=True)
class OutcomeEntry(EntryBase):
    """A decision's observed result; its time is the envelope hlc."""

    KIND: ClassVar[str] = "outcome"
    RULES: ClassVar[Mapping[str, Rule]] = {
        "decision_hash": rule.hex_hash,
        "reward": rule.finite_number,
        "observer_peer": rule.peer_id,
        "reason": rule.REASON,
        "cited": rule.hash_tuple,
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
        "decision_hash": rule.hex_hash,
        "chunk_hash": rule.hex_hash,
        "embedding": rule.embedding,
        "text": rule.text_within(DECISION_TEXT_MAX_CHARS, optional=True),
        "amount": rule.finite_number,
    }
    WIRE_DECODERS: ClassVar[Mapping[str, Rule]] = {"embedding": rule.embedding_from_wire}

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
        "decision_hash": rule.hex_hash,
        "chunk_hashes": rule.hash_tuple,
        "decision_text": rule.text_within(DECISION_TEXT_MAX_CHARS),
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


def encode_entry(entry: Entry) -> dict[str, Any]:
    """The wire object of `entry`, envelope (and signature, if any) included."""
    return entry.wire()


def readable_version(version: Any) -> bool:
    # Any JSON value may stand here: an object or a list is not hashable.
    return (
        isinstance(version, int) and not isinstance(version, bool) and version in READABLE_VERSIONS
    )


def decode_entry(obj: Mapping[str, Any]) -> Entry:
    """One wire object of a readable version and a known kind; InvalidEntry otherwise."""
    version = obj.get("v")
    if not readable_version(version):
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
