"""The audit trail's retention: checkpoint the journal when due, then let old steps go.

Run once per cycle, after every phase that changes salience, so the state read for a
checkpoint is what replaying the journal up to its head produces. A checkpoint is
written at most once per `audit.checkpoint_interval_s`; journal steps older than
`audit.retention_s` are deleted up to the newest checkpoint that covers them.
"""

from __future__ import annotations

from typing import Any

from dreamcycle.daemon.runtime import Peer
from dreamcycle.store import checkpoints


def maybe_checkpoint(peer: Peer, now_ms: int) -> dict[str, Any]:
    audit = peer.config.audit
    if not audit.enabled:
        return {"skipped": "disabled"}
    db = peer.db
    stats: dict[str, Any] = {}
    last = checkpoints.last_checkpoint_ms(db)
    if last is None or now_ms - last >= audit.checkpoint_interval_s * 1000:
        with db.transaction():
            written = checkpoints.write_checkpoint(db, now_ms=now_ms)
        if written is not None:
            stats["checkpoint_seq"] = written.seq
            stats["checkpoint_chunks"] = written.chunks
    with db.transaction():
        pruned = checkpoints.prune(db, older_than_ms=now_ms - int(audit.retention_s * 1000))
    if pruned is not None:
        stats["pruned_through_seq"] = pruned.through_seq
        stats["pruned_steps"] = pruned.steps
    return stats
