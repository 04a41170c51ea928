"""The tools that read memory: search and context (which record the decision they
inform, for mem_outcome to credit), and those that report on it (one memory, stats,
explain, the timeline, the cold tier). Each method's signature is its tool's MCP schema
and its docstring the tool's description.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, model_fields, recall_models, report_models
from dreamcycle.daemon.api.client_requests import request_model
from dreamcycle.daemon.api.mcp_tool_base import (
    ChunkRef,
    Kind,
    Limit,
    Project,
    Scope,
    SessionId,
    ToolsBase,
    TopicKeyPrefix,
    given,
)
from dreamcycle.pulses.context import MIN_BUDGET


class ReadTools(ToolsBase):
    """The tools that read memory, one method each."""

    async def mem_search(
        self,
        query: Annotated[str, Field(description="what you want to know, in plain words")],
        project: Project = None,
        scope: Scope = None,
        session_id: SessionId = None,
        kind: Kind = None,
        topic_key_prefix: TopicKeyPrefix = None,
        limit: Limit = None,
        min_confidence: Annotated[
            model_fields.Number | None,
            Field(ge=0.0, le=1.0, description="only memories at least this certain (0-1)"),
        ] = None,
    ) -> recall_models.RecallResponse:
        """Search memory (full text, meaning, and what each memory learned to answer). Records
        what was returned: pass the decision_hash to mem_outcome once you know the result."""
        return await self._recall(
            query, limit, project, scope, session_id, kind, topic_key_prefix, min_confidence
        )

    async def mem_context(
        self,
        query: Annotated[str, Field(description="the task at hand, in plain words")],
        project: Project = None,
        scope: Scope = None,
        session_id: SessionId = None,
        kind: Kind = None,
        topic_key_prefix: TopicKeyPrefix = None,
        budget_tokens: Annotated[
            model_fields.Integer | None,
            Field(
                ge=MIN_BUDGET,
                le=defaults.CONTEXT_MAX_BUDGET_TOKENS,
                description=f"tokens of memory at most (default {defaults.CONTEXT_BUDGET_TOKENS})",
            ),
        ] = None,
    ) -> str:
        """Memories for a task, as text to read before starting: the pinned ones, those that
        helped similar tasks succeed, and the most relevant, within a token budget (what did
        not fit is listed by hash). The first line is a decision hash for mem_outcome: cite
        the memories you used."""
        filters = given(
            project=project,
            scope=scope,
            session_id=session_id,
            kind=kind,
            topic_key_prefix=topic_key_prefix,
        )
        request = request_model(
            recall_models.ContextRequest,
            task=query,
            filters=request_model(recall_models.RecallFilters, **filters),
            **given(budget_tokens=budget_tokens),
        )
        return (await self._transport.send(contract.CONTEXT, request)).text

    async def mem_get_observation(self, id: ChunkRef) -> report_models.Memory:
        """One memory in full, by content hash or unique prefix: its metadata, salience and
        whether it is live, cold (swept, still recallable) or tombstoned."""
        return await self._memory(id)

    async def mem_stats(self) -> report_models.StatusResponse:
        """Counts (live, cold, tombstoned, pinned), the salience histogram, the index and the
        last dream cycle."""
        return await self._transport.send(contract.STATUS, None)

    async def mem_explain(self, id: ChunkRef) -> report_models.ExplainResponse:
        """Why a memory stands where it does: salience, pin, deletion policy, tier, every
        journaled step that moved it (with its cause: outcome, pulse, sweep, revival), the
        decisions that returned it with their outcomes, and the questions it learned."""
        return await self._transport.send(
            contract.EXPLAIN, request_model(model_fields.RefRequest, ref=id)
        )

    async def mem_timeline(
        self,
        around_ms: Annotated[
            model_fields.Integer | None,
            Field(ge=0, description="a point in time (ms since the epoch)"),
        ] = None,
        session_id: SessionId = None,
        project: Project = None,
        kind: Kind = None,
        limit: Annotated[
            model_fields.Integer | None,
            Field(ge=1, le=defaults.TIMELINE_MAX_PAGE, description="rows"),
        ] = None,
        offset: Annotated[model_fields.Integer, Field(ge=0, description="rows to skip")] = 0,
    ) -> report_models.TimelineResponse:
        """Memories stored around a point in time, or in a session, newest first."""
        request = request_model(
            report_models.TimelineRequest,
            offset=offset,
            **given(
                around_ms=around_ms, session_id=session_id, project=project, kind=kind, limit=limit
            ),
        )
        return await self._transport.send(contract.TIMELINE, request)

    async def mem_forgotten(
        self,
        limit: Annotated[
            model_fields.Integer | None,
            Field(ge=1, le=report_models.MAX_FORGOTTEN_PAGE, description="rows to list"),
        ] = None,
        offset: Annotated[model_fields.Integer, Field(ge=0, description="rows to skip")] = 0,
    ) -> report_models.ForgottenResponse:
        """What the sweep moved to the cold tier (least valuable memories), most recent first,
        and why. Cold memories are still recalled when nothing live matches well."""
        request = request_model(report_models.ForgottenRequest, offset=offset, **given(limit=limit))
        return await self._transport.send(contract.FORGOTTEN, request)

    async def _recall(
        self,
        query: str,
        limit: int | None,
        project: str | None,
        scope: str | None,
        session_id: str | None,
        kind: str | None,
        topic_key_prefix: str | None,
        min_confidence: float | None,
    ) -> recall_models.RecallResponse:
        filters = given(
            project=project,
            scope=scope,
            session_id=session_id,
            kind=kind,
            topic_key_prefix=topic_key_prefix,
        )
        request = request_model(
            recall_models.RecallRequest,
            query=query,
            top_k=limit,
            filters=request_model(recall_models.RecallFilters, **filters),
            record=True,
            **given(min_confidence=min_confidence),
        )
        return await self._transport.send(contract.RECALL, request)
