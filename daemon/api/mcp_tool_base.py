"""What every memory tool is built on: the transport the tools reach the operations
through, the arguments tools of both kinds take (each with the description an agent
reads), and the lookup of one memory, which reading it and deleting it both start with.

Chunks are named by content hash (or a prefix only one chunk has) where engram used
numbers.
"""

from __future__ import annotations

from typing import Annotated, Any, Protocol, TypeVar

from pydantic import BaseModel, Field

from dreamcycle.daemon.api import contract, model_fields, report_models
from dreamcycle.daemon.api.client_requests import request_model

Req = TypeVar("Req", bound=BaseModel | None)
Resp = TypeVar("Resp", bound=BaseModel)


class Transport(Protocol):
    async def send(self, route: contract.Operation[Req, Resp], request: Req) -> Resp: ...


ChunkRef = Annotated[
    str,
    Field(
        description="a chunk's content hash, or a prefix of at least 8 hex digits only it has",
        pattern=model_fields.HASH_OR_UNIQUE_PREFIX,
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
    model_fields.Kind | None,
    Field(description="how fast it fades: fact, preference, insight, summary or note (default)"),
]
Limit = Annotated[
    model_fields.Integer | None,
    Field(ge=1, le=model_fields.MAX_TOP_K, description="how many results at most"),
]
TopicKeyPrefix = Annotated[
    str | None, Field(description="only memories whose topic_key starts with this")
]


def given(**fields: Any) -> dict[str, Any]:
    """The arguments the caller set: the rest keep the request model's defaults."""
    return {name: value for name, value in fields.items() if value is not None}


class ToolsBase:
    """The transport every tool sends its request through."""

    def __init__(self, transport: Transport) -> None:
        self._transport = transport

    @property
    def transport(self) -> Transport:
        return self._transport

    async def _memory(self, ref: str) -> report_models.Memory:
        return await self._transport.send(
            contract.MEMORY, request_model(report_models.MemoryRequest, ref=ref)
        )
