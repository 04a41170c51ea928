"""Quiet logs: at the default level (info) nothing is logged per request, and a fresh data
directory's first `ingest` says nothing about SQLite preparing a statement again.

The libraries that log each request (the MCP SDK, httpx) are heard from at debug level;
the server's access log is `api.access_log`; SQLite's log keeps its warnings and errors,
while SQLITE_SCHEMA (a statement prepared before the migrations changed the schema, which
SQLite prepares again by itself) is logged at debug level only.
"""

from __future__ import annotations

import copy
import functools
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import apsw
import httpx
import pytest
import trio

from dreamcycle.daemon.api import http
from dreamcycle.daemon.api.operations import Operations
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.daemon.service.logs import PER_REQUEST_LOGGERS, configure_logging
from tests.api_helpers import opened_runtime
from tests.daemon_helpers import Peer, write_jsonl

NOW_MS: Final = 1_700_000_000_000
#: The loggers the MCP SDK logs each streamable-HTTP call and tool refusal on, and httpx
#: each request `dreamcycle mcp` sends.
PER_REQUEST: Final = (
    "mcp.server.streamable_http",
    "mcp.server.mcpserver.server",
    "mcp.server.lowlevel.server",
    "httpx",
)


@pytest.fixture
def restored_logging() -> Iterator[None]:
    """configure_logging changes the process's logging: put it back afterwards."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in PER_REQUEST_LOGGERS}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, was in levels.items():
            logging.getLogger(name).setLevel(was)


def test_the_libraries_per_request_lines_are_shown_at_debug_only(restored_logging: None) -> None:
    configure_logging("info", "json")
    assert logging.getLogger("dreamcycle.api").isEnabledFor(logging.INFO)
    for name in PER_REQUEST:
        assert not logging.getLogger(name).isEnabledFor(logging.INFO), name
        assert logging.getLogger(name).isEnabledFor(logging.WARNING), name
    configure_logging("debug", "text")
    for name in PER_REQUEST:
        assert logging.getLogger(name).isEnabledFor(logging.DEBUG), name


def test_sqlite_schema_retries_are_logged_at_debug_and_the_rest_as_before(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # SQLite's log is forwarded once store.database is imported (Runtime imports it).
    assert "dreamcycle.store.database" in sys.modules
    with caplog.at_level(logging.DEBUG, logger="dreamcycle.sqlite"):
        apsw.log(apsw.SQLITE_SCHEMA, "statement aborts at 20: database schema has changed")
        apsw.log(apsw.SQLITE_WARNING, "a warning")
        apsw.log(apsw.SQLITE_NOTICE_RECOVER_WAL, "recovered frames from WAL file")
        apsw.log(apsw.SQLITE_IOERR, "disk I/O error")
    levels = [(r.name, r.levelno, r.sqlite_code) for r in caplog.records]  # type: ignore[attr-defined]
    assert levels == [
        ("dreamcycle.sqlite", logging.DEBUG, apsw.SQLITE_SCHEMA),
        ("dreamcycle.sqlite", logging.WARNING, apsw.SQLITE_WARNING),
        ("dreamcycle.sqlite", logging.WARNING, apsw.SQLITE_NOTICE_RECOVER_WAL),
        ("dreamcycle.sqlite", logging.ERROR, apsw.SQLITE_IOERR),
    ]
    assert "database schema has changed" in caplog.records[0].getMessage()


def test_the_first_ingest_of_a_fresh_data_directory_logs_no_sqlite_schema(
    tmp_path: Path,
) -> None:
    notes = write_jsonl(
        tmp_path / "notes.jsonl",
        [{"content": "Deploys go out on Tuesdays after the integration suite passes."}],
    )
    fresh = Peer(tmp_path / "data", "fresh", tmp_path / "zeitgeist")
    quiet = fresh.dreamcycle("ingest", str(notes))
    assert "SQLITE" not in quiet.stderr, quiet.stderr
    # The retries happen (the migrations change the schema under prepared statements): at
    # debug level they are still there to see.
    again = Peer(tmp_path / "again", "again", tmp_path / "zeitgeist")
    told = again.dreamcycle("ingest", str(notes), "--log-level", "debug")
    assert "SQLITE_SCHEMA" in told.stderr, told.stderr


@pytest.fixture(scope="module")
def rt(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runtime]:
    with opened_runtime(tmp_path_factory.mktemp("quiet"), "quiet", NOW_MS) as opened:
        yield opened


def _served_requests(rt: Runtime, access_log: bool, requests: int) -> None:
    """The API served on its Unix socket, with `api.access_log` as given, while a client
    makes `requests` requests."""
    config = copy.deepcopy(rt.config)
    config.api.access_log = access_log
    ops = Operations(rt, embedder=rt.embedder)
    shutdown = trio.Event()

    def call() -> None:
        transport = httpx.HTTPTransport(uds=str(config.api_socket_path))
        with httpx.Client(transport=transport, base_url="http://localhost") as client:
            for _ in range(requests):
                assert client.get("/healthz").status_code == 200

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(functools.partial(http.serve, ops, config, shutdown=shutdown))
            try:
                await trio.to_thread.run_sync(call)
            finally:
                shutdown.set()

    try:
        trio.run(main)
    finally:
        ops.close()


def test_the_access_log_is_written_only_when_asked_for(
    rt: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    assert load_config(None, environ={}).api.access_log is False
    with caplog.at_level(logging.DEBUG):
        _served_requests(rt, access_log=False, requests=3)
    served = [r for r in caplog.records if r.name.startswith(("dreamcycle", "hypercorn"))]
    assert not [r for r in served if r.name == http.ACCESS_LOGGER or "/healthz" in r.getMessage()]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        _served_requests(rt, access_log=True, requests=3)
    lines = [r.getMessage() for r in caplog.records if r.name == http.ACCESS_LOGGER]
    # Hypercorn may also log the kept-alive connection it closes at shutdown, with no status.
    answered = [line for line in lines if '" 200 ' in line]
    assert len(answered) == 3 and all("GET /healthz" in line for line in lines), lines
