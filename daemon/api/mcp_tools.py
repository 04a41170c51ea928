"""The memory operations as MCP tools: which tools are served, in what order, and what
each does to memory.

Tool names are the ones agents' prompts already call for engram (`mem_save`,
`mem_search`, ...), mapped onto this daemon's operations, plus `mem_outcome`,
`mem_forgotten`, `mem_explain`, `mem_pin`, `mem_unpin`, `mem_reinforce`,
`mem_penalize`, `mem_timeline`, `mem_revive`, `mem_pulse` and `mem_supersede`, listed
in the order `contract.tool_names()` gives. The tools that read are mcp_read_tools.py's,
those that change memory mcp_edit_tools.py's; an operation that names no tool is served
by one made from its request model (`tool_function`). Each tool says what it does to
memory in its annotations, as daemon/api/contract.py declares it.
The server that serves them is mcp_server.py's.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, cast

from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field
from pydantic.fields import FieldInfo

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.api.client_requests import request_model
from dreamcycle.daemon.api.mcp_edit_tools import EditTools
from dreamcycle.daemon.api.mcp_read_tools import ReadTools


class MemoryTools(ReadTools, EditTools):
    """One method per tool, named as the tool; its docstring is the tool's description."""


def tool_annotations(tool: str) -> ToolAnnotations:
    """What tool `tool` does to memory, as the operation it reaches declares it
    (daemon/api/contract.py), for clients deciding whether to ask before a call:
    mem_search and mem_context record the decision they inform, for mem_outcome to credit
    (a write); mem_delete and mem_update retract a memory."""
    effects = contract.operation_of_tool(tool).effects
    return ToolAnnotations(
        read_only_hint=effects.read_only,
        destructive_hint=effects.destructive,
        idempotent_hint=effects.idempotent,
    )


def tool_function(tools: MemoryTools, tool: str) -> Callable[..., Awaitable[BaseModel]]:
    """What tool `tool` calls: its `MemoryTools` method, or for an operation that names no
    tool, one made from the operation's request model (each field an argument, with its
    description, bounds and default), described by the operation's summary and rules."""
    op = contract.operation_of_tool(tool)
    if op.tools:
        return cast(Callable[..., Awaitable[BaseModel]], getattr(tools, tool))
    fields = {} if op.request is None else op.request.model_fields
    parameters = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[(info.annotation, *info.metadata, _described(info))],
            default=inspect.Parameter.empty
            if info.is_required()
            else info.get_default(call_default_factory=True),
        )
        for name, info in fields.items()
    ]

    async def call(**arguments: Any) -> BaseModel:
        request = None if op.request is None else request_model(op.request, **arguments)
        return cast(BaseModel, await tools.transport.send(op, request))

    call.__name__ = tool
    call.__doc__ = op.sentence + (f" Refused: {op.rules}." if op.rules else "")
    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        parameters, return_annotation=op.response
    )
    return call


def _described(info: FieldInfo) -> FieldInfo:
    described: FieldInfo = Field(description=info.description)
    return described
