"""How a command reaches memory: through the running daemon's API, or by opening the
database in its own process.

A daemon serving its API keeps the model, the index and the database open, so a
command it serves skips what costs a command most (loading the model and the index:
seconds, and hundreds of megabytes). `memory_access` picks the way once per command:
the daemon's Unix socket when one is there, else the database directly, as every
command did before the API (still safe beside a daemon without one). Both ways
implement `MemoryAccess` and answer alike, so a command prints the same either way.

The API way imports neither the embedding model's libraries nor recall, the index or
the cycle: `DirectAccess` imports them inside its methods.

Where the API cannot answer as the direct way would, the API way hands the request to
the direct one, so both ways accept and refuse the same requests:

* a request the API's models refuse (the API bounds some values tighter): the direct
  way then accepts it, or refuses it with its own message;
* an outcome for a decision, or a tombstone for a chunk, the daemon does not hold (the
  API answers 404; the direct way refuses them in the words every command prints, finds
  a chunk only tombstoned here, or queues them when told they are known elsewhere);
* reviving by anything but a whole hash (the API would resolve a prefix in its own words),
  and ingesting without embedding (the API embeds every chunk it saves);
* no daemon answering, or one still loading its index, at any point of a command.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dreamcycle.daemon.cli.access.protocol import MemoryAccess, PulseSpec

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config

__all__ = ["MemoryAccess", "PulseSpec", "memory_access"]

log = logging.getLogger("dreamcycle.cli")


@contextmanager
def memory_access(config: Config, *, direct: bool = False) -> Iterator[MemoryAccess]:
    """The daemon's API when its socket is there (`direct` False), else the database."""
    from dreamcycle.daemon.cli.access.direct import DirectAccess

    opened = DirectAccess(config)
    socket_path = config.api_socket_path
    if direct or socket_path is None or not socket_path.exists():
        log.debug("memory opened directly", extra={"database": str(config.database_path)})
        yield opened
        return
    from dreamcycle.daemon.api.client import MemoryClient
    from dreamcycle.daemon.api.client_wire import Endpoint
    from dreamcycle.daemon.cli.access.api import ApiAccess

    with MemoryClient(endpoint=Endpoint(socket_path=socket_path)) as client:
        log.debug(
            "memory through the daemon's API, if it answers", extra={"socket": str(socket_path)}
        )
        yield ApiAccess(client, opened)
