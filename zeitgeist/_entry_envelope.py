"""The envelope every entry kind shares: ids, signatures, the wire form, and equality.

A kind is a frozen dataclass that names its fields' rules (zeitgeist/_entry_fields.py);
the envelope validates and normalises every field on construction, computes the
entry's content id, and gives the canonical line it is written as and signed over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Self

import blake3

from dreamcycle.zeitgeist._entry_fields import (
    Rule,
    check_signature_fields,
    peer_id,
    prefixed,
    to_wire,
)
from dreamcycle.zeitgeist._entry_wire import (
    ENTRY_ID_BYTES,
    ENVELOPE_FIELDS,
    FORMAT_VERSION,
    SIGNATURE_FIELDS,
    SIGNED_VERSION,
    InvalidEntry,
    canonical_json,
)
from dreamcycle.zeitgeist.hlc import InvalidHlc, check_hlc


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
            raise prefixed(exc, f"{self.KIND} entry") from None
        for name, rule in (("origin", peer_id), *self.RULES.items()):
            try:
                normalised = rule(name, getattr(self, name))
            except InvalidEntry as exc:
                raise prefixed(exc, f"{self.KIND} entry") from None
            object.__setattr__(self, name, normalised)

    def body(self) -> dict[str, Any]:
        """The kind's own fields in wire form."""
        return {
            name: to_wire(getattr(self, name))
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
                raise prefixed(exc, f"{cls.KIND} entry") from None
        return cls(
            hlc=obj["hlc"],
            origin=obj["origin"],
            key_id=obj.get("key_id"),
            sig=obj.get("sig"),
            **values,
        )
