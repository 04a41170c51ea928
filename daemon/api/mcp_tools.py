"""The memory operations as MCP tools (the `mcp` SDK's MCPServer).

Tool names are the ones agents' prompts already call for engram (`mem_save`,
`mem_search`, ...), mapped onto this daemon's operations, plus `mem_outcome`,
`mem_forgotten`, `mem_explain`, `mem_pin`, `mem_unpin`, `mem_reinforce`,
`mem_penalize`, `mem_timeline` and `mem_revive`. Chunks are named by content hash (or a
prefix only one chunk has) where engram used numbers.

The tools reach the operations through a `Transport`: over the API
(`AsyncMemoryClient`, what `dreamcycle mcp` serves on stdio) or, inside the
daemon, by calling `Operations` in the API's worker threads (`InProcess`, what
`/mcp` serves as streamable HTTP). Either way a refused operation becomes a
tool error (isError) carrying the daemon's reason, the text an HTTP refusal's `detail`
holds; arguments that do not validate are refused the same way, each named with the rule
it breaks (daemon/api/refusals.py). An argument a tool does not take is refused, naming
it, as the HTTP API refuses unknown fields: a misspelt filter must not silently match
everything; so is a boolean where a number is expected.

The server reports the package's version as its own (serverInfo), and each tool says what
it does to memory in its annotations (`EFFECTS`).

One module of about 600 lines: each tool's signature is its MCP schema (the SDK reads
parameters, types and descriptions from it), so every tool is written out in full.
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Annotated, Any, Final, Protocol, TypeVar, cast

import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import client, contract, models, refusals
from dreamcycle.daemon.api.client import ApiError, request_model
from dreamcycle.daemon.api.errors import problem
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.pulses.constants import STRENGTH_MAX
from dreamcycle.pulses.context import MIN_BUDGET

log = logging.getLogger("dreamcycle.mcp")
Req = TypeVar("Req", bound=BaseModel | None)
Resp = TypeVar("Resp", bound=BaseModel)

#: Where the daemon's API serves MCP over streamable HTTP.
MCP_PATH: Final = "/mcp"
SERVER_NAME: Final = "dreamcycle"
INSTRUCTIONS: Final = (
    "Memory that learns from outcomes. Before deciding, recall with mem_search (or "
    "mem_context for ready-to-read text); it returns a decision hash. Once you know how the "
    "decision turned out, report it with mem_outcome, citing the hashes (or 8+ digit "
    "prefixes) of the memories you actually used: those gain salience, the rest do not. "
    "Save what is worth remembering with mem_save."
)


class Transport(Protocol):
    async def send(self, route: contract.Operation[Req, Resp], request: Req) -> Resp: ...


class InProcess:
    """Operations called in this process, in worker threads behind the API's limiter."""

    def __init__(self, ops: Operations, limiter: trio.CapacityLimiter) -> None:
        self._ops = ops
        self._limiter = limiter

    async def send(self, route: contract.Operation[Req, Resp], request: Req) -> Resp:
        method = getattr(self._ops, route.name)
        call = method if request is None else functools.partial(method, request)
        try:
            with self._ops.requests_first.serving():
                return cast(Resp, await trio.to_thread.run_sync(call, limiter=self._limiter))
        except Exception as exc:
            # Refused as over HTTP: the status the error is answered with, as the client
            # raises it, with the same reason.
            refused = problem(exc)
            raise client.error_for(refused.status)(refused.detail, refused.status) from None


# ---- the tools -------------------------------------------------------------------------------

ChunkRef = Annotated[
    str,
    Field(
        description="a chunk's content hash, or a prefix of at least 8 hex digits only it has",
        pattern=models.HASH_OR_UNIQUE_PREFIX,
    ),
]
Project = Annotated[str | None, Field(description="the project the memory belongs to")]
Scope = Annotated[str | None, Field(description='visibility, e.g. "project" (the default)')]
SessionId = Annotated[str | None, Field(description="the working session it came from")]
TopicKey = Annotated[
    str | None, Field(description='a stable slash-separated topic, e.g. "architecture/auth"')
]
Title = Annotated[str | None, Field(description="a short, searchable title")]
MemoryType = Annotated[
    str | None, Field(description='free-form type, e.g. "decision", "bugfix" (default "manual")')
]
Kind = Annotated[
    models.Kind | None,
    Field(description="how fast it fades: fact, preference, insight, summary or note (default)"),
]
Limit = Annotated[
    models.Integer | None, Field(ge=1, le=models.MAX_TOP_K, description="how many results at most")
]
TopicKeyPrefix = Annotated[
    str | None, Field(description="only memories whose topic_key starts with this")
]


def _given(**fields: Any) -> dict[str, Any]:
    """The arguments the caller set: the rest keep the request model's defaults."""
    return {name: value for name, value in fields.items() if value is not None}


class MemoryTools:
    """One method per tool, named as the tool; its docstring is the tool's description."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

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
            models.Integer | None, Field(ge=0, le=10, description="0-10, default 5")
        ] = None,
        confidence: Annotated[
            models.Number | None,
            Field(ge=0.0, le=1.0, description="how sure (0-1); default by type: manual 0.9"),
        ] = None,
        stability: Annotated[
            models.Number | None,
            Field(ge=0.0, le=1.0, description="how unlikely to change (0-1); default by kind"),
        ] = None,
    ) -> models.SaveResponse:
        """Store a memory. Recall finds it as soon as this returns; saving the same content
        again stores nothing new (created is false). Returns its content hash."""
        fields = _given(
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
        request = request_model(models.SaveRequest, content=content, **fields)
        return await self._transport.send(contract.SAVE, request)

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
            models.Number | None,
            Field(ge=0.0, le=1.0, description="only memories at least this certain (0-1)"),
        ] = None,
    ) -> models.RecallResponse:
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
            models.Integer | None,
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
        filters = _given(
            project=project,
            scope=scope,
            session_id=session_id,
            kind=kind,
            topic_key_prefix=topic_key_prefix,
        )
        request = request_model(
            models.ContextRequest,
            task=query,
            filters=request_model(models.RecallFilters, **filters),
            **_given(budget_tokens=budget_tokens),
        )
        return (await self._transport.send(contract.CONTEXT, request)).text

    async def mem_explain(self, id: ChunkRef) -> models.ExplainResponse:
        """Why a memory stands where it does: salience, pin, deletion policy, tier, every
        journaled step that moved it (with its cause: outcome, pulse, sweep, revival), the
        decisions that returned it with their outcomes, and the questions it learned."""
        return await self._transport.send(
            contract.EXPLAIN, request_model(models.RefRequest, ref=id)
        )

    async def mem_pin(
        self,
        id: ChunkRef,
        pin_floor: Annotated[
            models.Number | None,
            Field(gt=0, le=1, description=f"salience floor (default {defaults.PIN_FLOOR})"),
        ] = None,
    ) -> models.ChunkQueued:
        """Pin a memory: its salience never decays below the floor and it is never swept.
        Applied, and shared with other peers, at the next dream cycle."""
        request = request_model(models.PinRequest, ref=id, **_given(pin_floor=pin_floor))
        return await self._transport.send(contract.PIN, request)

    async def mem_unpin(self, id: ChunkRef) -> models.ChunkQueued:
        """Clear a memory's pin floor (at the next dream cycle)."""
        return await self._transport.send(contract.UNPIN, request_model(models.RefRequest, ref=id))

    async def mem_reinforce(
        self,
        id: ChunkRef,
        reason: Annotated[str, Field(description="why it deserves more weight")],
        strength: Annotated[
            models.Number | None, Field(gt=0, le=STRENGTH_MAX, description="0-1")
        ] = None,
    ) -> models.ChunkQueued:
        """Raise a memory's salience (and a little its neighbours') with a Reward pulse; the
        reason is kept. A cold memory comes back."""
        request = request_model(
            models.FeedbackRequest, ref=id, reason=reason, **_given(strength=strength)
        )
        return await self._transport.send(contract.REINFORCE, request)

    async def mem_penalize(
        self,
        id: ChunkRef,
        reason: Annotated[str, Field(description="why it deserves less weight")],
        strength: Annotated[
            models.Number | None, Field(gt=0, le=STRENGTH_MAX, description="0-1")
        ] = None,
    ) -> models.ChunkQueued:
        """Lower a memory's salience (and a little its neighbours') with a Decay pulse; the
        reason is kept. To retract a wrong memory for good, use mem_delete."""
        request = request_model(
            models.FeedbackRequest, ref=id, reason=reason, **_given(strength=strength)
        )
        return await self._transport.send(contract.PENALIZE, request)

    async def mem_revive(self, id: ChunkRef) -> models.Revival:
        """Bring a cold memory (one mem_forgotten lists) back to the live tier and index, at
        the next dream cycle. A memory that is not cold is refused."""
        return await self._transport.send(contract.REVIVE, request_model(models.RefRequest, ref=id))

    async def mem_timeline(
        self,
        around_ms: Annotated[
            models.Integer | None, Field(ge=0, description="a point in time (ms since the epoch)")
        ] = None,
        session_id: SessionId = None,
        project: Project = None,
        kind: Kind = None,
        limit: Annotated[
            models.Integer | None, Field(ge=1, le=defaults.TIMELINE_MAX_PAGE, description="rows")
        ] = None,
        offset: Annotated[models.Integer, Field(ge=0, description="rows to skip")] = 0,
    ) -> models.TimelineResponse:
        """Memories stored around a point in time, or in a session, newest first."""
        request = request_model(
            models.TimelineRequest,
            offset=offset,
            **_given(
                around_ms=around_ms, session_id=session_id, project=project, kind=kind, limit=limit
            ),
        )
        return await self._transport.send(contract.TIMELINE, request)

    async def mem_get_observation(self, id: ChunkRef) -> models.Memory:
        """One memory in full, by content hash or unique prefix: its metadata, salience and
        whether it is live, cold (swept, still recallable) or tombstoned."""
        return await self._memory(id)

    async def mem_stats(self) -> models.StatusResponse:
        """Counts (live, cold, tombstoned, pinned), the salience histogram, the index and the
        last dream cycle."""
        return await self._transport.send(contract.STATUS, None)

    async def mem_outcome(
        self,
        decision_hash: Annotated[str, Field(description="from mem_search or mem_context")],
        reward: Annotated[
            models.Number,
            Field(ge=-1.0, le=1.0, description="1 it worked, 0 neutral, -1 it misled"),
        ],
        reason: Annotated[str, Field(description="what happened, briefly")],
        cited: Annotated[
            list[str] | None,
            Field(description="hashes (or 8+ digit prefixes) of the memories you used"),
        ] = None,
    ) -> models.Queued:
        """Report how a recalled decision turned out. The cited memories are credited: a
        reward raises their salience and what is near them, a negative one lowers it."""
        request = request_model(
            models.OutcomeRequest,
            decision_hash=decision_hash,
            reward=reward,
            reason=reason,
            cited=cited or [],
        )
        return await self._transport.send(contract.OUTCOME, request)

    async def mem_forgotten(
        self,
        limit: Annotated[
            models.Integer | None,
            Field(ge=1, le=models.MAX_FORGOTTEN_PAGE, description="rows to list"),
        ] = None,
        offset: Annotated[models.Integer, Field(ge=0, description="rows to skip")] = 0,
    ) -> models.ForgottenResponse:
        """What the sweep moved to the cold tier (least valuable memories), most recent first,
        and why. Cold memories are still recalled when nothing live matches well."""
        request = request_model(models.ForgottenRequest, offset=offset, **_given(limit=limit))
        return await self._transport.send(contract.FORGOTTEN, request)

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
        importance: Annotated[models.Integer | None, Field(ge=0, le=10, description="0-10")] = None,
        reason: Annotated[str | None, Field(description="why it changed")] = None,
    ) -> models.UpdateResponse:
        """Correct a memory. New content is saved now and, at the next dream cycle, inherits
        the old memory's salience while the old one is retracted (unset fields keep the old
        values). A new title, topic_key or importance alone revises the same memory."""
        request = request_model(
            models.UpdateRequest,
            ref=id,
            **_given(
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
    ) -> models.Queued:
        """Retract a memory for good (a tombstone, shared with every peer): it is never
        recalled again and saving the same content later is refused."""
        old = await self._memory(id)
        request = request_model(
            models.TombstoneRequest, content_hash=old.content_hash, reason=reason or "deleted"
        )
        return await self._transport.send(contract.TOMBSTONE, request)

    async def mem_session_summary(
        self,
        content: Annotated[str, Field(description="what was done, decided and learned")],
        session_id: SessionId = None,
        project: Project = None,
        title: Title = None,
    ) -> models.SaveResponse:
        """Save the summary of a working session (kind summary, topic session/<id>)."""
        request = request_model(
            models.SaveRequest,
            content=content,
            kind="summary",
            type="session_summary",
            title=title or (f"Session summary {session_id}" if session_id else "Session summary"),
            **_given(
                project=project,
                session_id=session_id,
                topic_key=f"session/{session_id}" if session_id else None,
            ),
        )
        return await self._transport.send(contract.SAVE, request)

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
    ) -> models.RecallResponse:
        filters = _given(
            project=project,
            scope=scope,
            session_id=session_id,
            kind=kind,
            topic_key_prefix=topic_key_prefix,
        )
        request = request_model(
            models.RecallRequest,
            query=query,
            top_k=limit,
            filters=request_model(models.RecallFilters, **filters),
            record=True,
            **_given(min_confidence=min_confidence),
        )
        return await self._transport.send(contract.RECALL, request)

    async def _memory(self, ref: str) -> models.Memory:
        return await self._transport.send(
            contract.MEMORY, request_model(models.MemoryRequest, ref=ref)
        )


#: Every tool served, in the order listed to clients: each is the MemoryTools method of
#: that name.
TOOLS: Final = (
    "mem_save",
    "mem_search",
    "mem_context",
    "mem_get_observation",
    "mem_stats",
    "mem_outcome",
    "mem_forgotten",
    "mem_update",
    "mem_delete",
    "mem_session_summary",
    "mem_explain",
    "mem_pin",
    "mem_unpin",
    "mem_reinforce",
    "mem_penalize",
    "mem_timeline",
    "mem_revive",
)


def _annotations(tool: str) -> ToolAnnotations:
    """What tool `tool` does to memory, as the operation it reaches declares it
    (daemon/api/contract.py), for clients deciding whether to ask before a call."""
    effects = contract.operation_of_tool(tool).effects
    return ToolAnnotations(
        read_only_hint=effects.read_only,
        destructive_hint=effects.destructive,
        idempotent_hint=effects.idempotent,
    )


#: Each tool's annotations (mem_search and mem_context record the decision they inform,
#: for mem_outcome to credit: a write; mem_delete and mem_update retract a memory).
EFFECTS: Final[Mapping[str, ToolAnnotations]] = {tool: _annotations(tool) for tool in TOOLS}


def _reporting(tool: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """The daemon's refusals become tool errors carrying its reason."""

    @functools.wraps(tool)
    async def reported(*args: Any, **kwargs: Any) -> Any:
        try:
            return await tool(*args, **kwargs)
        except ApiError as exc:
            raise ToolError(exc.reason) from None

    return reported


class _RefusingTool(Tool):
    """A tool whose refusals carry the reason alone, as an HTTP refusal's `detail` does:
    the SDK's would prefix its own words, and say a validation failure as pydantic does,
    pointing elsewhere to read more."""

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        try:
            return await super().run(arguments, context, convert_result=convert_result)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                # `from cause`: the SDK logs which arguments were refused from it.
                raise ToolError(refusals.text_of(cause)) from cause
            if isinstance(cause, ToolError):  # raised by the tool: the daemon's reason
                raise ToolError(str(cause)) from cause
            raise


def _strict(tool: Tool) -> Tool:
    """`tool`, refusing arguments it does not take (the SDK's argument model ignores them)
    and numbers no float bound holds against, as models.Strict does; its input schema says
    so (additionalProperties false)."""
    taken = tool.fn_metadata.arg_model
    strict = cast(
        type[ArgModelBase],
        type(
            taken.__name__,
            (taken,),
            {
                "model_config": ConfigDict(extra="forbid", allow_inf_nan=False),
                "__module__": taken.__module__,
            },
        ),
    )
    tool.fn_metadata.arg_model = strict
    tool.parameters = _with_stated_rules(
        strict.model_json_schema(by_alias=True), contract.operation_of_tool(tool.name)
    )
    return tool


#: The JSON Schema keywords that bound a value: a tool's argument states those of the
#: request field it fills, so an agent reads the same limits OpenAPI gives.
BOUNDS: Final = (
    "maxLength", "minLength", "pattern", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "maxItems", "minItems",
)  # fmt: skip
#: Tool arguments named otherwise than the request field they fill (engram's names).
RENAMED: Final[Mapping[str, str]] = {"id": "ref", "limit": "top_k", "query": "task"}


def request_field_schema(op: contract.Operation[Any, Any], argument: str) -> dict[str, Any]:
    """The JSON Schema of the request field argument `argument` of a tool reaching `op`
    fills (by its name, its engram name, or among a recall's filters); {} if none."""
    if op.request is None:
        return {}
    document = op.request.model_json_schema()
    fields = document["properties"]
    name = argument if argument in fields else RENAMED.get(argument, argument)
    if name in fields:
        return _resolved(fields[name], document)
    filters = _resolved(fields["filters"], document) if "filters" in fields else {}
    return _resolved(filters.get("properties", {}).get(argument, {}), document)


def _resolved(schema: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """`schema` with a `$ref` followed and an optional's non-null alternative merged in."""
    if "$ref" in schema:
        schema = document["$defs"][schema["$ref"].rsplit("/", 1)[-1]]
    for alternative in schema.get("anyOf", ()):
        if alternative.get("type") != "null":
            return {**schema, **_resolved(alternative, document)}
    return schema


def _with_stated_rules(schema: dict[str, Any], op: contract.Operation[Any, Any]) -> dict[str, Any]:
    for name, argument in schema.get("properties", {}).items():
        stated = request_field_schema(op, name)
        argument.update({key: stated[key] for key in BOUNDS if key in stated})
    return schema


def build_server(transport: Transport) -> MCPServer[Any]:
    tools = MemoryTools(transport)
    served: list[Tool] = []
    for name in TOOLS:
        method = getattr(tools, name)
        description = inspect.cleandoc(method.__doc__)
        tool = _RefusingTool.from_function(
            _reporting(method), name, description=description, annotations=EFFECTS[name]
        )
        served.append(_strict(tool))
    return MCPServer(
        SERVER_NAME,
        version=importlib.metadata.version(SERVER_NAME),
        instructions=INSTRUCTIONS,
        tools=served,
    )


class StreamableHttp:
    """The tools as an ASGI endpoint (stateless streamable HTTP, JSON answers), and the
    lifespan that runs its request handling."""

    def __init__(self, transport: Transport, *, host: str) -> None:
        server = build_server(transport)
        # Browsers may reach a loopback port: only these Host headers are answered (the Unix
        # socket's requests name localhost), as the API's guard answers them.
        names = ("localhost", "127.0.0.1", "[::1]", f"[{host}]" if ":" in host else host)
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=sorted({*names, *(f"{name}:*" for name in names)}),
            allowed_origins=["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"],
        )
        server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            host=host,
        )
        self._sessions = server.session_manager
        self.asgi = StreamableHTTPASGIApp(self._sessions)

    def lifespan(self, app: object) -> AbstractAsyncContextManager[None]:
        return self._sessions.run()
