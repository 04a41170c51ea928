"""A segment's seal: its first line, the writer's signature over its key and its lines.

The seal names the writer, its key, the object key the segment was written under and
the blake3 digest of every byte after the seal line. Claims are sealed the same way
(zeitgeist/log.py). Checking a seal is the keyring's work (zeitgeist/signing.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import blake3

from dreamcycle.zeitgeist._entry_fields import check_signature_fields, peer_id
from dreamcycle.zeitgeist._entry_wire import SEAL_KIND, SIGNED_VERSION, InvalidEntry, canonical_json


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
            signer=peer_id("signer", obj["signer"]),
            key_id=obj["key_id"],
            object_key=obj["object"],
            digest=obj["digest"],
            sig=obj["sig"],
        )


#: Seals a segment: given the digest of its lines, the seal to put before them.
Sealer: TypeAlias = Callable[[str], SegmentSeal]


def payload_digest(payload: bytes) -> str:
    return blake3.blake3(payload).hexdigest()
