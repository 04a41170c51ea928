"""Every memory operation, declared once: what it takes and answers, what it does to
memory, and where each surface serves it.

An operation's entry names the `Operations` method that does it, its HTTP method and
path, its request and answer models (daemon/api/recall_models.py, edit_models.py,
report_models.py: every limit and rule a JSON Schema can state is in them), the refusals
it may answer besides a bad body, what it does to memory (`Effects`: the MCP tools'
annotations), the MCP tools that reach it and the command that runs it. The HTTP routes
(daemon/api/http_routes.py), both clients (daemon/api/client_wire.py), the MCP tools
(daemon/api/mcp_tools.py) and the commands (daemon/cli/) take their paths, models,
summaries, refusals and annotations from here; tests/test_contract.py fails when a
surface lacks an operation or states it otherwise.
Adding an operation is one entry here and one `Operations` method.
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

import pydantic
from pydantic import BaseModel

from dreamcycle.daemon.api import edit_models, model_fields, recall_models, report_models

Req = TypeVar("Req", bound=BaseModel | None)
Resp = TypeVar("Resp", bound=BaseModel)


@dataclass(frozen=True)
class Effects:
    """What an operation does to memory, as MCP clients are told before they call it."""

    #: Changes nothing (a recall records the decision it informs: that is a write).
    read_only: bool
    #: Retracts a memory for good (a tombstone; an update's new content retracts the old).
    destructive: bool = False
    #: The same call again changes nothing more.
    idempotent: bool = True


READS: Final = Effects(read_only=True)
RECORDS: Final = Effects(read_only=False, idempotent=False)
QUEUES: Final = Effects(read_only=False)
RETRACTS: Final = Effects(read_only=False, destructive=True)
REPLACES: Final = Effects(read_only=False, destructive=True, idempotent=False)

#: The name of an operation's MCP tool where it names none: this, then its name.
GENERATED_TOOL_PREFIX: Final = "mem_"

#: A refusal of the operation itself: the chunk or decision named is not known here, or
#: the request contradicts what is stored.
NOT_FOUND: Final = 404
CONFLICT: Final = 409
#: A request whose body or parameters break a rule (each field named).
INVALID: Final = 422


@dataclass(frozen=True)
class Operation(Generic[Req, Resp]):
    """One operation, as every surface serves it."""

    #: The `Operations` method that does it, and the name the clients' methods take.
    name: str
    method: Literal["GET", "POST"]
    #: "{field}" parts are taken from the request; a GET's other fields are its query.
    path: str
    request: type[BaseModel] | None
    response: type[Resp]
    #: One line for the OpenAPI document and the command's help.
    summary: str
    effects: Effects
    #: Statuses it answers besides a bad body (422), the guard's and 503 while loading.
    refusals: tuple[int, ...] = ()
    #: The MCP tools that reach it, each a `MemoryTools` method (some reach another
    #: operation first, or take engram's names); none: a tool `mem_<name>` is made whose
    #: arguments are the request's fields (daemon/api/mcp_tools.py).
    tools: tuple[str, ...] = ()
    #: The command that runs it, as typed after the program's name.
    command: str = ""
    #: What its models cannot state as JSON Schema: answered with a 422 (or the refusal
    #: named) on every surface, and said in the OpenAPI description.
    rules: str = ""

    @property
    def path_fields(self) -> frozenset[str]:
        """The request's fields the path carries ("{ref}")."""
        return frozenset(name for _, name, _, _ in string.Formatter().parse(self.path) if name)

    @property
    def takes_body(self) -> bool:
        """Whether a request carries a JSON body: a POST with fields beyond the path's."""
        if self.method != "POST" or self.request is None:
            return False
        return bool(set(self.request.model_fields) - self.path_fields)

    @functools.cached_property
    def body(self) -> type[BaseModel] | None:
        """The model of a request's JSON body: the request's own or, where the path carries
        some fields, the base of the request that has the others (`PinBody` of
        `PinRequest(PinBody, RefRequest)`), else a model made of those fields."""
        if not self.takes_body:
            return None
        assert self.request is not None
        if not self.path_fields:
            return self.request
        rest = [name for name in self.request.model_fields if name not in self.path_fields]
        for base in self.request.__mro__[1:]:
            if issubclass(base, BaseModel) and list(base.model_fields) == rest:
                return base
        fields: Any = {
            name: (self.request.model_fields[name].annotation, self.request.model_fields[name])
            for name in rest
        }
        return pydantic.create_model(
            f"{self.request.__name__}Body", __base__=model_fields.Strict, **fields
        )

    @property
    def sentence(self) -> str:
        """The summary as a sentence, for help text and descriptions."""
        return f"{self.summary[:1].upper()}{self.summary[1:]}."

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The MCP tools that reach it: those named, else the one made from its request."""
        return self.tools or (f"{GENERATED_TOOL_PREFIX}{self.name}",)


#: The rule of a recall's time filters, which JSON Schema cannot compare.
TIME_BOUNDS: Final = "filters.created_after_ms must be before filters.created_before_ms (422)"
RECALL: Final = Operation[recall_models.RecallRequest, recall_models.RecallResponse](
    "recall", "POST", "/v1/recall", recall_models.RecallRequest, recall_models.RecallResponse,
    "chunks for a query or a vector", RECORDS,
    tools=("mem_search",), command="recall", rules=TIME_BOUNDS,
)  # fmt: skip
SAVE: Final = Operation[edit_models.SaveRequest, edit_models.SaveResponse](
    "save", "POST", "/v1/memories", edit_models.SaveRequest, edit_models.SaveResponse,
    "store a chunk; recall finds it when this returns", RECORDS, (CONFLICT,),
    tools=("mem_save", "mem_session_summary"), command="save",
    rules="content tombstoned here is refused (409)",
)  # fmt: skip
OUTCOME: Final = Operation[edit_models.OutcomeRequest, edit_models.Queued](
    "outcome", "POST", "/v1/outcomes", edit_models.OutcomeRequest, edit_models.Queued,
    "how a recalled decision turned out", QUEUES, (NOT_FOUND, CONFLICT),
    tools=("mem_outcome",), command="pulse-emit outcome",
    rules="each cited chunk must be one the decision recalled, by hash or a prefix only "
    "it has among them (422)",
)  # fmt: skip
PULSE: Final = Operation[edit_models.PulseRequest, edit_models.Queued](
    "pulse", "POST", "/v1/pulses", edit_models.PulseRequest, edit_models.Queued,
    "reward or decay memory near a text", QUEUES, command="pulse-emit pulse",
    rules="decay_per_hop * k below 1, max_hops within what sigma allows, and the salience "
    "one pulse may move within its bound (422)",
)  # fmt: skip
TOMBSTONE: Final = Operation[edit_models.TombstoneRequest, edit_models.Queued](
    "tombstone", "POST", "/v1/tombstones", edit_models.TombstoneRequest, edit_models.Queued,
    "retract a chunk for good", RETRACTS, (NOT_FOUND,),
    tools=("mem_delete",), command="pulse-emit tombstone",
)  # fmt: skip
STATUS: Final = Operation[None, report_models.StatusResponse](
    "status", "GET", "/v1/status", None, report_models.StatusResponse,
    "counts, salience, last cycle, index", READS,
    tools=("mem_stats",), command="status",
)  # fmt: skip
MEMORY: Final = Operation[report_models.MemoryRequest, report_models.Memory](
    "memory", "GET", "/v1/memories/{ref}", report_models.MemoryRequest, report_models.Memory,
    "one chunk, by hash or unique prefix", READS, (NOT_FOUND, INVALID),
    tools=("mem_get_observation",), command="show",
)  # fmt: skip
FORGOTTEN: Final = Operation[report_models.ForgottenRequest, report_models.ForgottenResponse](
    "forgotten", "GET", "/v1/forgotten", report_models.ForgottenRequest,
    report_models.ForgottenResponse,
    "what the sweep moved to the cold tier", READS, (INVALID,),
    tools=("mem_forgotten",), command="forgotten",
)  # fmt: skip
SUPERSEDE: Final = Operation[edit_models.SupersedeRequest, edit_models.SupersedeResponse](
    "supersede", "POST", "/v1/supersessions", edit_models.SupersedeRequest,
    edit_models.SupersedeResponse,
    "save a chunk that replaces another (applied at the next cycle)", REPLACES,
    (NOT_FOUND, CONFLICT), command="supersede",
)  # fmt: skip
CONTEXT: Final = Operation[recall_models.ContextRequest, recall_models.ContextResponse](
    "context", "POST", "/v1/context", recall_models.ContextRequest, recall_models.ContextResponse,
    "pinned, previously successful and relevant memories for a task, in a budget", RECORDS,
    tools=("mem_context",), command="context", rules=TIME_BOUNDS,
)  # fmt: skip
EXPLAIN: Final = Operation[model_fields.RefRequest, report_models.ExplainResponse](
    "explain", "GET", "/v1/memories/{ref}/explain", model_fields.RefRequest,
    report_models.ExplainResponse,
    "a memory's salience history, decisions, outcomes and learned keys", READS,
    (NOT_FOUND, INVALID), tools=("mem_explain",), command="explain",
)  # fmt: skip
PIN: Final = Operation[edit_models.PinRequest, edit_models.ChunkQueued](
    "pin", "POST", "/v1/memories/{ref}/pin", edit_models.PinRequest, edit_models.ChunkQueued,
    "set a pin floor (applied and shared at the next cycle)", QUEUES,
    (NOT_FOUND, CONFLICT), tools=("mem_pin",), command="pin",
)  # fmt: skip
UNPIN: Final = Operation[model_fields.RefRequest, edit_models.ChunkQueued](
    "unpin", "POST", "/v1/memories/{ref}/unpin", model_fields.RefRequest, edit_models.ChunkQueued,
    "clear the pin floor", QUEUES, (NOT_FOUND, CONFLICT, INVALID),
    tools=("mem_unpin",), command="unpin",
)  # fmt: skip
REINFORCE: Final = Operation[edit_models.FeedbackRequest, edit_models.ChunkQueued](
    "reinforce", "POST", "/v1/memories/{ref}/reinforce", edit_models.FeedbackRequest,
    edit_models.ChunkQueued, "a Reward pulse at this memory, with a reason", QUEUES,
    (NOT_FOUND, CONFLICT), tools=("mem_reinforce",), command="reinforce",
)  # fmt: skip
PENALIZE: Final = Operation[edit_models.FeedbackRequest, edit_models.ChunkQueued](
    "penalize", "POST", "/v1/memories/{ref}/penalize", edit_models.FeedbackRequest,
    edit_models.ChunkQueued, "a Decay pulse at this memory, with a reason", QUEUES,
    (NOT_FOUND, CONFLICT), tools=("mem_penalize",), command="penalize",
)  # fmt: skip
REVIVE: Final = Operation[model_fields.RefRequest, edit_models.Revival](
    "revive", "POST", "/v1/memories/{ref}/revive", model_fields.RefRequest, edit_models.Revival,
    "bring a cold memory back to the live tier (at the next cycle)", QUEUES,
    (NOT_FOUND, CONFLICT, INVALID), tools=("mem_revive",), command="revive",
)  # fmt: skip
UPDATE: Final = Operation[edit_models.UpdateRequest, edit_models.UpdateResponse](
    "update", "POST", "/v1/memories/{ref}/update", edit_models.UpdateRequest,
    edit_models.UpdateResponse,
    "new content supersedes the memory; a new title, topic or importance revises it",
    REPLACES, (NOT_FOUND, CONFLICT), tools=("mem_update",), command="update",
    rules="something must change; without new content only title, topic_key and "
    "importance may (422); a tombstoned memory is refused (409)",
)  # fmt: skip
TIMELINE: Final = Operation[report_models.TimelineRequest, report_models.TimelineResponse](
    "timeline", "GET", "/v1/timeline", report_models.TimelineRequest,
    report_models.TimelineResponse,
    "memories by time, newest first", READS, (INVALID,),
    tools=("mem_timeline",), command="timeline",
    rules="created_after_ms must be before created_before_ms (422)",
)  # fmt: skip

OPERATIONS: Final[tuple[Operation[Any, Any], ...]] = (
    RECALL, SAVE, OUTCOME, PULSE, TOMBSTONE, STATUS, MEMORY, FORGOTTEN, SUPERSEDE,
    CONTEXT, EXPLAIN, PIN, UNPIN, REINFORCE, PENALIZE, REVIVE, UPDATE, TIMELINE,
)  # fmt: skip


#: The MCP tools listed first, in this order (what an agent calls on most turns); the
#: others follow in the order OPERATIONS declares their operations.
LISTED_FIRST: Final = (
    "mem_save", "mem_search", "mem_context", "mem_get_observation", "mem_stats", "mem_outcome",
)  # fmt: skip


def tool_names() -> tuple[str, ...]:
    """Every MCP tool served, in the order listed to clients."""
    declared = [tool for op in OPERATIONS for tool in op.tool_names]
    return (*LISTED_FIRST, *(tool for tool in declared if tool not in LISTED_FIRST))


def operation_of_tool(tool: str) -> Operation[Any, Any]:
    """The operation MCP tool `tool` reaches (what its annotations say it does)."""
    return next(op for op in OPERATIONS if tool in op.tool_names)


def by_name(name: str) -> Operation[Any, Any]:
    return next(op for op in OPERATIONS if op.name == name)
