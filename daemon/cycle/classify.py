"""Phase 2, classify: which entries may apply, and this peer's new chunks embedded.

Reads: the entries scan gathered, the signing keyring (through the entry gate), chunks
waiting for admission. Writes: admitted chunks (embedding, journal step, assert entry in
the outbox), one transaction per embedding batch, each added to the live index after it
commits. Refusals are kept in the cycle's state and recorded by the phase that meets the
entry; an entry whose signature fails is dropped from the cycle instead, recorded nowhere.
A crash inside: batches committed stay admitted; the rest are admitted next cycle.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dreamcycle.daemon.cycle.state import CycleState
from dreamcycle.daemon.memory.admission import admission_vectors, record_admission
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.pulse import InvalidPulse, SalientPulse
from dreamcycle.zeitgeist.entries import PulseEntry


def run(peer: Peer, st: CycleState) -> dict[str, Any]:
    """Check signatures and pulses, embed new local chunks in batches, queue their asserts."""
    unsigned = _drop_unsigned(peer, st)
    for entry in st.all_entries():
        if entry.id in st.rejected:
            continue
        if isinstance(entry, PulseEntry):
            reason = _pulse_problem(peer, entry.pulse)
            if reason is not None:
                st.rejected[entry.id] = reason
    admitted = _admit_pending(peer, st)
    return {"rejected_pulses": len(st.rejected), "unsigned": unsigned, "admitted": admitted}


def _drop_unsigned(peer: Peer, st: CycleState) -> int:
    """Remove every entry whose signature (or segment seal) fails from the cycle.

    Counted (per reason, by the entry gate) and left out of everything after: such an
    entry moves no clock and is recorded nowhere, so a flood of them costs no row, and a
    forged copy of a real entry or pulse id cannot mark the real one as seen. A segment
    keeps the number it lost, recorded with it.
    """
    refused = peer.entry_gate.screen(st.segments, st.seal_problems, (e.id for e in st.local))
    if not refused:
        return 0
    dropped = 0
    for segment in st.segments:
        kept = [e for e in segment.entries if e.id not in refused]
        segment.rejected += len(segment.entries) - len(kept)
        dropped += len(segment.entries) - len(kept)
        segment.entries = kept
    return dropped


def _pulse_problem(peer: Peer, pulse: SalientPulse) -> str | None:
    try:
        pulse.validate()
    except InvalidPulse as exc:
        return f"invalid: {exc}"
    if pulse.seed_embedding.shape[0] != peer.embedder.dim:
        return f"dimension {pulse.seed_embedding.shape[0]} != local {peer.embedder.dim}"
    if pulse.index_version != peer.embedder.index_version:
        return f"index_version {pulse.index_version} != local {peer.embedder.index_version}"
    return None


def _admit_pending(peer: Peer, st: CycleState) -> int:
    """Embed (if `ingest` did not already) and index new chunks; queue asserts for local ones."""
    db = peer.db
    pending = db.pending_admission(peer.config.cycle.max_embed)
    # One embedding batch per transaction: a stop request waits for one batch, not all.
    step = peer.config.embedding.batch_size
    admitted = 0
    for start in range(0, len(pending), step):
        if st.stop_requested():
            break
        batch = pending[start : start + step]
        vectors, fresh = admission_vectors(peer.embedder, batch)
        with db.transaction():
            record_admission(peer, db, batch, vectors, fresh, st.now_ms)
        # After the commit: the index is derived state, and its stamp tells when it lags.
        peer.index.add(np.array([c.rowid for c in batch], dtype=np.int64), vectors)
        admitted += len(batch)
    if admitted:
        peer.salience.refresh()
    return admitted
