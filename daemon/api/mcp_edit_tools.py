"""The tools that change memory: save (and a session's summary), outcomes, pins,
reinforcement and penalty, revival, update and delete. Each method's signature is its
tool's MCP schema and its docstring the tool's description.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, edit_models, model_fields
from dreamcycle.daemon.api.client_requests import request_model
from dreamcycle.daemon.api.mcp_tool_base import (
    ChunkRef,
    Kind,
    MemoryType,
    Project,
    Scope,
    SessionId,
    Title,
    ToolsBase,
    TopicKey,
    given,
)
from dreamcycle.pulses.constants import STRENGTH_MAX


class EditTools(ToolsBase):
    """The tools that change memory, one method each."""

    async def mem_save(
        self,
        content: Annotated[str, Field(description="what to remember, self-contained")],
        title: Title = None,
        type: MemoryType = None,
        kind: Kind = None,
        project: Project = None,
        scope: Scope = None,
        topic_key: TopicKey = None,
        session_id: SessionId = None,
        importance: Annotated[
            model_fields.Integer | None, Field(ge=0, le=10, description="0-10, default 5")
        ] = None,
        confidence: Annotated[
            model_fields.Number | None,
            Field(ge=0.0, le=1.0, description="how sure (0-1); default by type: manual 0.9"),
        ] = None,
        stability: Annotated[
            model_fields.Number | None,
            Field(ge=0.0, le=1.0, description="how unlikely to change (0-1); default by kind"),
        ] = None,
    ) -> edit_models.SaveResponse:
        """Store a memory. Recall finds it as soon as this returns; saving the same content
        again stores nothing new (created is false). Returns its content hash."""
        fields = given(
            title=title,
            type=type,
            kind=kind,
            project=project,
            scope=scope,
            topic_key=topic_key,
            session_id=session_id,
            importance=importance,
            confidence=confidence,
            stability=stability,
        )
        request = request_model(edit_models.SaveRequest, content=content, **fields)
        return await self._transport.send(contract.SAVE, request)

    async def mem_outcome(
        self,
        decision_hash: Annotated[str, Field(description="from mem_search or mem_context")],
        reward: Annotated[
            model_fields.Number,
            Field(ge=-1.0, le=1.0, description="1 it worked, 0 neutral, -1 it misled"),
        ],
        reason: Annotated[str, Field(description="what happened, briefly")],
        cited: Annotated[
            list[str] | None,
            Field(description="hashes (or 8+ digit prefixes) of the memories you used"),
        ] = None,
    ) -> edit_models.Queued:
        """Report how a recalled decision turned out. The cited memories are credited: a
        reward raises their salience and what is near them, a negative one lowers it."""
        request = request_model(
            edit_models.OutcomeRequest,
            decision_hash=decision_hash,
            reward=reward,
            reason=reason,
            cited=cited or [],
        )
        return await self._transport.send(contract.OUTCOME, request)

    async def mem_update(
        self,
        id: ChunkRef,
        content: Annotated[str | None, Field(description="the corrected text")] = None,
        title: Title = None,
        type: MemoryType = None,
        kind: Kind = None,
        project: Project = None,
        scope: Scope = None,
        topic_key: TopicKey = None,
        importance: Annotated[
            model_fields.Integer | None, Field(ge=0, le=10, description="0-10")
        ] = None,
        reason: Annotated[str | None, Field(description="why it changed")] = None,
    ) -> edit_models.UpdateResponse:
        """Correct a memory. New content is saved now and, at the next dream cycle, inherits
        the old memory's salience while the old one is retracted (unset fields keep the old
        values). A new title, topic_key or importance alone revises the same memory."""
        request = request_model(
            edit_models.UpdateRequest,
            ref=id,
            **given(
                content=content,
                title=title,
                type=type,
                kind=kind,
                project=project,
                scope=scope,
                topic_key=topic_key,
                importance=importance,
                reason=reason,
            ),
        )
        return await self._transport.send(contract.UPDATE, request)

    async def mem_delete(
        self,
        id: ChunkRef,
        reason: Annotated[str | None, Field(description="why it is wrong or unwanted")] = None,
    ) -> edit_models.Queued:
        """Retract a memory for good (a tombstone, shared with every peer): it is never
        recalled again and saving the same content later is refused."""
        old = await self._memory(id)
        request = request_model(
            edit_models.TombstoneRequest, content_hash=old.content_hash, reason=reason or "deleted"
        )
        return await self._transport.send(contract.TOMBSTONE, request)

    async def mem_session_summary(
        self,
        content: Annotated[str, Field(description="what was done, decided and learned")],
        session_id: SessionId = None,
        project: Project = None,
        title: Title = None,
    ) -> edit_models.SaveResponse:
        """Save the summary of a working session (kind summary, topic session/<id>)."""
        request = request_model(
            edit_models.SaveRequest,
            content=content,
            kind="summary",
            type="session_summary",
            title=title or (f"Session summary {session_id}" if session_id else "Session summary"),
            **given(
                project=project,
                session_id=session_id,
                topic_key=f"session/{session_id}" if session_id else None,
            ),
        )
        return await self._transport.send(contract.SAVE, request)

    async def mem_pin(
        self,
        id: ChunkRef,
        pin_floor: Annotated[
            model_fields.Number | None,
            Field(gt=0, le=1, description=f"salience floor (default {defaults.PIN_FLOOR})"),
        ] = None,
    ) -> edit_models.ChunkQueued:
        """Pin a memory: its salience never decays below the floor and it is never swept.
        Applied, and shared with other peers, at the next dream cycle."""
        request = request_model(edit_models.PinRequest, ref=id, **given(pin_floor=pin_floor))
        return await self._transport.send(contract.PIN, request)

    async def mem_unpin(self, id: ChunkRef) -> edit_models.ChunkQueued:
        """Clear a memory's pin floor (at the next dream cycle)."""
        return await self._transport.send(
            contract.UNPIN, request_model(model_fields.RefRequest, ref=id)
        )

    async def mem_reinforce(
        self,
        id: ChunkRef,
        reason: Annotated[str, Field(description="why it deserves more weight")],
        strength: Annotated[
            model_fields.Number | None, Field(gt=0, le=STRENGTH_MAX, description="0-1")
        ] = None,
    ) -> edit_models.ChunkQueued:
        """Raise a memory's salience (and a little its neighbours') with a Reward pulse; the
        reason is kept. A cold memory comes back."""
        request = request_model(
            edit_models.FeedbackRequest, ref=id, reason=reason, **given(strength=strength)
        )
        return await self._transport.send(contract.REINFORCE, request)

    async def mem_penalize(
        self,
        id: ChunkRef,
        reason: Annotated[str, Field(description="why it deserves less weight")],
        strength: Annotated[
            model_fields.Number | None, Field(gt=0, le=STRENGTH_MAX, description="0-1")
        ] = None,
    ) -> edit_models.ChunkQueued:
        """Lower a memory's salience (and a little its neighbours') with a Decay pulse; the
        reason is kept. To retract a wrong memory for good, use mem_delete."""
        request = request_model(
            edit_models.FeedbackRequest, ref=id, reason=reason, **given(strength=strength)
        )
        return await self._transport.send(contract.PENALIZE, request)

    async def mem_revive(self, id: ChunkRef) -> edit_models.Revival:
        """Bring a cold memory (one mem_forgotten lists) back to the live tier and index, at
        the next dream cycle. A memory that is not cold is refused."""
        return await self._transport.send(
            contract.REVIVE, request_model(model_fields.RefRequest, ref=id)
        )
