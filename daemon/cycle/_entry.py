"""Applying one entry in its own savepoint and recording what became of it (phases 4, 5)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from dreamcycle.daemon.cycle.state import EntryOutcome, EntryStatus
from dreamcycle.daemon.runtime import Peer
from dreamcycle.store.database import Database
from dreamcycle.zeitgeist.entries import Entry

log = logging.getLogger("dreamcycle.cycle")


def isolated(
    peer: Peer,
    entry: Entry,
    rejected: str | None,
    apply: Callable[[], EntryOutcome],
    side_effects: tuple[list[Any], ...] = (),
) -> EntryOutcome:
    """Apply one entry in a savepoint; a failure rejects that entry only, with its reason.

    A bad entry from any peer must not stall the cycle: rolled back and recorded as
    rejected, it is never retried, and the rest of its segment still applies. What the
    entry appended to `side_effects` (chunks to add to or hide from the index) is taken
    back with it.
    """
    if rejected is not None:
        return EntryStatus.REJECTED, rejected
    marks = [len(items) for items in side_effects]
    try:
        with peer.db.transaction(), peer.salience.atomic():
            return apply()
    except Exception as exc:
        for items, mark in zip(side_effects, marks, strict=True):
            del items[mark:]
        reason = f"{type(exc).__name__}: {exc}"
        log.warning(
            "entry rejected",
            extra={"entry": entry.id, "kind": entry.KIND, "origin": entry.origin, "reason": reason},
        )
        return EntryStatus.REJECTED, reason


def record(db: Database, entry: Entry, status: EntryStatus, reason: str | None) -> None:
    db.record_entry(
        entry.id, kind=entry.KIND, hlc=entry.hlc, origin=entry.origin, status=status, reason=reason
    )
