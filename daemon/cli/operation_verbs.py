"""The memory operations that have no command module of their own (`show`, `explain`,
`pin`, `unpin`, `reinforce`, `penalize`, `revive`, `update`, `timeline`, `context`,
`save`, `supersede`, and any operation added to daemon/api/contract.py): one command
each, made from the operation's entry there.

A command's arguments are its request model's fields: those the path carries (the chunk
`REF`) and those a request cannot do without (`CONTENT`, `TASK`, a `REASON`) are positional,
the rest options, a recall's filters and a replacement's fields flattened beside them. The
request is checked by the model before anything is opened, and refused in the words every
surface uses. The command goes through the running daemon's API when it answers, and
otherwise serves the operation itself on the data directory, taking the data directory's
lock for as long (so a daemon started meanwhile waits for it, and a daemon running without
its API is reported rather than written beside). Either way it prints the same answer:
`--json` the operation's JSON, otherwise one line per field.

One module for all of them: they differ only by their entry in the table, and a module
per command would repeat this one for each.
"""

from __future__ import annotations

import argparse
import json
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from dreamcycle.daemon.api import contract
from dreamcycle.daemon.cli.common import (
    access_options,
    announce_first_key,
    config_options,
    existing_data_epilog,
    load,
    load_existing,
    run_guarded,
)

if TYPE_CHECKING:
    from pydantic import BaseModel
    from pydantic.fields import FieldInfo

    from dreamcycle.daemon.config import Config

#: The commands with a module of their own: `recall`, `status` and `forgotten` print more
#: than their answer, and `pulse-emit`'s verbs are another program's.
OWN_MODULE: Final = frozenset({"recall", "status", "forgotten"})


def served() -> tuple[contract.Operation[Any, Any], ...]:
    """The operations served by these commands, each under its `command` name."""
    return tuple(
        op
        for op in contract.OPERATIONS
        if op.command not in OWN_MODULE and not op.command.startswith("pulse-emit ")
    )


#: Request fields holding another request's fields, flattened into the command's options.
NESTED: Final = frozenset({"filters", "memory"})


@dataclass(frozen=True)
class Argument:
    """One command argument: the request field it fills (`nested` under another)."""

    field: str
    dest: str
    nested: str | None = None


def register(verbs: Any) -> None:
    for op in served():
        _register(verbs, op)


def _register(verbs: Any, op: contract.Operation[Any, Any]) -> None:
    parser: argparse.ArgumentParser = verbs.add_parser(
        op.command,
        parents=[config_options(), access_options()],
        help=op.summary,
        description=op.sentence
        + (f" Refused besides: {op.rules}." if op.rules else "")
        + f" The API's {op.method} {op.path}; MCP: {', '.join(op.tool_names)}.",
        epilog=existing_data_epilog(),
    )
    arguments = _arguments(parser, op)
    parser.add_argument("--json", action="store_true", help="the answer as JSON")
    parser.set_defaults(handler=lambda args: run_guarded(lambda: _run(args, op, arguments)))


def _arguments(parser: argparse.ArgumentParser, op: contract.Operation[Any, Any]) -> list[Argument]:
    arguments: list[Argument] = []
    if op.request is None:
        return arguments
    taken: set[str] = set()
    for name, info in op.request.model_fields.items():
        nested_model = _model_of(info)
        if name in NESTED and nested_model is not None:
            for inner, inner_info in nested_model.model_fields.items():
                if inner in op.request.model_fields or inner in taken:
                    continue
                required = name == "memory" and inner_info.is_required()
                arguments.append(_add(parser, inner, inner_info, positional=required, nested=name))
                taken.add(inner)
            continue
        positional = name in op.path_fields or info.is_required()
        arguments.append(_add(parser, name, info, positional=positional))
        taken.add(name)
    return arguments


def _add(
    parser: argparse.ArgumentParser,
    name: str,
    info: FieldInfo,
    *,
    positional: bool,
    nested: str | None = None,
) -> Argument:
    dest = f"field_{name}"
    help_text = info.description or name.replace("_", " ")
    parse, choices, many = _shape(info.annotation)
    if positional:
        parser.add_argument(dest, metavar=name.upper(), type=parse, help=help_text)
    elif parse is bool:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=dest,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=help_text,
        )
    else:
        parser.add_argument(
            f"--{name.replace('_', '-')}",
            dest=dest,
            type=parse,
            choices=choices,
            action="append" if many else "store",
            metavar=name.upper() if choices is None else None,
            help=help_text + (" (repeat for each)" if many else ""),
        )
    return Argument(name, dest, nested)


def _shape(annotation: Any) -> tuple[Callable[[str], Any], list[Any] | None, bool]:
    """How a field's value is read from the command line: the parser, the choices, and
    whether the option repeats (a list)."""
    annotation = _unwrapped(annotation)
    origin = typing.get_origin(annotation)
    if origin is list:
        parse, choices, _ = _shape(typing.get_args(annotation)[0])
        return parse, choices, True
    if origin is typing.Literal:
        choices = list(typing.get_args(annotation))
        return type(choices[0]), choices, False
    if annotation in (int, float, bool):
        return annotation, None, False
    return str, None, False


def _unwrapped(annotation: Any) -> Any:
    """The type inside Optional[...] and Annotated[...]."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = options[0]
        else:
            return annotation


def _model_of(info: FieldInfo) -> type[BaseModel] | None:
    from pydantic import BaseModel

    inner = _unwrapped(info.annotation)
    return inner if isinstance(inner, type) and issubclass(inner, BaseModel) else None


def _request(
    args: argparse.Namespace, op: contract.Operation[Any, Any], arguments: list[Argument]
) -> Any:
    from dreamcycle.daemon.api.client_requests import request_model

    if op.request is None:
        return None
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for argument in arguments:
        value = getattr(args, argument.dest)
        if value is None:
            continue
        (top if argument.nested is None else nested.setdefault(argument.nested, {}))[
            argument.field
        ] = value
    for name, fields in nested.items():
        model = _model_of(op.request.model_fields[name])
        assert model is not None
        top[name] = request_model(model, **fields)
    return request_model(op.request, **top)


def _run(
    args: argparse.Namespace, op: contract.Operation[Any, Any], arguments: list[Argument]
) -> int:
    request = _request(args, op, arguments)
    # Saving is how a new peer may begin (as ingesting is); the rest need a store already.
    config = load(args) if op is contract.SAVE else load_existing(args)
    answer = answer_of(config, op, request, direct=args.direct)
    if args.json:
        print(answer.model_dump_json(indent=2))
    else:
        for line in readable(answer.model_dump(mode="json")):
            print(line)
    return 0


def answer_of(
    config: Config, op: contract.Operation[Any, Any], request: Any, *, direct: bool = False
) -> BaseModel:
    """The operation's answer: from the running daemon's API when it answers, else served
    here on the data directory (under its lock)."""
    from dreamcycle.daemon.api.client import MemoryClient
    from dreamcycle.daemon.api.client_errors import Unavailable
    from dreamcycle.daemon.api.client_wire import Endpoint

    socket_path = config.api_socket_path
    if not direct and socket_path is not None and socket_path.exists():
        with MemoryClient(endpoint=Endpoint(socket_path=socket_path)) as client:
            try:
                answer: BaseModel = client.send(op, request)
                return answer
            except Unavailable:
                pass  # no daemon behind the socket, or one still loading: served here
    with _served_here(config) as ops:
        return _called(ops, op, request)


@contextmanager
def _served_here(config: Config) -> Iterator[Any]:
    """The operations on this data directory, as the daemon serves them, while this
    process holds the data directory's lock."""
    from dreamcycle.daemon.api.operations import Operations
    from dreamcycle.daemon.runtime import Runtime

    announce_first_key(config)
    rt = Runtime.open(config)
    try:
        rt.lock_data_dir()
        peer = rt.open_peer()
        ops = Operations(rt, embedder=rt.embedder)
        try:
            ops.attach(peer)
            yield ops
        finally:
            ops.close()
            peer.save_index()
            peer.close()
    finally:
        rt.close()


def _called(ops: Any, op: contract.Operation[Any, Any], request: Any) -> BaseModel:
    """`op` called on `ops`, a refusal raised as the client raises the API's."""
    from dreamcycle.daemon.api.client_errors import error_for
    from dreamcycle.daemon.api.errors import problem

    method = getattr(ops, op.name)
    try:
        answer: BaseModel = method() if request is None else method(request)
        return answer
    except Exception as exc:
        refused = problem(exc)
        if refused.status >= 500:
            raise
        raise error_for(refused.status)(refused.detail, refused.status) from None


def readable(value: Any, prefix: str = "") -> Iterator[str]:
    """An answer as `field: value` lines, nested fields dotted, lists numbered."""
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from readable(inner, f"{prefix}{key}.")
    elif isinstance(value, list) and value and any(isinstance(v, (Mapping, list)) for v in value):
        for number, inner in enumerate(value):
            yield from readable(inner, f"{prefix}{number}.")
    else:
        shown = value if isinstance(value, str) else json.dumps(value)
        yield f"{prefix[:-1]}: {shown}"
