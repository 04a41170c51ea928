"""The MCP server of the memory tools (the `mcp` SDK's MCPServer), and the two ways it
reaches the operations: over the API (`AsyncMemoryClient`, what `dreamcycle mcp` serves
on stdio) or, inside the daemon, by calling `Operations` in the API's worker threads
(`InProcess`, what `/mcp` serves as streamable HTTP).

Either way a refused operation becomes a tool error (isError) carrying the daemon's
reason, the text an HTTP refusal's `detail` holds; arguments that do not validate are
refused the same way, each named with the rule it breaks (daemon/api/refusals.py). An
argument a tool does not take is refused, naming it, as the HTTP API refuses unknown
fields: a misspelt filter must not silently match everything; so is a boolean where a
number is expected. Each argument states the bounds of the request field it fills.

The server reports the package's version as its own (serverInfo).
"""

from __future__ import annotations

import functools
import importlib.metadata
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, cast

import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ConfigDict, ValidationError

from dreamcycle.daemon import defaults
from dreamcycle.daemon.api import contract, refusals
from dreamcycle.daemon.api.client_errors import ApiError, error_for
from dreamcycle.daemon.api.errors import problem
from dreamcycle.daemon.api.mcp_tool_base import Req, Resp, Transport
from dreamcycle.daemon.api.mcp_tools import MemoryTools, tool_annotations, tool_function
from dreamcycle.daemon.api.operations import Operations

log = logging.getLogger("dreamcycle.mcp")

SERVER_NAME: Final = "dreamcycle"
INSTRUCTIONS: Final = (
    "Memory that learns from outcomes. Before deciding, recall with mem_search (or "
    "mem_context for ready-to-read text); it returns a decision hash. Once you know how the "
    "decision turned out, report it with mem_outcome, citing the hashes (or 8+ digit "
    "prefixes) of the memories you actually used: those gain salience, the rest do not. "
    "Save what is worth remembering with mem_save."
)


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
            raise error_for(refused.status)(refused.detail, refused.status) from None


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
    and numbers no float bound holds against, as model_fields.Strict does; its input schema says
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
    for name in contract.tool_names():
        method = tool_function(tools, name)
        description = inspect.cleandoc(method.__doc__ or "")
        tool = _RefusingTool.from_function(
            _reporting(method), name, description=description, annotations=tool_annotations(name)
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
            streamable_http_path=defaults.MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=security,
            host=host,
        )
        self._sessions = server.session_manager
        self.asgi = StreamableHTTPASGIApp(self._sessions)

    def lifespan(self, app: object) -> AbstractAsyncContextManager[None]:
        return self._sessions.run()
