"""The HTTP floor: what the daemon's server stack costs a request before any operation runs.

Serves, on a Unix socket, a bare ASGI app on Hypercorn's trio worker (the daemon's
server, its worker and its GIL switch interval), which reads a request's whole body,
hops to a worker thread and back as API operations do (all but a recall by vector that
records nothing, which the daemon may answer on its event loop), and answers with the
bytes of a file (a real answer recorded from the daemon), until it is stopped. What it
leaves out of a request to the daemon: FastAPI's routing and validation, and the
operation itself. scripts/bench_recall.py times it through the same client, in the
same run, as the "HTTP floor" baseline.

    .venv/bin/python scripts/http_floor.py SOCKET ANSWER_FILE
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

import trio
from hypercorn.config import Config as HypercornConfig
from hypercorn.trio import serve

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dreamcycle.daemon.service.loop import set_up_the_daemon_process

Message = MutableMapping[str, Any]


def floor_app(answer: bytes) -> Callable[..., Awaitable[None]]:
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(answer))]

    async def app(
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        more = True
        while more:
            more = bool((await receive()).get("more_body"))
        body = await trio.to_thread.run_sync(lambda: answer)
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("socket", type=Path, help="Unix socket to listen on (must not exist)")
    parser.add_argument("answer", type=Path, help="file whose bytes answer every request")
    args = parser.parse_args(argv)
    set_up_the_daemon_process()
    config = HypercornConfig()
    config.bind = [f"unix:{args.socket}"]
    config.accesslog = None
    trio.run(serve, floor_app(args.answer.read_bytes()), config)
    return 0


if __name__ == "__main__":
    sys.exit(main())
