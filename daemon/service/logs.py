"""Structured logs: one JSON object per line on stderr (journald keeps them), or plain text.

Nothing is logged per request at the default level (info): the libraries that log each
request they serve or send (the MCP SDK ends each streamable-HTTP call with a line, httpx
logs each request `dreamcycle mcp` sends the daemon) are heard from at debug level, or
when they warn. The server's access log is `api.access_log` (daemon/api/http.py).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any, Final

#: Attributes every LogRecord has; anything else came from `extra=` and is logged as a field.
_STANDARD: Final = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}
#: Loggers of libraries that log at info level per request served or sent.
PER_REQUEST_LOGGERS: Final = ("mcp", "httpx", "httpcore")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        payload: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        payload.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in vars(record).items() if k not in _STANDARD)
        line = f"{record.levelname.lower():7} {record.name}: {record.getMessage()}"
        line = f"{line} {extras}" if extras else line
        return f"{line}\n{self.formatException(record.exc_info)}" if record.exc_info else line


def configure_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # At debug level they say everything, as every logger does; otherwise only warnings.
    chatty = logging.NOTSET if root.level <= logging.DEBUG else logging.WARNING
    for name in PER_REQUEST_LOGGERS:
        logging.getLogger(name).setLevel(chatty)
