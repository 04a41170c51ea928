"""Snapshots: the folded state a new peer reads instead of the whole history.

A snapshot holds entries in the same ndjson.gz form as a segment. Folding orders
entries deterministically, keeps one copy of each id, drops pulses that have expired
and strips expired Forget pulses from unsigned tombstones; every other entry is kept, so replaying a snapshot and then the
segments after it applies the same entries as replaying everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from dreamcycle.zeitgeist.entries import (
    Entry,
    PulseEntry,
    TombstoneEntry,
    canonical_json,
    entry_order_key,
)


@dataclass(frozen=True)
class Snapshot:
    """A decoded snapshot; a peer that starts from it polls from `hlc`.

    `unknown` holds entries of versions or kinds this code does not understand,
    kept verbatim so a newer peer bootstrapping from this snapshot still gets them.
    """

    key: str
    hlc: int
    entries: list[Entry]
    unknown: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Fold:
    """The result of folding, with what was left out and why."""

    entries: list[Entry]
    unknown: list[dict[str, Any]]
    duplicates_dropped: int
    expired_pulses_dropped: int
    forget_pulses_stripped: int


def _dedupe_by_id(entries: list[Entry]) -> tuple[list[Entry], int]:
    """One entry per id, in entry_order_key order, and how many copies were dropped."""
    seen: set[str] = set()
    unique: list[Entry] = []
    for entry in sorted(entries, key=entry_order_key):
        if entry.id not in seen:
            seen.add(entry.id)
            unique.append(entry)
    return unique, len(entries) - len(unique)


def _unknown_order_key(obj: Mapping[str, Any]) -> tuple[int, str, bytes]:
    hlc = obj.get("hlc")
    origin = obj.get("origin")
    return (
        hlc if isinstance(hlc, int) and not isinstance(hlc, bool) else -1,
        origin if isinstance(origin, str) else "",
        canonical_json(obj),
    )


def _dedupe_unknown(objects: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    by_bytes = {canonical_json(obj): dict(obj) for obj in objects}
    return sorted(by_bytes.values(), key=_unknown_order_key)


def fold_entries(
    entries: Iterable[Entry], unknown: Iterable[Mapping[str, Any]], now_ms: int
) -> Fold:
    """Entries for a snapshot taken at wall time `now_ms`, in entry_order_key order."""
    unique, duplicates = _dedupe_by_id(list(entries))
    kept: list[Entry] = []
    expired = stripped = 0
    for entry in unique:
        if isinstance(entry, PulseEntry) and entry.pulse.is_expired(now_ms):
            expired += 1
            continue
        if (
            isinstance(entry, TombstoneEntry)
            and not entry.signed
            and entry.forget_pulse is not None
            and entry.forget_pulse.is_expired(now_ms)
        ):
            # A signed tombstone is kept whole: its signature covers the pulse, and the
            # folding peer cannot sign for the origin (an expired pulse is not applied).
            # The stripped tombstone gets a new id; applying a tombstone is
            # idempotent by content hash, so a peer that saw the original loses nothing.
            entry = replace(entry, forget_pulse=None)
            stripped += 1
        kept.append(entry)
    # Stripping can make a tombstone equal to one an earlier snapshot already stripped.
    final, stripped_duplicates = _dedupe_by_id(kept)
    return Fold(
        entries=final,
        unknown=_dedupe_unknown(unknown),
        duplicates_dropped=duplicates + stripped_duplicates,
        expired_pulses_dropped=expired,
        forget_pulses_stripped=stripped,
    )
