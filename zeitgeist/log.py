"""The zeitgeist log on top of a LogBackend: publish, poll, heartbeats, snapshots, compaction.

Guarantees:

* Segments are immutable and created only if absent. Before a segment, its
  writer creates `claim/<peer>/<seq>` naming it (sealed by the writer's key when it
  signs): two processes running with one peer id collide on the claim and the
  second stops with FencedOut. A claim that no key of this peer sealed is someone
  else's forgery, not a fence: publish raises ClaimTaken, and the writer prepares
  its entries again under the next sequence number.
* Keys sort by hybrid logical clock. A reader lists from `cursor - window` and
  skips what it has applied, so a segment that landed late is still seen; a
  writer whose create returned later than window/2 after its key's time
  republishes the entries under a fresh key (entries are idempotent).
* An idle poll is one listing request, whatever the number of peers.
* Compaction folds segments older than every live peer's cursor (minus the
  window) into a snapshot, writes it, and only then deletes what it folded;
  a new peer bootstraps from the newest snapshot.
* Nothing read can move a reader past real segments: keys dated beyond the allowed
  clock skew are deferred, a cursor is never trusted beyond the wall clock (listing
  and compaction start from min(cursor, now) - window), and a snapshot is taken only
  if sealed, not dated after now, holding no entry dated after itself, and holding
  everything the snapshot before it held.
* Only what verifies moves a reader's clock: a segment's key time is observed once the
  segment (or its copy in a roll-up) was read and its seal held, not when it is listed,
  and a refused segment moves no cursor either (a log without a verifier trusts every
  object, and observes the keys it lists).
* With roll-ups configured, the holder of the roll-up lease copies recent segments into
  one sealed object that the other peers read instead of every segment (a constant
  number of requests a cycle, whatever the number of peers); a copy is used only if its
  own writer's seal holds, and a segment no roll-up holds in time is read directly.
* Every refusal (a malformed key, a key from the future, a segment or line beyond
  its limits) is counted each time and logged once per object.
* No object is read whole before its size is checked: every read is bounded by the
  object's limit (a segment's or snapshot's compressed bytes, MAX_CLAIM_BYTES, ...),
  and the backend stops one byte past it.

Crash safety of publishing rests on the caller: persist a PreparedSegment before
publish() and, after a crash, publish that same object again. Preparing new
entries under a sequence number that was already claimed is what another
process would do, so it is refused with FencedOut.

The parts live in private modules, put together here as `Zeitgeist`: `_log_base`
(settings, refusals, bounded reads), `_log_writer` (claims, publish, fencing),
`_log_reader` (polls, cursors, snapshots to trust), `_log_heartbeats` (liveness),
`_log_compaction` (snapshots written under a lease) and `_log_rollup` (roll-ups of recent
segments, written under a lease of their own); the defaults of its settings are in
zeitgeist/defaults.py.
"""

from __future__ import annotations

from dreamcycle.zeitgeist._log_base import (
    OBJECT_TOO_LARGE,
    FencedOut,
    InvalidSetting,
    LogOnce,
    RefusalCounter,
    ZeitgeistError,
    logger,
)
from dreamcycle.zeitgeist._log_compaction import (
    MAX_LEASE_BYTES,
    CompactionOutcome,
    CompactionReport,
)
from dreamcycle.zeitgeist._log_heartbeats import (
    HEARTBEAT_FORMAT_VERSION,
    MAX_HEARTBEAT_BYTES,
    Heartbeat,
    InvalidHeartbeat,
)
from dreamcycle.zeitgeist._log_rollup import LogRollups, RolledUp, RollupReport
from dreamcycle.zeitgeist._log_writer import (
    FORGED_CLAIMS_CHECKED,
    MAX_CLAIM_BYTES,
    ClaimTaken,
    EmptySegment,
    LogWriter,
    PreparedSegment,
    PublishResult,
)
from dreamcycle.zeitgeist.defaults import (
    DEFAULT_LEASE_TTL_MS,
    DEFAULT_LIVENESS_TIMEOUT_MS,
    DEFAULT_MAX_FUTURE_MS,
    DEFAULT_WINDOW_MS,
    LOGGED_OBJECTS_MEMORY,
)

__all__ = [
    "DEFAULT_LEASE_TTL_MS",
    "DEFAULT_LIVENESS_TIMEOUT_MS",
    "DEFAULT_MAX_FUTURE_MS",
    "DEFAULT_WINDOW_MS",
    "FORGED_CLAIMS_CHECKED",
    "HEARTBEAT_FORMAT_VERSION",
    "LOGGED_OBJECTS_MEMORY",
    "MAX_CLAIM_BYTES",
    "MAX_HEARTBEAT_BYTES",
    "MAX_LEASE_BYTES",
    "OBJECT_TOO_LARGE",
    "ClaimTaken",
    "CompactionOutcome",
    "CompactionReport",
    "EmptySegment",
    "FencedOut",
    "Heartbeat",
    "InvalidHeartbeat",
    "InvalidSetting",
    "LogOnce",
    "PreparedSegment",
    "PublishResult",
    "RefusalCounter",
    "RolledUp",
    "RollupReport",
    "Zeitgeist",
    "ZeitgeistError",
    "logger",
]


class Zeitgeist(LogWriter, LogRollups):
    """One peer's view of the shared log. All methods block; run them in worker threads."""
