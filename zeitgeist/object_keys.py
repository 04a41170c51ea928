"""The key scheme of a mesh, relative to the prefix a backend adds.

```
seg/<hlc 16 hex>-<peer_id>-<seq 8 hex>.ndjson.gz   immutable segment
snap/<hlc 16 hex>-<peer_id>.ndjson.gz              compacted state
peers/<peer_id>.json                               heartbeat
lease/compactor.json                               compaction lease
claim/<peer_id>/<seq 8 hex>                        fencing claim of one segment
seg/<last hlc>-<peer_id>-<first hlc>.roll         roll-up: recent segments, verbatim
lease/rollup.json                                  lease of the roll-up writer
```
Fixed-width lowercase hex makes lexical order equal numeric order, so a listing
of `seg/` is already in HLC order. Roll-ups sort among the segments by their last HLC, so
the one listing a poll makes finds both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from dreamcycle.zeitgeist.hlc import HLC_HEX_DIGITS, check_hlc, format_hlc, parse_hlc

SEGMENT_PREFIX: Final = "seg/"
SNAPSHOT_PREFIX: Final = "snap/"
HEARTBEAT_PREFIX: Final = "peers/"
CLAIM_PREFIX: Final = "claim/"
LEASE_KEY: Final = "lease/compactor.json"
ROLLUP_LEASE_KEY: Final = "lease/rollup.json"
ROLLUP_SUFFIX: Final = ".roll"
#: Where a backend's probe() writes a throw-away key, and removes it.
PROBE_PREFIX: Final = "probe/"

SEGMENT_SUFFIX: Final = ".ndjson.gz"
HEARTBEAT_SUFFIX: Final = ".json"

SEQ_HEX_DIGITS: Final = 8
SEQ_MAX: Final = (1 << (4 * SEQ_HEX_DIGITS)) - 1
PEER_ID_MAX_LEN: Final = 64

# '-' separates the fields of segment and snapshot keys and '/' separates path
# levels, so neither may appear in a peer id. A leading '.' is refused too: such
# names ('.', '..', '.hidden') are special path components for the directory backend.
_PEER_ID_RE: Final = re.compile(rf"[A-Za-z0-9_][A-Za-z0-9_.]{{0,{PEER_ID_MAX_LEN - 1}}}")
_PEER: Final = r"([A-Za-z0-9_][A-Za-z0-9_.]*)"
_HLC: Final = rf"([0-9a-f]{{{HLC_HEX_DIGITS}}})"
_SEQ: Final = rf"([0-9a-f]{{{SEQ_HEX_DIGITS}}})"
_SEGMENT_RE: Final = re.compile(
    rf"{re.escape(SEGMENT_PREFIX)}{_HLC}-{_PEER}-{_SEQ}{re.escape(SEGMENT_SUFFIX)}"
)
_SNAPSHOT_RE: Final = re.compile(
    rf"{re.escape(SNAPSHOT_PREFIX)}{_HLC}-{_PEER}{re.escape(SEGMENT_SUFFIX)}"
)
_HEARTBEAT_RE: Final = re.compile(
    rf"{re.escape(HEARTBEAT_PREFIX)}{_PEER}{re.escape(HEARTBEAT_SUFFIX)}"
)
_CLAIM_RE: Final = re.compile(rf"{re.escape(CLAIM_PREFIX)}{_PEER}/{_SEQ}")
_ROLLUP_RE: Final = re.compile(
    rf"{re.escape(SEGMENT_PREFIX)}{_HLC}-{_PEER}-{_HLC}{re.escape(ROLLUP_SUFFIX)}"
)


class InvalidPeerId(ValueError):
    """A peer id that cannot be used in keys."""


class InvalidKey(ValueError):
    """A key that does not follow the mesh key scheme."""


def validate_peer_id(peer_id: str) -> str:
    """`peer_id` if it matches [A-Za-z0-9_][A-Za-z0-9_.]{0,63}; InvalidPeerId otherwise."""
    if not isinstance(peer_id, str) or _PEER_ID_RE.fullmatch(peer_id) is None:
        raise InvalidPeerId(
            f"peer id {peer_id!r} is invalid: use 1-{PEER_ID_MAX_LEN} characters from "
            "A-Z a-z 0-9 _ . (not starting with '.'); '-' and '/' separate key fields"
        )
    return peer_id


def _check_seq(seq: int) -> int:
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq <= SEQ_MAX:
        raise InvalidKey(f"sequence number {seq!r} is outside 0..{SEQ_MAX}")
    return seq


def _format_seq(seq: int) -> str:
    return f"{_check_seq(seq):0{SEQ_HEX_DIGITS}x}"


def _match(pattern: re.Pattern[str], key: str, what: str, shape: str) -> re.Match[str]:
    found = pattern.fullmatch(key) if isinstance(key, str) else None
    if found is None:
        raise InvalidKey(f"{key!r} is not a {what} key (expected {shape})")
    return found


def _peer_in_key(peer_id: str, key: str, what: str) -> str:
    try:
        return validate_peer_id(peer_id)
    except InvalidPeerId as exc:
        raise InvalidKey(f"{key!r} is not a {what} key: {exc}") from None


@dataclass(frozen=True, order=True)
class SegmentKey:
    hlc: int
    peer_id: str
    seq: int

    def __post_init__(self) -> None:
        check_hlc(self.hlc, "segment hlc")
        validate_peer_id(self.peer_id)
        _check_seq(self.seq)

    @property
    def key(self) -> str:
        return (
            f"{SEGMENT_PREFIX}{format_hlc(self.hlc)}-{self.peer_id}-"
            f"{_format_seq(self.seq)}{SEGMENT_SUFFIX}"
        )


@dataclass(frozen=True, order=True)
class SnapshotKey:
    hlc: int
    peer_id: str

    def __post_init__(self) -> None:
        check_hlc(self.hlc, "snapshot hlc")
        validate_peer_id(self.peer_id)

    @property
    def key(self) -> str:
        return f"{SNAPSHOT_PREFIX}{format_hlc(self.hlc)}-{self.peer_id}{SEGMENT_SUFFIX}"


@dataclass(frozen=True, order=True)
class ClaimKey:
    peer_id: str
    seq: int

    def __post_init__(self) -> None:
        validate_peer_id(self.peer_id)
        _check_seq(self.seq)

    @property
    def key(self) -> str:
        return f"{claim_prefix(self.peer_id)}{_format_seq(self.seq)}"


@dataclass(frozen=True, order=True)
class RollupKey:
    """A roll-up of the segments keyed `first_hlc` .. `last_hlc`, written by `peer_id`."""

    last_hlc: int
    first_hlc: int
    peer_id: str

    def __post_init__(self) -> None:
        check_hlc(self.last_hlc, "roll-up last hlc")
        check_hlc(self.first_hlc, "roll-up first hlc")
        validate_peer_id(self.peer_id)
        if self.first_hlc > self.last_hlc:
            raise InvalidKey(f"roll-up range {self.first_hlc:x}..{self.last_hlc:x} is reversed")

    @property
    def key(self) -> str:
        return (
            f"{SEGMENT_PREFIX}{format_hlc(self.last_hlc)}-{self.peer_id}-"
            f"{format_hlc(self.first_hlc)}{ROLLUP_SUFFIX}"
        )

    def covers(self, hlc: int) -> bool:
        return self.first_hlc <= hlc <= self.last_hlc


def rollup_key(last_hlc: int, first_hlc: int, peer_id: str) -> str:
    return RollupKey(last_hlc, first_hlc, peer_id).key


def is_rollup_key(key: str) -> bool:
    """Whether a key listed under `seg/` names a roll-up rather than a segment."""
    return key.startswith(SEGMENT_PREFIX) and key.endswith(ROLLUP_SUFFIX)


def parse_rollup_key(key: str) -> RollupKey:
    shape = "seg/<16 hex last hlc>-<peer id>-<16 hex first hlc>.roll"
    last_hex, peer_id, first_hex = _match(_ROLLUP_RE, key, "roll-up", shape).groups()
    return RollupKey(
        parse_hlc(last_hex), parse_hlc(first_hex), _peer_in_key(peer_id, key, "roll-up")
    )


def rollups_below(keys: list[str], horizon_hlc: int) -> list[str]:
    """The roll-ups among `keys` (a listing of `seg/`) that hold only segments keyed below
    `horizon_hlc` (and any roll-up key that does not parse: nothing this layer wrote)."""
    below = []
    for key in keys:
        if not is_rollup_key(key):
            continue
        try:
            if parse_rollup_key(key).last_hlc < horizon_hlc:
                below.append(key)
        except InvalidKey:
            below.append(key)
    return below


def segment_key(hlc: int, peer_id: str, seq: int) -> str:
    return SegmentKey(hlc, peer_id, seq).key


def parse_segment_key(key: str) -> SegmentKey:
    shape = "seg/<16 hex hlc>-<peer id>-<8 hex seq>.ndjson.gz"
    hlc_hex, peer_id, seq_hex = _match(_SEGMENT_RE, key, "segment", shape).groups()
    return SegmentKey(parse_hlc(hlc_hex), _peer_in_key(peer_id, key, "segment"), int(seq_hex, 16))


def segment_listing_start(hlc: int) -> str:
    """A `start_after` that lists every segment whose hlc is >= `hlc`.

    Every key at this hlc extends this string, so it sorts after it.
    """
    return f"{SEGMENT_PREFIX}{format_hlc(hlc)}"


def snapshot_key(hlc: int, peer_id: str) -> str:
    return SnapshotKey(hlc, peer_id).key


def parse_snapshot_key(key: str) -> SnapshotKey:
    shape = "snap/<16 hex hlc>-<peer id>.ndjson.gz"
    hlc_hex, peer_id = _match(_SNAPSHOT_RE, key, "snapshot", shape).groups()
    return SnapshotKey(parse_hlc(hlc_hex), _peer_in_key(peer_id, key, "snapshot"))


def heartbeat_key(peer_id: str) -> str:
    return f"{HEARTBEAT_PREFIX}{validate_peer_id(peer_id)}{HEARTBEAT_SUFFIX}"


def parse_heartbeat_key(key: str) -> str:
    """The peer id of a heartbeat key."""
    (peer_id,) = _match(_HEARTBEAT_RE, key, "heartbeat", "peers/<peer id>.json").groups()
    return _peer_in_key(peer_id, key, "heartbeat")


def claim_prefix(peer_id: str) -> str:
    """The one-level listing prefix of a peer's claims."""
    return f"{CLAIM_PREFIX}{validate_peer_id(peer_id)}/"


def claim_key(peer_id: str, seq: int) -> str:
    return ClaimKey(peer_id, seq).key


def parse_claim_key(key: str) -> ClaimKey:
    peer_id, seq_hex = _match(_CLAIM_RE, key, "claim", "claim/<peer id>/<8 hex seq>").groups()
    return ClaimKey(_peer_in_key(peer_id, key, "claim"), int(seq_hex, 16))


__all__ = [
    "CLAIM_PREFIX",
    "HEARTBEAT_PREFIX",
    "LEASE_KEY",
    "ROLLUP_LEASE_KEY",
    "SEGMENT_PREFIX",
    "SNAPSHOT_PREFIX",
    "ClaimKey",
    "InvalidKey",
    "InvalidPeerId",
    "RollupKey",
    "SegmentKey",
    "SnapshotKey",
    "claim_key",
    "claim_prefix",
    "heartbeat_key",
    "is_rollup_key",
    "parse_claim_key",
    "parse_heartbeat_key",
    "parse_rollup_key",
    "parse_segment_key",
    "parse_snapshot_key",
    "rollup_key",
    "rollups_below",
    "segment_key",
    "segment_listing_start",
    "snapshot_key",
    "validate_peer_id",
]
