"""Segments: gzip'd ndjson, encoded deterministically and decoded within limits.

Decoding is forgiving per line: a line that is not an entry is rejected with its
reason, one of an unknown version or kind is skipped, counted and kept verbatim (a
newer peer may have written it), and the rest of the segment still decodes. A segment
beyond its SegmentLimits (bytes before and after decompression, lines) is refused
whole. Lines are read one at a time from the decompressor, so memory follows the
longest line and the entries kept, not the number of lines.

`read_seal` reads only the seal and the digest of what it covers, in one streaming
pass that parses no line: a reader checks it before decoding a segment, so an object
no trusted key sealed costs one pass of bounded memory, and no entry is built from it.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import blake3

from dreamcycle.zeitgeist._entry_fields import type_name
from dreamcycle.zeitgeist._entry_kinds import ENTRY_TYPES, Entry, decode_entry, readable_version
from dreamcycle.zeitgeist._entry_wire import (
    SEAL_KIND,
    SIGNED_VERSION,
    InvalidEntry,
    Refusal,
    canonical_json,
    parse_json,
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

#: Longest line: the largest entry the field limits allow (content of astral characters,
#: each written as a 12-byte surrogate pair, and the widest embedding) fits with room.
MAX_LINE_BYTES: Final = 16 * 1024 * 1024
#: Bytes read from the decompressor at a time while skipping the rest of an over-long line.
_SKIP_CHUNK_BYTES: Final = 1024 * 1024
#: Bytes read from the decompressor at a time while a seal's digest is computed.
_DIGEST_CHUNK_BYTES: Final = 1024 * 1024
#: Longest unknown kind name kept verbatim as a counter label.
MAX_KIND_LABEL: Final = 64


class CorruptSegment(ValueError):
    """A segment that is not gzip, is truncated, or is not UTF-8 text at all."""

    def __init__(self, message: str, refusal: Refusal = Refusal.CORRUPT_SEGMENT) -> None:
        super().__init__(message)
        self.refusal = refusal


@dataclass(frozen=True)
class SegmentLimits:
    """What one segment (or snapshot) may cost a reader; beyond any of them it is refused."""

    compressed_bytes: int = MAX_SEGMENT_COMPRESSED_BYTES
    expanded_bytes: int = MAX_SEGMENT_EXPANDED_BYTES
    #: Lines, blank ones included: each costs a step of the reader.
    lines: int = MAX_SEGMENT_LINES

    def __post_init__(self) -> None:
        for name in ("compressed_bytes", "expanded_bytes", "lines"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"segment limit {name} must be a positive integer, got {value!r}")


SEGMENT_LIMITS: Final = SegmentLimits()
SNAPSHOT_LIMITS: Final = SegmentLimits(
    compressed_bytes=MAX_SNAPSHOT_COMPRESSED_BYTES,
    expanded_bytes=MAX_SNAPSHOT_EXPANDED_BYTES,
    lines=MAX_SNAPSHOT_LINES,
)


@dataclass(frozen=True)
class RejectedLine:
    """A line that could not be decoded; `line_no` counts from 1."""

    line_no: int
    reason: str
    refusal: Refusal = Refusal.MALFORMED_LINE


@dataclass
class DecodedSegment:
    """What one segment held.

    `skipped` counts entries this version does not understand, by reason
    ("unknown_version:2", "unknown_kind:foo"); `unknown` keeps their raw objects
    so compaction can carry them forward for newer peers.
    """

    entries: list[Entry] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    rejected: list[RejectedLine] = field(default_factory=list)
    unknown: list[dict[str, Any]] = field(default_factory=list)
    #: The writer's seal, if the segment has one, and the digest of the lines it covers.
    seal: SegmentSeal | None = None
    body_digest: str = ""


def encode_segment(
    entries: Iterable[Entry],
    unknown: Iterable[Mapping[str, Any]] = (),
    *,
    seal: Sealer | None = None,
) -> bytes:
    """Gzip'd ndjson; the same entries always give the same bytes (gzip mtime 0)."""
    lines = [entry.wire_bytes for entry in entries]
    lines.extend(canonical_json(obj) for obj in unknown)
    payload = b"".join(line + b"\n" for line in lines)
    if seal is not None:
        payload = seal(payload_digest(payload)).wire_bytes() + b"\n" + payload
    return gzip.compress(payload, mtime=0)


def _skip_reason(obj: Mapping[str, Any]) -> str | None:
    """Why a structurally sound object is not for this version to decode, if so."""
    version = obj["v"]
    if version == SIGNED_VERSION and obj.get("kind") == SEAL_KIND:
        # A seal anywhere but the first line (copied along by an older compactor).
        return "misplaced_seal"
    if not readable_version(version):
        return f"unknown_version:{version}"
    kind = obj.get("kind")
    if isinstance(kind, str) and kind not in ENTRY_TYPES:
        return f"unknown_kind:{kind[:MAX_KIND_LABEL]}"
    return None


def _decode_line(line: str, line_no: int, into: DecodedSegment) -> None:
    try:
        obj = parse_json(line)
    except ValueError as exc:
        into.rejected.append(RejectedLine(line_no, f"invalid JSON: {exc}"))
        return
    if not isinstance(obj, dict):
        problem = f"expected a JSON object, got {type_name(obj)}"
        into.rejected.append(RejectedLine(line_no, problem))
        return
    version = obj.get("v")
    if isinstance(version, bool) or not isinstance(version, int):
        into.rejected.append(RejectedLine(line_no, "field 'v': expected an integer version"))
        return
    skip = _skip_reason(obj)
    if skip is not None:
        into.skipped[skip] += 1
        if skip != "misplaced_seal":
            into.unknown.append(obj)
        return
    try:
        into.entries.append(decode_entry(obj))
    except InvalidEntry as exc:
        into.rejected.append(RejectedLine(line_no, str(exc), exc.refusal))


class _LineReader:
    """The lines of a gzip'd payload, one at a time, within SegmentLimits.

    Yields each non-empty line without its newline (None when it was longer than
    MAX_LINE_BYTES and was skipped); `lines` counts every line so far, empty ones too,
    which are skipped a buffer at a time rather than one by one. Once `hasher` is set,
    every byte read after is hashed, so a seal can be checked without holding the payload.
    """

    def __init__(self, data: bytes, limits: SegmentLimits) -> None:
        self.limits = limits
        self._stream = gzip.GzipFile(fileobj=io.BytesIO(data), mode="rb")
        self.expanded = 0
        self.lines = 0
        self.hasher: Any = None

    def _read(self, size: int) -> bytes:
        return self._counted(self._stream.readline(size))

    def _counted(self, chunk: bytes) -> bytes:
        self.expanded += len(chunk)
        if self.expanded > self.limits.expanded_bytes:
            raise CorruptSegment(
                f"segment expands beyond {self.limits.expanded_bytes} bytes",
                Refusal.SEGMENT_TOO_LARGE,
            )
        if self.hasher is not None:
            self.hasher.update(chunk)
        return chunk

    def __iter__(self) -> Iterator[bytes | None]:
        with self._stream:
            while True:
                self._skip_empty_lines()
                line = self._read(MAX_LINE_BYTES + 1)
                if not line:
                    return
                self._count_lines(1)
                if line.endswith(b"\n"):
                    yield line[:-1]
                elif len(line) <= MAX_LINE_BYTES:
                    yield line  # the last line, without a newline
                else:
                    self._skip_rest_of_line()
                    yield None

    def seal_and_digest(self) -> tuple[SegmentSeal | None, str]:
        """The seal on the first line (None if it holds none) and the digest of every byte
        after it, as decoding would hash them; every other line is only counted."""
        with self._stream:
            first = self._read(MAX_LINE_BYTES + 1)
            self.hasher = blake3.blake3()
            line = first[:-1] if first.endswith(b"\n") else first
            seal = None
            if line.startswith(b"{") and len(line) <= MAX_LINE_BYTES:
                try:
                    seal = _seal_or_none(line.decode("utf-8"))
                except UnicodeDecodeError:
                    seal = None
            if seal is None:
                return None, ""
            self._count_lines(1)
            while chunk := self._stream.read(_DIGEST_CHUNK_BYTES):
                self._counted(chunk)
                self._count_lines(chunk.count(b"\n"))
            return seal, self.hasher.hexdigest()

    def _count_lines(self, count: int) -> None:
        self.lines += count
        if self.lines > self.limits.lines:
            raise CorruptSegment(
                f"segment has more than {self.limits.lines} lines",
                Refusal.SEGMENT_TOO_MANY_LINES,
            )

    def _skip_empty_lines(self) -> None:
        # A run of newlines costs one step per buffer, not one per line (a megabyte of
        # them would otherwise take seconds).
        while True:
            ahead = self._stream.peek(1)
            run = len(ahead) - len(ahead.lstrip(b"\n"))
            if run == 0:
                return
            self._count_lines(len(self._counted(self._stream.read(run))))

    def _skip_rest_of_line(self) -> None:
        while True:
            chunk = self._read(_SKIP_CHUNK_BYTES)
            if not chunk or chunk.endswith(b"\n"):
                return


def decode_segment(data: bytes, limits: SegmentLimits = SEGMENT_LIMITS) -> DecodedSegment:
    """Every line of a segment, read lazily within `limits`.

    Raises CorruptSegment (its `refusal` says why) for a segment that is not gzip'd
    UTF-8, or is beyond `limits`; a line beyond a limit is rejected alone.
    """
    _check_compressed_size(data, limits)
    decoded = DecodedSegment()
    reader = _LineReader(data, limits)
    try:
        for raw in reader:
            line_no = reader.lines
            if raw is None:
                problem = f"line is longer than {MAX_LINE_BYTES} bytes"
                decoded.rejected.append(RejectedLine(line_no, problem, Refusal.LINE_TOO_LONG))
                continue
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise CorruptSegment(f"segment is not UTF-8 text: {exc}") from None
            if line_no == 1:
                reader.hasher = blake3.blake3()
                seal = _seal_or_none(line) if line.startswith("{") else None
                if seal is not None:
                    decoded.seal = seal
                    continue
            if line.strip():
                _decode_line(line, line_no, decoded)
    except (OSError, EOFError, zlib.error) as exc:
        raise CorruptSegment(f"segment is not valid gzip: {exc or type(exc).__name__}") from None
    if decoded.seal is not None:
        decoded.body_digest = reader.hasher.hexdigest()
    return decoded


def read_seal(data: bytes, limits: SegmentLimits = SEGMENT_LIMITS) -> DecodedSegment:
    """A segment's seal and the digest of the bytes after it, with no entry decoded.

    The same seal and digest `decode_segment` gives (so the same verdict on it), from a
    pass that holds one chunk of the decompressed payload at a time and parses only the
    first line. Raises CorruptSegment as `decode_segment` does for a payload that is not
    gzip or is beyond `limits`.
    """
    _check_compressed_size(data, limits)
    sealed = DecodedSegment()
    reader = _LineReader(data, limits)
    try:
        sealed.seal, sealed.body_digest = reader.seal_and_digest()
    except (OSError, EOFError, zlib.error) as exc:
        raise CorruptSegment(f"segment is not valid gzip: {exc or type(exc).__name__}") from None
    return sealed


def _check_compressed_size(data: bytes, limits: SegmentLimits) -> None:
    if len(data) > limits.compressed_bytes:
        raise CorruptSegment(
            f"segment has {len(data)} bytes, more than the limit of {limits.compressed_bytes}",
            Refusal.SEGMENT_TOO_LARGE,
        )


def _seal_or_none(line: str) -> SegmentSeal | None:
    """The seal a first line holds; None when it is an ordinary line (or a broken seal,
    which then counts as no seal: the receiver's policy decides about unsealed segments)."""
    try:
        obj = parse_json(line)
    except ValueError:
        return None
    if not isinstance(obj, dict) or obj.get("kind") != SEAL_KIND or obj.get("v") != SIGNED_VERSION:
        return None
    try:
        return SegmentSeal.from_wire(obj)
    except InvalidEntry:
        return None
