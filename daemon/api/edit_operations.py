"""The operations that change memory: a save, indexed before it returns, and what is
queued for the next cycle to apply and send to peers (outcomes, pulses, tombstones,
supersedes, and the revisions, feedback and revivals aimed at one memory). Each write
takes the one write connection, so edits run one at a time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pydantic

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import edit_models, model_fields
from dreamcycle.daemon.api.answers import memory_row
from dreamcycle.daemon.api.errors import Conflict, NotFound
from dreamcycle.daemon.api.served_peer import ServedPeer, in_flight
from dreamcycle.daemon.intake.emit import UnknownHash, check_reason, resolve_hash
from dreamcycle.daemon.intake.emit_outcomes import ConflictingOutcome, emit_outcome
from dreamcycle.daemon.intake.emit_pulses import PulseRequest, emit_pulse
from dreamcycle.daemon.intake.emit_revisions import (
    emit_revision,
    emit_supersede,
    queued_retractions,
)
from dreamcycle.daemon.intake.emit_tombstones import emit_tombstone
from dreamcycle.daemon.memory.admission import record_admission
from dreamcycle.daemon.memory.confidence import Cause, change_confidence, corroborate
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.pulses import constants
from dreamcycle.pulses.pulse import PulseKind
from dreamcycle.store import tiers
from dreamcycle.store.database import (
    EFFICACY_TYPE,
    REVISABLE_COLUMNS,
    Database,
    NewObservation,
    embedding_text,
)
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import HASH_HEX_LEN


class EditOperations(ServedPeer):
    """The operations that write, each under the write lock."""

    @in_flight
    def save(self, request: edit_models.SaveRequest) -> edit_models.SaveResponse:
        peer = self._require_peer()
        item = NewObservation(
            content=request.content,
            title=request.title,
            type=request.type,
            kind=request.kind,
            project=request.project,
            scope=request.scope,
            topic_key=request.topic_key,
            session_id=request.session_id,
            tool_name=request.tool_name,
            pin_floor=request.pin_floor,
            importance=request.importance,
            deletion_policy=request.deletion_policy,
            confidence=request.confidence,
            stability=request.stability,
        )
        item.validate()
        if item.type == EFFICACY_TYPE:
            raise ValueError(f"type {EFFICACY_TYPE!r} is reserved for the daemon's own records")
        digest = content_hash(item.content)
        vector = self._embedder.embed_one(embedding_text(item.title, item.content))
        now = self._rt.clock.now_ms()
        with self._writing() as writer, peer.index_writes:
            db = writer.db
            with db.transaction():
                if db.is_tombstoned_hash(digest):
                    raise Conflict(f"chunk {digest} was retracted (tombstoned) and stays so")
                added = db.add_observations([item], now_ms=now)[0]
                corroborate(db, [added], now_ms=now)
                confidence = float(
                    db.fetch_one(
                        "SELECT confidence FROM observations WHERE id = ?", (added.rowid,)
                    )[0]
                )
                if added.created:
                    pending = [db.pending_admission_of(added.rowid)]
                    vectors = vector[None, :]
                    record_admission(peer, db, pending, vectors, {added.rowid: vector}, now)
            # Committed: a cycle (or a crash) now sees the chunk whole; only then is it indexed.
            if added.created:
                peer.index.add(np.array([added.rowid], dtype=np.int64), vectors)
        indexed = peer.index.is_live(added.rowid)
        return edit_models.SaveResponse(
            content_hash=digest, created=added.created, indexed=indexed, confidence=confidence
        )

    @in_flight
    def outcome(self, request: edit_models.OutcomeRequest) -> edit_models.Queued:
        self._require_peer()
        with self._writing() as writer:
            decision = _resolved(writer, "decision", request.decision_hash)
            try:
                emitted = emit_outcome(
                    writer,
                    decision=decision,
                    reward=request.reward,
                    reason=request.reason,
                    cited=request.cited,
                )
            except ConflictingOutcome as exc:
                raise Conflict(str(exc)) from None
        return edit_models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @in_flight
    def pulse(self, request: edit_models.PulseRequest) -> edit_models.Queued:
        self._require_peer()
        pulse = PulseRequest(
            text=request.text,
            kind=PulseKind(request.kind),
            strength=request.strength,
            sigma=request.sigma,
            k=request.k,
            max_hops=request.max_hops,
            decay_per_hop=request.decay_per_hop,
            ttl_s=request.ttl_s,
            reason=request.reason or "",
            nonce=request.nonce,
        )
        # Embedded before the write lock is taken: while a request waits for or holds it,
        # the cycle gives way to no request (daemon/scheduling/requests_first.py), and other writers
        # wait; the model takes milliseconds.
        embedded = self._embedder.embed_one(request.text) if request.text.strip() else None
        with self._writing() as writer:
            emitted = emit_pulse(writer, pulse, embedded=embedded)
        return edit_models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @in_flight
    def tombstone(self, request: edit_models.TombstoneRequest) -> edit_models.Queued:
        self._require_peer()
        with self._writing() as writer:
            digest = _resolved(writer, "chunk", request.content_hash)
            emitted = emit_tombstone(
                writer, digest=digest, reason=request.reason, ttl_s=request.ttl_s
            )
        return edit_models.Queued(entry_id=emitted.entry_id, new=emitted.new)

    @in_flight
    def supersede(self, request: edit_models.SupersedeRequest) -> edit_models.SupersedeResponse:
        """Save the new chunk now; the supersede itself applies at the next cycle."""
        self._require_peer()
        check_reason(request.reason)  # before the new chunk is saved: a refusal stores nothing
        new_hash = content_hash(request.memory.content)
        with self._reading() as view:
            old_hash = _resolved(view, "chunk", request.old_hash)
            if new_hash == old_hash:
                raise ValueError("the new content is the old content: nothing to supersede")
            if view.db.is_tombstoned_hash(old_hash):
                raise Conflict(f"chunk {old_hash} was retracted (tombstoned) already")
            # Before the new chunk is saved, so that a refusal stores nothing; checked again
            # under the write lock, where a concurrent edit is seen.
            _refuse_contradicting(view.db, old_hash, new_hash)
        saved = self.save(request.memory)
        with self._writing() as writer, writer.db.transaction():
            _refuse_contradicting(writer.db, old_hash, saved.content_hash)
            emitted = emit_supersede(
                writer,
                old_hash=old_hash,
                new_hash=saved.content_hash,
                reason=request.reason,
            )
        return edit_models.SupersedeResponse(
            saved=saved, queued=edit_models.Queued(entry_id=emitted.entry_id, new=emitted.new)
        )

    @in_flight
    def pin(self, request: edit_models.PinRequest) -> edit_models.ChunkQueued:
        """Queue the pin floor as a revision: applied (journaled, and sent to peers) at the
        next cycle."""
        return self._revise(request.ref, {"pin_floor": request.pin_floor})

    @in_flight
    def unpin(self, request: model_fields.RefRequest) -> edit_models.ChunkQueued:
        return self._revise(request.ref, {"pin_floor": 0.0})

    @in_flight
    def reinforce(self, request: edit_models.FeedbackRequest) -> edit_models.ChunkQueued:
        """A Reward pulse seeded at the chunk (a cold chunk comes back when it applies); a
        user's verification, so its confidence rises at once."""
        return self._feedback(request, PulseKind.REWARD, Cause.REINFORCED)

    @in_flight
    def penalize(self, request: edit_models.FeedbackRequest) -> edit_models.ChunkQueued:
        """A Decay pulse seeded at the chunk; its confidence falls at once."""
        return self._feedback(request, PulseKind.DECAY, Cause.PENALIZED)

    @in_flight
    def update(self, request: edit_models.UpdateRequest) -> edit_models.UpdateResponse:
        """New content supersedes the memory (unset fields kept); a change of title, topic
        or importance alone is a revision of the same memory."""
        self._require_peer()
        with self._reading() as view:
            old = memory_row(view.db, request.ref)
        if old.state == "tombstoned":
            raise Conflict(f"chunk {old.content_hash} was retracted (tombstoned) already")
        given = request.model_dump(exclude={"ref", "reason"}, exclude_none=True)
        content = given.pop("content", old.content)
        if content_hash(content) != old.content_hash:
            kept = old.model_dump(include=set(edit_models.SaveRequest.model_fields) - {"content"})
            memory = _new_version(content, kept, given)
            superseded = self.supersede(
                edit_models.SupersedeRequest(
                    old_hash=old.content_hash, memory=memory, reason=request.reason
                )
            )
            return edit_models.UpdateResponse(
                content_hash=superseded.saved.content_hash, superseded=superseded, revised=None
            )
        changed = {name: value for name, value in given.items() if getattr(old, name) != value}
        if not changed:
            raise ValueError(
                "nothing to change: the new content is the old content, and every other "
                "field given has that value already"
            )
        structural = sorted(set(changed) - set(REVISABLE_COLUMNS))
        if structural:
            raise ValueError(
                f"changing {', '.join(structural)} needs new content (a memory that "
                f"supersedes this one); alone, only {', '.join(REVISABLE_COLUMNS)} can change"
            )
        revised = self._revise(old.content_hash, changed)
        return edit_models.UpdateResponse(
            content_hash=old.content_hash,
            superseded=None,
            revised=edit_models.Queued(entry_id=revised.entry_id, new=revised.new),
        )

    @in_flight
    def revive(self, request: model_fields.RefRequest) -> edit_models.Revival:
        """Ask for a cold memory back: the next cycle revives it, as after a re-ingest."""
        self._require_peer()
        now = self._rt.clock.now_ms()
        with self._writing() as writer:
            memory = memory_row(writer.db, request.ref)
            rowid = tiers.cold_rowid_of_hash(writer.db, memory.content_hash)
            if rowid is None:
                raise Conflict(f"chunk {memory.content_hash} is {memory.state}, not cold")
            with writer.db.transaction():
                tiers.request_revival(writer.db, rowid, now_ms=now)
        return edit_models.Revival(content_hash=memory.content_hash, requested_ms=now)

    def _revise(self, ref: str, changes: dict[str, str | float | None]) -> edit_models.ChunkQueued:
        self._require_peer()
        with self._writing() as writer:
            memory = memory_row(writer.db, ref)
            if memory.state == "tombstoned":
                raise Conflict(f"chunk {memory.content_hash} was retracted (tombstoned)")
            emitted = emit_revision(
                writer,
                digest=memory.content_hash,
                changes=changes,
                # Each request is a revision of its own: pin, unpin, pin again all apply.
                nonce=str(self._rt.clock.now_ms()),
            )
        return edit_models.ChunkQueued(
            content_hash=memory.content_hash, entry_id=emitted.entry_id, new=emitted.new
        )

    def _feedback(
        self, request: edit_models.FeedbackRequest, kind: PulseKind, cause: Cause
    ) -> edit_models.ChunkQueued:
        self._require_peer()
        now = self._rt.clock.now_ms()
        with self._writing() as writer, writer.db.transaction():
            memory = memory_row(writer.db, request.ref)
            if memory.state == "tombstoned":
                raise Conflict(f"chunk {memory.content_hash} was retracted (tombstoned)")
            # Shaped like an outcome's pulse: the chunk and its nearest neighbours.
            pulse = PulseRequest(
                text="",
                kind=kind,
                strength=request.strength,
                sigma=constants.OUTCOME_SIGMA,
                k=constants.OUTCOME_K,
                max_hops=constants.OUTCOME_MAX_HOPS,
                decay_per_hop=constants.OUTCOME_DECAY_PER_HOP,
                ttl_s=defaults.PULSE_TTL_S,
                reason=request.reason,
                nonce=request.nonce,
                seed_chunk=memory.content_hash,
            )
            emitted = emit_pulse(writer, pulse)
            # A repeated request (same nonce) queues nothing, and verifies nothing again.
            confidence = memory.confidence
            if emitted.new:
                changed = change_confidence(
                    writer.db, memory.content_hash, cause, reason=request.reason, now_ms=now
                )
                confidence = memory.confidence if changed is None else changed
        return edit_models.ChunkQueued(
            content_hash=memory.content_hash,
            entry_id=emitted.entry_id,
            new=emitted.new,
            confidence=confidence,
        )


def _new_version(
    content: str, kept: dict[str, Any], given: dict[str, Any]
) -> edit_models.SaveRequest:
    """The memory an update saves: the fields given, the old memory's for the rest. A field
    kept may break the API's bounds (stored by ingest or by a peer, whose are wider): the
    caller is told which one, and that giving it anew is the way out."""
    try:
        return edit_models.SaveRequest(content=content, **(kept | given))
    except pydantic.ValidationError as exc:
        inherited = sorted({str(e["loc"][0]) for e in exc.errors() if e["loc"]} - set(given))
        if not inherited:
            raise
        reasons = "; ".join(
            f"{e['loc'][0]}: {e['msg']}" for e in exc.errors() if str(e["loc"][0]) in inherited
        )
        raise ValueError(
            f"the memory's own {', '.join(inherited)} cannot be kept by an update ({reasons}): "
            "give a new value with it"
        ) from None


def _refuse_contradicting(db: Database, old_hash: str, new_hash: str) -> None:
    contradiction = queued_retractions(db).contradiction(old_hash, new_hash)
    if contradiction is not None:
        raise Conflict(contradiction)


def _resolved(rt: Runtime, what: str, given: str) -> str:
    """The one stored `what` ("chunk" or "decision") hash `given` is or starts: NotFound
    when none is held here, ValueError (listing some) when more than one starts it."""
    try:
        return resolve_hash(rt, what, given)
    except UnknownHash:
        held = "stored" if what == "chunk" else "recorded"
        named = given if len(given) == HASH_HEX_LEN else f"starting {given}"
        raise NotFound(f"{what} {named} is not {held} here") from None
