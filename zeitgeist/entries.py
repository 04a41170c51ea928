"""The versioned entry codec: eight entry kinds, one JSON object per line, gzip'd segments.

Every entry carries the envelope fields "v" (format version), "kind", "id", "hlc"
and "origin" next to its own fields. The id of a salience_pulse entry is its
pulse's pulse_id; every other id is the first 128 bits of blake3 over the
canonical JSON (sorted keys, compact separators) of the entry's version-1 form
without "id". A receiver recomputes the id and rejects a line whose id does not match.

Version 2 is version 1 plus a signature: "key_id" names the origin peer's
Ed25519 key and "sig" signs the canonical JSON of the line without "sig". The id
stays a content hash (signing an entry does not change it), and readers decode
both versions; whether an unsigned entry is accepted is the receiver's policy
(zeitgeist/signing.py). A segment may begin with a seal line (kind "segment",
version 2): the writer's signature over the segment's object key and the
blake3 digest of the lines after it.

Decoding is forgiving per line and strict per field: entries of an unknown
version or kind are skipped and counted (a newer peer may write them), malformed
lines are rejected with a reason, and the rest of the segment still decodes.
Pulse invariants (pulses/pulse.py) are not checked here: the receiver checks
them when applying, so it can record the reason against the pulse id.

Everything read is bounded before it costs more than its size: every string and
list field has a protocol limit (an entry beyond one is rejected as over_limit),
a line longer than MAX_LINE_BYTES is rejected alone, and a segment beyond its
SegmentLimits (bytes before and after decompression, lines) is refused whole.
Lines are read one at a time from the decompressor, so memory follows the
longest line and the entries kept, not the number of lines.

The parts live in private modules and are imported from here: `_entry_wire` (versions,
widths, field limits, canonical JSON, refusals), `_entry_fields` (the rule of each
field), `_entry_envelope` (ids, signatures, the wire form), `_entry_kinds` (the eight
kinds), `_segment_seal` and `_segment_codec` (segments); the read limits' defaults are
in zeitgeist/defaults.py.
"""

from __future__ import annotations

from dreamcycle.zeitgeist._entry_envelope import EntryBase
from dreamcycle.zeitgeist._entry_fields import (
    RECONSOLIDATE_FIELDS,
    ChangeValue,
    Embedding,
    Rule,
    check_signature_fields,
)
from dreamcycle.zeitgeist._entry_kinds import (
    ENTRY_TYPES,
    AssertEntry,
    AttributionEntry,
    Entry,
    OutcomeEntry,
    PulseEntry,
    ReconsolidateEntry,
    RetrievalKeyEntry,
    SupersedeEntry,
    TombstoneEntry,
    decode_entry,
    encode_entry,
    entry_order_key,
)
from dreamcycle.zeitgeist._entry_wire import (
    CONTENT_MAX_CHARS,
    ENTRY_ID_BYTES,
    ENTRY_ID_HEX_LEN,
    ENVELOPE_FIELDS,
    FORMAT_VERSION,
    HASH_HEX_LEN,
    KEY_ID_HEX_LEN,
    LABEL_MAX_CHARS,
    READABLE_VERSIONS,
    SEAL_KIND,
    SIGNATURE_B64_LEN,
    SIGNATURE_FIELDS,
    SIGNED_VERSION,
    TITLE_MAX_CHARS,
    InvalidEntry,
    OverLimit,
    Refusal,
    canonical_json,
    parse_json,
)
from dreamcycle.zeitgeist._segment_codec import (
    MAX_KIND_LABEL,
    MAX_LINE_BYTES,
    SEGMENT_LIMITS,
    SNAPSHOT_LIMITS,
    CorruptSegment,
    DecodedSegment,
    RejectedLine,
    SegmentLimits,
    decode_segment,
    encode_segment,
    read_seal,
)
from dreamcycle.zeitgeist._segment_seal import Sealer, SegmentSeal, payload_digest
from dreamcycle.zeitgeist.defaults import (
    MAX_SEGMENT_COMPRESSED_BYTES,
    MAX_SEGMENT_EXPANDED_BYTES,
    MAX_SEGMENT_LINES,
    MAX_SNAPSHOT_COMPRESSED_BYTES,
    MAX_SNAPSHOT_EXPANDED_BYTES,
    MAX_SNAPSHOT_LINES,
)

__all__ = [
    "CONTENT_MAX_CHARS",
    "ENTRY_ID_BYTES",
    "ENTRY_ID_HEX_LEN",
    "ENTRY_TYPES",
    "ENVELOPE_FIELDS",
    "FORMAT_VERSION",
    "HASH_HEX_LEN",
    "KEY_ID_HEX_LEN",
    "LABEL_MAX_CHARS",
    "MAX_KIND_LABEL",
    "MAX_LINE_BYTES",
    "MAX_SEGMENT_COMPRESSED_BYTES",
    "MAX_SEGMENT_EXPANDED_BYTES",
    "MAX_SEGMENT_LINES",
    "MAX_SNAPSHOT_COMPRESSED_BYTES",
    "MAX_SNAPSHOT_EXPANDED_BYTES",
    "MAX_SNAPSHOT_LINES",
    "READABLE_VERSIONS",
    "RECONSOLIDATE_FIELDS",
    "SEAL_KIND",
    "SEGMENT_LIMITS",
    "SIGNATURE_B64_LEN",
    "SIGNATURE_FIELDS",
    "SIGNED_VERSION",
    "SNAPSHOT_LIMITS",
    "TITLE_MAX_CHARS",
    "AssertEntry",
    "AttributionEntry",
    "ChangeValue",
    "CorruptSegment",
    "DecodedSegment",
    "Embedding",
    "Entry",
    "EntryBase",
    "InvalidEntry",
    "OutcomeEntry",
    "OverLimit",
    "PulseEntry",
    "ReconsolidateEntry",
    "Refusal",
    "RejectedLine",
    "RetrievalKeyEntry",
    "Rule",
    "Sealer",
    "SegmentLimits",
    "SegmentSeal",
    "SupersedeEntry",
    "TombstoneEntry",
    "canonical_json",
    "check_signature_fields",
    "decode_entry",
    "decode_segment",
    "encode_entry",
    "encode_segment",
    "entry_order_key",
    "parse_json",
    "payload_digest",
    "read_seal",
]
