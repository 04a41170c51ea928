"""The statuses the daemon records: what became of a log entry, and how a cycle ended.

Stored as their string values (`entries_applied.status`, `pulses_applied.status`,
`cycles.status`) and used as metric labels, so the values never change.
"""

from __future__ import annotations

import enum


class EntryStatus(enum.StrEnum):
    """What became of one log entry here, recorded in `entries_applied` (and, for pulses,
    in `pulses_applied`): the entry is never read from the log again, whatever the status.
    A learned key `awaiting` its decision's attribution is applied from its own table once
    that is here, or expires (daemon/cycle/reconsolidate.py)."""

    APPLIED = "applied"
    REJECTED = "rejected"
    SKIPPED = "skipped"
    EXPIRED = "expired"
    DUPLICATE = "duplicate"
    AWAITING = "awaiting"


class CycleStatus(enum.StrEnum):
    """How a cycle ended, in `cycles` and the dreamcycle_cycles_total metric."""

    RUNNING = "running"
    DONE = "done"
    #: A stop request came between two phases.
    INTERRUPTED = "interrupted"
    #: A phase raised; state was reloaded and the next cycle retries.
    FAILED = "failed"
    #: A storage fault rolled a phase back; the next attempt redoes it.
    DEFERRED = "deferred"
    #: The daemon must stop (another process owns this peer id, say).
    FATAL = "fatal"
