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
Pulse invariants (seed section 4.2) are not checked here: the receiver checks
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

from dreamcycle.zeitgeist._entry_envelope import (
    EntryBase as EntryBase,
)
from dreamcycle.zeitgeist._entry_fields import (
    RECONSOLIDATE_FIELDS as RECONSOLIDATE_FIELDS,
)
from dreamcycle.zeitgeist._entry_fields import (
    ChangeValue as ChangeValue,
)
from dreamcycle.zeitgeist._entry_fields import (
    Embedding as Embedding,
)
from dreamcycle.zeitgeist._entry_fields import (
    Rule as Rule,
)
from dreamcycle.zeitgeist._entry_fields import (
    check_signature_fields as check_signature_fields,
)
from dreamcycle.zeitgeist._entry_kinds import (
    ENTRY_TYPES as ENTRY_TYPES,
)
from dreamcycle.zeitgeist._entry_kinds import (
    AssertEntry as AssertEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    AttributionEntry as AttributionEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    Entry as Entry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    OutcomeEntry as OutcomeEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    PulseEntry as PulseEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    ReconsolidateEntry as ReconsolidateEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    RetrievalKeyEntry as RetrievalKeyEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    SupersedeEntry as SupersedeEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    TombstoneEntry as TombstoneEntry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    decode_entry as decode_entry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    encode_entry as encode_entry,
)
from dreamcycle.zeitgeist._entry_kinds import (
    entry_order_key as entry_order_key,
)
from dreamcycle.zeitgeist._entry_wire import (
    CONTENT_MAX_CHARS as CONTENT_MAX_CHARS,
)
from dreamcycle.zeitgeist._entry_wire import (
    ENTRY_ID_BYTES as ENTRY_ID_BYTES,
)
from dreamcycle.zeitgeist._entry_wire import (
    ENTRY_ID_HEX_LEN as ENTRY_ID_HEX_LEN,
)
from dreamcycle.zeitgeist._entry_wire import (
    ENVELOPE_FIELDS as ENVELOPE_FIELDS,
)
from dreamcycle.zeitgeist._entry_wire import (
    FORMAT_VERSION as FORMAT_VERSION,
)
from dreamcycle.zeitgeist._entry_wire import (
    HASH_HEX_LEN as HASH_HEX_LEN,
)
from dreamcycle.zeitgeist._entry_wire import (
    KEY_ID_HEX_LEN as KEY_ID_HEX_LEN,
)
from dreamcycle.zeitgeist._entry_wire import (
    LABEL_MAX_CHARS as LABEL_MAX_CHARS,
)
from dreamcycle.zeitgeist._entry_wire import (
    READABLE_VERSIONS as READABLE_VERSIONS,
)
from dreamcycle.zeitgeist._entry_wire import (
    SEAL_KIND as SEAL_KIND,
)
from dreamcycle.zeitgeist._entry_wire import (
    SIGNATURE_B64_LEN as SIGNATURE_B64_LEN,
)
from dreamcycle.zeitgeist._entry_wire import (
    SIGNATURE_FIELDS as SIGNATURE_FIELDS,
)
from dreamcycle.zeitgeist._entry_wire import (
    SIGNED_VERSION as SIGNED_VERSION,
)
from dreamcycle.zeitgeist._entry_wire import (
    TITLE_MAX_CHARS as TITLE_MAX_CHARS,
)
from dreamcycle.zeitgeist._entry_wire import (
    InvalidEntry as InvalidEntry,
)
from dreamcycle.zeitgeist._entry_wire import (
    OverLimit as OverLimit,
)
from dreamcycle.zeitgeist._entry_wire import (
    Refusal as Refusal,
)
from dreamcycle.zeitgeist._entry_wire import (
    canonical_json as canonical_json,
)
from dreamcycle.zeitgeist._entry_wire import (
    parse_json as parse_json,
)
from dreamcycle.zeitgeist._segment_codec import (
    MAX_KIND_LABEL as MAX_KIND_LABEL,
)
from dreamcycle.zeitgeist._segment_codec import (
    MAX_LINE_BYTES as MAX_LINE_BYTES,
)
from dreamcycle.zeitgeist._segment_codec import (
    SEGMENT_LIMITS as SEGMENT_LIMITS,
)
from dreamcycle.zeitgeist._segment_codec import (
    SNAPSHOT_LIMITS as SNAPSHOT_LIMITS,
)
from dreamcycle.zeitgeist._segment_codec import (
    CorruptSegment as CorruptSegment,
)
from dreamcycle.zeitgeist._segment_codec import (
    DecodedSegment as DecodedSegment,
)
from dreamcycle.zeitgeist._segment_codec import (
    RejectedLine as RejectedLine,
)
from dreamcycle.zeitgeist._segment_codec import (
    SegmentLimits as SegmentLimits,
)
from dreamcycle.zeitgeist._segment_codec import (
    decode_segment as decode_segment,
)
from dreamcycle.zeitgeist._segment_codec import (
    encode_segment as encode_segment,
)
from dreamcycle.zeitgeist._segment_seal import (
    Sealer as Sealer,
)
from dreamcycle.zeitgeist._segment_seal import (
    SegmentSeal as SegmentSeal,
)
from dreamcycle.zeitgeist._segment_seal import (
    payload_digest as payload_digest,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SEGMENT_BYTES as MAX_SEGMENT_BYTES,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SEGMENT_COMPRESSED_BYTES as MAX_SEGMENT_COMPRESSED_BYTES,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SEGMENT_LINES as MAX_SEGMENT_LINES,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SNAPSHOT_BYTES as MAX_SNAPSHOT_BYTES,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SNAPSHOT_COMPRESSED_BYTES as MAX_SNAPSHOT_COMPRESSED_BYTES,
)
from dreamcycle.zeitgeist.defaults import (
    MAX_SNAPSHOT_LINES as MAX_SNAPSHOT_LINES,
)
