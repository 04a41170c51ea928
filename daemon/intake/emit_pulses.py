"""Pulses this peer sends: a salience ripple seeded at a text or at a stored chunk.

Forget pulses are not sent alone: they travel with a tombstone (emit_tombstones.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamcycle.daemon.intake.emit import Emitted, check_reason, queue_entry, request_key
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses.constants import QUERY_MAX_CHARS
from dreamcycle.pulses.pulse import (
    PulseKind,
    SalientPulse,
    check_length,
    check_text,
    validate_parameters,
)
from dreamcycle.pulses.vectors import Vector
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import PulseEntry


@dataclass(frozen=True)
class PulseRequest:
    text: str
    kind: PulseKind
    strength: float
    sigma: float
    k: int
    max_hops: int
    decay_per_hop: float
    ttl_s: float
    reason: str
    nonce: str = ""
    #: Seed at this stored chunk (its embedding and hash) instead of at `text`.
    seed_chunk: str | None = None


def emit_pulse(rt: Runtime, request: PulseRequest, *, embedded: Vector | None = None) -> Emitted:
    """`embedded`: the text's embedding, when the caller made it (outside the write lock)."""
    if request.kind is PulseKind.FORGET:
        raise ValueError("forget pulses travel with a tombstone: use `pulse-emit tombstone HASH`")
    check_reason(request.reason, optional=True)
    # Refused before any embedding (the API's request model bounds these before it embeds).
    validate_parameters(
        kind=request.kind,
        strength=request.strength,
        sigma=request.sigma,
        max_hops=request.max_hops,
        k=request.k,
        decay_per_hop=request.decay_per_hop,
        ttl_s=request.ttl_s,
        reason=request.reason,
    )
    if request.seed_chunk is not None:
        stored = rt.db.embedding_of_hash(request.seed_chunk, rt.embedder.index_version)
        if stored is None:
            raise ValueError(
                f"chunk {request.seed_chunk} has no stored embedding of "
                f"{rt.embedder.index_version} to seed at"
            )
        seed, seed_hash = stored, request.seed_chunk
    elif not request.text.strip():
        raise ValueError("the pulse's text is empty: a pulse needs text to seed its embedding")
    else:
        check_text("the pulse's text", request.text)
        check_length("the pulse's text", request.text, QUERY_MAX_CHARS, ValueError)
        seed = rt.embedder.embed_one(request.text) if embedded is None else embedded
        seed_hash = content_hash(request.text)

    def build(hlc: int) -> PulseEntry:
        pulse = SalientPulse(
            seed_embedding=seed,
            kind=request.kind,
            strength=request.strength,
            sigma=request.sigma,
            max_hops=request.max_hops,
            k=request.k,
            decay_per_hop=request.decay_per_hop,
            ts=hlc,
            origin_peer=rt.peer_id,
            reason=request.reason,
            ttl_s=request.ttl_s,
            index_version=rt.embedder.index_version,
            seed_hash=seed_hash,
        ).with_id()
        pulse.validate()
        return PulseEntry(hlc=hlc, origin=rt.peer_id, pulse=pulse)

    # Validate before touching the database, so a bad request writes nothing.
    build(0)
    fields = {**request.__dict__, "kind": request.kind.value, "text": seed_hash}
    if request.seed_chunk is None:  # text-seeded requests keep the key they always had
        del fields["seed_chunk"]
    return queue_entry(rt, request_key("pulse", **fields), build)
