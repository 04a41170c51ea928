"""The MCP server entry each agent client reads, for `dreamcycle mcp --print-config CLIENT`.

Each client keeps its servers in a file of its own shape: Claude Desktop, Claude Code
(a project's `.mcp.json`) and Cursor a JSON object under `mcpServers`, VS Code under
`servers` with a `type`, Codex a TOML table under `mcp_servers`. Every entry runs this
installation's `dreamcycle mcp` by its absolute path, with the data directory (and the
config file, when one was given) named, so that the client finds the same memory as the
commands do whatever directory it starts the server in.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from dreamcycle.daemon.config.settings import BY_NAME

#: The name each client lists the server under.
SERVER_NAME: Final = "dreamcycle"
#: The environment variable naming the data directory.
DATA_DIR_VARIABLE: Final = BY_NAME["peer.data_dir"].env


@dataclass(frozen=True)
class ServerCommand:
    """How a client starts the server: a program, its arguments, its environment."""

    command: str
    args: tuple[str, ...]
    env: Mapping[str, str]

    def stdio_entry(self) -> dict[str, Any]:
        return {"command": self.command, "args": list(self.args), "env": dict(self.env)}


def server_command(data_dir: Path, config_file: Path | None) -> ServerCommand:
    """`dreamcycle mcp` of this installation, by absolute paths."""
    program = installed_program()
    args = [*program[1:], "mcp"]
    if config_file is not None:
        args += ["--config", str(config_file.resolve())]
    return ServerCommand(
        program[0], tuple(args), {DATA_DIR_VARIABLE: str(data_dir.expanduser().resolve())}
    )


def installed_program() -> list[str]:
    """The `dreamcycle` console script beside this interpreter (a virtualenv's), else the
    one on PATH, else this interpreter running the CLI module."""
    beside = Path(sys.executable).with_name(SERVER_NAME)
    if beside.is_file():
        return [str(beside)]
    found = shutil.which(SERVER_NAME)
    if found is not None:
        return [str(Path(found).resolve())]
    return [sys.executable, "-m", "dreamcycle.daemon.cli.main"]


def _mcp_servers_json(server: ServerCommand) -> str:
    return _json({"mcpServers": {SERVER_NAME: server.stdio_entry()}})


def _claude_code_json(server: ServerCommand) -> str:
    return _json({"mcpServers": {SERVER_NAME: {"type": "stdio", **server.stdio_entry()}}})


def _vscode_json(server: ServerCommand) -> str:
    return _json({"servers": {SERVER_NAME: {"type": "stdio", **server.stdio_entry()}}})


def _codex_toml(server: ServerCommand) -> str:
    env = ", ".join(f"{name} = {_toml_string(value)}" for name, value in server.env.items())
    args = ", ".join(_toml_string(arg) for arg in server.args)
    return (
        f"[mcp_servers.{SERVER_NAME}]\n"
        f"command = {_toml_string(server.command)}\n"
        f"args = [{args}]\n"
        f"env = {{ {env} }}\n"
    )


def _json(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2) + "\n"


def _toml_string(value: str) -> str:
    # A JSON string is a TOML basic string for every character JSON escapes.
    return json.dumps(value)


@dataclass(frozen=True)
class Client:
    """One agent client: where its configuration lives, and the entry to put there."""

    name: str
    where: str
    render: Callable[[ServerCommand], str]


CLIENTS: Final[Sequence[Client]] = (
    Client(
        "claude-desktop",
        "claude_desktop_config.json (Settings > Developer > Edit Config), under mcpServers",
        _mcp_servers_json,
    ),
    Client(
        "claude-code",
        ".mcp.json at the project's root (or `claude mcp add-json`)",
        _claude_code_json,
    ),
    Client("cursor", "~/.cursor/mcp.json, or .cursor/mcp.json in a project", _mcp_servers_json),
    Client("vscode", ".vscode/mcp.json in the workspace", _vscode_json),
    Client("codex", "~/.codex/config.toml", _codex_toml),
)
CLIENT_NAMES: Final = tuple(client.name for client in CLIENTS)


def client_config(name: str, data_dir: Path, config_file: Path | None) -> str:
    """The entry for client `name`, followed by nothing else: ready to paste or to parse."""
    client = next(c for c in CLIENTS if c.name == name)
    return client.render(server_command(data_dir, config_file))


def where_it_goes(name: str) -> str:
    return next(c.where for c in CLIENTS if c.name == name)
