"""The wire form of entries that every peer must agree on.

Format versions, the widths of ids, keys and signatures, the protocol limits of
fields, the canonical JSON that ids and signatures cover, the strict parser of one
line, and the refusals and errors that decoding reports.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from typing import Any, ClassVar, Final

FORMAT_VERSION: Final = 1
#: The version of a signed line: FORMAT_VERSION plus "key_id" and "sig".
SIGNED_VERSION: Final = 2
READABLE_VERSIONS: Final = frozenset({FORMAT_VERSION, SIGNED_VERSION})
SIGNATURE_FIELDS: Final = ("key_id", "sig")
#: The kind of a segment's seal line; never an entry.
SEAL_KIND: Final = "segment"
#: Hex digits of a key id (the first 64 bits of blake3 over the raw public key).
KEY_ID_HEX_LEN: Final = 16
#: Base64 characters of an Ed25519 signature (64 bytes).
SIGNATURE_B64_LEN: Final = 88
#: Bytes of blake3 kept for an entry id (128 bits), the same width as a pulse_id.
ENTRY_ID_BYTES: Final = 16
ENTRY_ID_HEX_LEN: Final = 2 * ENTRY_ID_BYTES
#: A content hash or decision hash: full 256-bit blake3, lowercase hex.
HASH_HEX_LEN: Final = 64
ENVELOPE_FIELDS: Final = ("v", "kind", "id", "hlc", "origin")

# ---- protocol limits on fields: every peer must agree on these -----------------------------

#: Longest chunk content, in characters.
CONTENT_MAX_CHARS: Final = 1_000_000
#: Longest chunk title, in characters.
TITLE_MAX_CHARS: Final = 10_000
#: Longest short label of a chunk (type, scope, kind, project, topic, session, tool, model).
LABEL_MAX_CHARS: Final = 1_000


class Refusal(enum.StrEnum):
    """Why a line, segment or key of the log was refused: the label it is counted by."""

    #: A line that is not JSON, not an object, or not a valid entry.
    MALFORMED_LINE = "malformed_line"
    #: An entry with a string, list or embedding beyond its protocol limit.
    OVER_LIMIT = "over_limit"
    LINE_TOO_LONG = "line_too_long"
    #: Not gzip, truncated, or not UTF-8.
    CORRUPT_SEGMENT = "corrupt_segment"
    #: More bytes before or after decompression than SegmentLimits allow.
    SEGMENT_TOO_LARGE = "segment_too_large"
    SEGMENT_TOO_MANY_LINES = "segment_too_many_lines"
    #: A segment, snapshot or heartbeat key that does not parse.
    MALFORMED_KEY = "malformed_key"
    #: A segment or snapshot key dated beyond the allowed clock skew.
    FROM_THE_FUTURE = "from_the_future"
    #: A snapshot holding an entry dated after itself, or lacking what the snapshot it
    #: was folded from held.
    SNAPSHOT_INCONSISTENT = "snapshot_inconsistent"


class InvalidEntry(ValueError):
    """An entry field that is missing, mistyped or out of range; the message names it."""

    refusal: ClassVar[Refusal] = Refusal.MALFORMED_LINE


class OverLimit(InvalidEntry):
    """A string, list or embedding longer than the protocol allows; the message names it."""

    refusal: ClassVar[Refusal] = Refusal.OVER_LIMIT


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """The one byte form that ids are computed over and segments are written in."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def parse_json(line: str | bytes) -> Any:
    """The JSON value of one line; ValueError for anything that is not plain JSON.

    NaN and infinities are refused (no canonical line can hold them), and so is nesting
    too deep for the parser: one hostile line must not fail a whole segment.
    """
    try:
        return json.loads(line, parse_constant=_refuse_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")
