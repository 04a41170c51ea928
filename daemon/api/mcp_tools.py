"""The memory operations as MCP tools: which tools are served, in what order, and what
each does to memory.

Tool names are the ones agents' prompts already call for engram (`mem_save`,
`mem_search`, ...), mapped onto this daemon's operations, plus `mem_outcome`,
`mem_forgotten`, `mem_explain`, `mem_pin`, `mem_unpin`, `mem_reinforce`,
`mem_penalize`, `mem_timeline` and `mem_revive`. The tools that read are
mcp_read_tools.py's, those that change memory mcp_edit_tools.py's; each tool says what it
does to memory in its annotations (`EFFECTS`), as daemon/api/contract.py declares it.
The server that serves them is mcp_server.py's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from mcp_types import ToolAnnotations

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.api.mcp_edit_tools import EditTools
from dreamcycle.daemon.api.mcp_read_tools import ReadTools


class MemoryTools(ReadTools, EditTools):
    """One method per tool, named as the tool; its docstring is the tool's description."""


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
