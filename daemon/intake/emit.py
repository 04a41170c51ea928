"""The queue of this peer's own entries, durable and idempotent, and the checks every kind of
entry shares: its reason, and the hashes (or prefixes of them) it names.

`pulse-emit` writes here while the daemon may be running: one transaction in
the shared database (WAL, synchronous=FULL), so the entry is on disk when the
command returns. Each request has a key derived from its arguments; repeating
the same command finds the key and queues nothing new.

Each kind of entry is emitted by a module of its own beside this one: outcomes
(emit_outcomes.py), pulses (emit_pulses.py), tombstones (emit_tombstones.py), and
supersedes and metadata revisions (emit_revisions.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import blake3

from dreamcycle.daemon.runtime import Runtime, issue_hlc
from dreamcycle.pulses.constants import REASON_MAX_CHARS
from dreamcycle.pulses.pulse import check_length, check_text
from dreamcycle.store.database import hashes_with_prefix
from dreamcycle.zeitgeist.entries import Entry, encode_entry

#: A whole chunk or decision hash.
WHOLE_HASH: Final = re.compile(r"^[0-9a-f]{64}$")
#: The shortest prefix of a hash resolved to the one chunk or decision it starts (recall
#: prints 12 digits); `--cited` resolves against the decision's recalled chunks.
CITED_PREFIX_MIN: Final = 8
HASH_PREFIX: Final = re.compile(rf"^[0-9a-f]{{{CITED_PREFIX_MIN},63}}$")
#: Candidates an ambiguous prefix lists.
AMBIGUOUS_SHOWN: Final = 4
#: What to do about a hash not known here, by what it names.
UNKNOWN_HINT: Final = {
    "chunk": "neither stored nor tombstoned here: retract it on a peer that holds it, or "
    "give its whole hash with --held-elsewhere",
    "decision": "not recorded here: report its outcome on the peer whose recall printed it, "
    "or, when its attribution is yet to arrive from that peer, give its whole hash with "
    "--decided-elsewhere",
}


def check_reason(reason: str, *, optional: bool = False) -> None:
    """A reason is the audit trail's only account of why: blank says nothing. An `optional`
    one (a pulse's, through the API) may be left out, as "", but not given blank."""
    if not reason.strip() and not (optional and reason == ""):
        raise ValueError("the reason is empty: say why")
    check_length("reason", reason, REASON_MAX_CHARS)
    check_text("the reason", reason)


def check_chunk_hash(digest: str) -> None:
    """Entries that name a chunk by a hash the caller computed take the whole hash only."""
    if not WHOLE_HASH.match(digest):
        raise ValueError(f"{digest!r} is not a chunk hash (64 lowercase hex digits)")


class UnknownHash(ValueError):
    """A hash, or a prefix of one, that names no chunk or decision known here."""


def resolve_hash(rt: Runtime, what: str, given: str) -> str:
    """The one known `what` ("chunk" or "decision") hash that `given` is, or starts.

    ValueError names the problem: not a hash, none known (UnknownHash), or a prefix of more
    than one (listing a few).
    """
    if not (WHOLE_HASH.match(given) or HASH_PREFIX.match(given)):
        raise ValueError(
            f"{given!r} is not a {what} hash (64 lowercase hex digits, or a unique prefix of "
            f"at least {CITED_PREFIX_MIN})"
        )
    found = hashes_with_prefix(rt.db, what, given, limit=AMBIGUOUS_SHOWN + 1)
    if not found:
        named = given if WHOLE_HASH.match(given) else f"starting {given}"
        raise UnknownHash(f"{what} {named} is {UNKNOWN_HINT[what]}")
    if len(found) > 1:
        listed = ", ".join(found[:AMBIGUOUS_SHOWN]) + (
            ", ..." if len(found) > AMBIGUOUS_SHOWN else ""
        )
        raise ValueError(f"{given} starts more than one {what} hash ({listed}): give more digits")
    return found[0]


@dataclass(frozen=True)
class Emitted:
    entry_id: str
    new: bool  # False: an identical request was already queued


def request_key(verb: str, **fields: Any) -> str:
    """The key of a request: the same verb and fields find the entry queued before."""
    return (
        verb
        + ":"
        + blake3.blake3(
            json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()
        ).hexdigest()[:32]
    )


def queue_entry(
    rt: Runtime,
    key: str,
    build: Callable[[int], Entry],
    refuse: Callable[[], None] | None = None,
) -> Emitted:
    """Queue the entry `build` makes, unless the request `key` was queued already; `refuse`
    raises when a new request contradicts what is stored (checked in the same transaction)."""
    db = rt.db
    with db.transaction():
        existing = db.request_entry(key)
        if existing is not None:
            return Emitted(existing, new=False)
        if refuse is not None:
            refuse()
        entry = build(issue_hlc(db, rt.clock.now_ms))
        db.outbox_add(
            entry.id,
            entry.KIND,
            entry.hlc,
            encode_entry(entry),
            now_ms=rt.clock.now_ms(),
            request_key=key,
        )
    return Emitted(entry.id, new=True)
