"""Tombstones: the retraction of a chunk, here and on every peer, with the forget pulse that
clears the salience around it."""

from __future__ import annotations

import math

from dreamcycle.daemon.intake.emit import (
    WHOLE_HASH,
    Emitted,
    check_reason,
    queue_entry,
    request_key,
    resolve_hash,
)
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.zeitgeist.entries import TombstoneEntry


def emit_tombstone(
    rt: Runtime, *, digest: str, reason: str, ttl_s: float, held_elsewhere: bool = False
) -> Emitted:
    """Queue the retraction of a chunk stored or tombstoned here, named by its hash or a
    unique prefix of it; `held_elsewhere` retracts a whole hash this peer never held."""
    check_reason(reason)
    if not (held_elsewhere and WHOLE_HASH.match(digest)):
        digest = resolve_hash(rt, "chunk", digest)
    seed = rt.db.embedding_of_hash(digest, rt.embedder.index_version)

    def build(hlc: int) -> TombstoneEntry:
        forget = None
        if seed is not None:
            forget = SalientPulse(
                seed_embedding=seed,
                kind=PulseKind.FORGET,
                strength=math.inf,
                sigma=1.0,
                max_hops=0,
                k=1,
                decay_per_hop=0.0,
                ts=hlc,
                origin_peer=rt.peer_id,
                reason=reason,
                ttl_s=ttl_s,
                index_version=rt.embedder.index_version,
                seed_hash=digest,
            ).with_id()
            forget.validate()
        return TombstoneEntry(
            hlc=hlc,
            origin=rt.peer_id,
            content_hash=digest,
            reason=reason,
            collectable_after_ms=None,
            forget_pulse=forget,
        )

    build(0)  # a bad ttl is refused before anything is written
    return queue_entry(rt, request_key("tombstone", digest=digest), build)
