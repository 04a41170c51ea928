"""Heartbeats: what each peer tells the mesh about itself every cycle, and who is live.

A heartbeat carries the peer's cursor (compaction folds nothing a live peer has yet
to read), its last segment sequence number and its public key; a peer whose heartbeat
is older than the liveness timeout is not waited for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from dreamcycle.zeitgeist._log_base import LogCore, ZeitgeistError
from dreamcycle.zeitgeist.backend import ObjectTooLarge
from dreamcycle.zeitgeist.entries import canonical_json, parse_json
from dreamcycle.zeitgeist.hlc import check_hlc
from dreamcycle.zeitgeist.object_keys import (
    HEARTBEAT_PREFIX,
    InvalidKey,
    InvalidPeerId,
    heartbeat_key,
    parse_heartbeat_key,
    validate_peer_id,
)

HEARTBEAT_FORMAT_VERSION: Final = 1
#: Largest heartbeat read: a few hundred bytes are written.
MAX_HEARTBEAT_BYTES: Final = 64 * 1024


class InvalidHeartbeat(ZeitgeistError, ValueError):
    """A heartbeat object that is not JSON or lacks a field; the message names it."""


@dataclass(frozen=True)
class Heartbeat:
    """What a peer tells the mesh about itself each cycle (peers/<peer_id>.json)."""

    peer_id: str
    #: The HLC up to which this peer has applied the log.
    cursor_hlc: int
    last_seen_ms: int
    index_version: str
    public_key: str | None
    #: The last segment sequence number this peer published.
    seq: int

    def to_bytes(self) -> bytes:
        return canonical_json(
            {
                "v": HEARTBEAT_FORMAT_VERSION,
                "peer_id": self.peer_id,
                "cursor_hlc": self.cursor_hlc,
                "last_seen_ms": self.last_seen_ms,
                "index_version": self.index_version,
                "public_key": self.public_key,
                "seq": self.seq,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Heartbeat:
        if len(data) > MAX_HEARTBEAT_BYTES:
            raise InvalidHeartbeat(
                f"heartbeat has {len(data)} bytes, more than the limit of {MAX_HEARTBEAT_BYTES}"
            )
        try:
            obj = parse_json(data)
        except ValueError as exc:
            raise InvalidHeartbeat(f"heartbeat is not JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise InvalidHeartbeat("heartbeat is not a JSON object")
        if obj.get("v") != HEARTBEAT_FORMAT_VERSION:
            raise InvalidHeartbeat(f"heartbeat format version {obj.get('v')!r} is not supported")
        try:
            heartbeat = cls(
                peer_id=validate_peer_id(obj["peer_id"]),
                cursor_hlc=check_hlc(obj["cursor_hlc"], "cursor_hlc"),
                last_seen_ms=_require(obj, "last_seen_ms", int),
                index_version=_require(obj, "index_version", str),
                public_key=_require(obj, "public_key", str | None),
                seq=_require(obj, "seq", int),
            )
        except KeyError as exc:
            raise InvalidHeartbeat(f"heartbeat lacks field {exc}") from None
        except InvalidHeartbeat:
            raise
        except (InvalidPeerId, ValueError) as exc:
            raise InvalidHeartbeat(f"heartbeat: {exc}") from None
        return heartbeat


def _require(obj: dict[str, Any], name: str, expected: Any) -> Any:
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, expected):
        raise InvalidHeartbeat(f"heartbeat field {name!r} has the wrong type: {value!r}")
    return value


class LogHeartbeats(LogCore):
    """Writing this peer's heartbeat and reading everyone's."""

    def heartbeat(self, beat: Heartbeat) -> None:
        if beat.peer_id != self.peer_id:
            raise InvalidHeartbeat(
                f"peer {self.peer_id} cannot write the heartbeat of peer {beat.peer_id}"
            )
        self.backend.write_overwrite(heartbeat_key(self.peer_id), beat.to_bytes())

    def heartbeats(self) -> list[Heartbeat]:
        """Every readable heartbeat; unreadable ones are counted and skipped."""
        beats: list[Heartbeat] = []
        for key in self.backend.list_after(HEARTBEAT_PREFIX, ""):
            try:
                peer_id = parse_heartbeat_key(key)
                data = self.backend.read(key, max_bytes=MAX_HEARTBEAT_BYTES)
                beat = Heartbeat.from_bytes(data)
                if beat.peer_id != peer_id:
                    raise InvalidHeartbeat(f"{key} holds the heartbeat of peer {beat.peer_id}")
            except KeyError:
                continue  # removed between listing and reading
            except (InvalidKey, InvalidHeartbeat, ObjectTooLarge) as exc:
                self._refused(key, "heartbeat_unreadable", str(exc))
                continue
            beats.append(beat)
        return beats

    def live_peers(self, now_ms: int) -> list[Heartbeat]:
        """Peers seen within the liveness timeout."""
        return [b for b in self.heartbeats() if now_ms - b.last_seen_ms <= self.liveness_timeout_ms]
