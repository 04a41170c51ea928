"""What one dream cycle carries from phase to phase, and the names its records use.

`CycleState` is made at the start of a cycle and dropped at its end: nothing in it is
durable. What must survive a crash is written by the phases, in their own transactions.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from dreamcycle.daemon.cycle import accounted
from dreamcycle.daemon.runtime import Peer
from dreamcycle.daemon.statuses import CycleStatus, EntryStatus
from dreamcycle.zeitgeist.entries import Entry
from dreamcycle.zeitgeist.signing import Verdict

#: How far the log has been read: segments at or below this HLC are applied.
CURSOR_META_KEY: Final = "cursor_hlc"
#: The last publication sequence number claimed by this peer.
PUBLISH_SEQ_META_KEY: Final = "publish_seq"
LAST_SWEEP_META_KEY: Final = "last_sweep_ms"
LAST_COMPACTION_META_KEY: Final = "last_compaction_ms"


#: An entry's status and, when it was not applied, why.
EntryOutcome = tuple[EntryStatus, str | None]


class FatalCycleError(RuntimeError):
    """The daemon must stop (another process owns this peer id, say)."""


@dataclass
class FetchedSegment:
    key: str
    entries: list[Entry]
    rejected: int
    skipped: int


@dataclass
class CycleState:
    now_ms: int
    segments: list[FetchedSegment] = field(default_factory=list)
    local: list[Entry] = field(default_factory=list)
    ordered: list[Entry] = field(default_factory=list)
    rejected: dict[str, str] = field(default_factory=dict)  # entry id -> reason
    own_keys: list[str] = field(default_factory=list)  # this peer's segments, listed
    #: Foreign segments listed that could not be read: the cursor stays before the first.
    unread_keys: list[str] = field(default_factory=list)
    seal_problems: dict[str, Verdict] = field(default_factory=dict)  # segment key -> why
    #: Segments refused for want of a trusted signer (segment key -> the signing key's
    #: id), to be read again once the keyring trusts it; and those read again this cycle.
    awaiting_signer: dict[str, str] = field(default_factory=dict)
    read_again: list[str] = field(default_factory=list)
    stats: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: True once SIGTERM / SIGINT asked the daemon to stop (read from the phase's thread):
    #: long phases return between batches, and what they did not commit waits for the
    #: next start.
    stop_requested: Callable[[], bool] = field(default=lambda: False, repr=False)
    #: The time decay and the sweep measure against (daemon/cycle/accounted.py), set once.
    accounted_ms: int | None = None

    def all_entries(self) -> list[Entry]:
        """Every entry read this cycle: the log's segments, then this peer's own."""
        return [e for segment in self.segments for e in segment.entries] + self.local

    def accounted_now(self, peer: Peer) -> int:
        """The cycle's accounted time, advanced once per cycle by whichever phase asks
        first (in the caller's transaction if there is one)."""
        if self.accounted_ms is None:
            with peer.db.transaction():
                self.accounted_ms = accounted.advance(
                    peer.db, self.now_ms, peer.config.clock.max_step_s
                )
        return self.accounted_ms


PhaseFn = Callable[[Peer, CycleState], dict[str, Any]]

__all__ = [
    "CURSOR_META_KEY",
    "LAST_COMPACTION_META_KEY",
    "LAST_SWEEP_META_KEY",
    "PUBLISH_SEQ_META_KEY",
    "CycleState",
    "CycleStatus",
    "EntryOutcome",
    "EntryStatus",
    "FatalCycleError",
    "FetchedSegment",
    "PhaseFn",
]
