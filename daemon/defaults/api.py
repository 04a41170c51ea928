"""The local HTTP API and its clients: where it listens and how many requests it answers at
once, how long a client waits (and how long `dreamcycle mcp` waits for a daemon it
started), and the sizes and pages of what its operations answer.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.daemon.defaults.units import DAY_S

#: The local HTTP API, served by `dreamcycle run` unless turned off: a Unix socket in the
#: data directory, whose file mode (0600) is its access control, and loopback TCP when a
#: port is set.
API_ENABLED: Final = True
#: Where the API serves MCP over streamable HTTP.
MCP_PATH: Final = "/mcp"
API_HOST: Final = "127.0.0.1"
#: 0: no TCP listener, the Unix socket only. TCP is asked for with a port (e.g. 9465),
#: best with a token: any local user can reach a loopback port.
API_PORT: Final = 0
API_UNIX_SOCKET: Final = "api.sock"
#: Requests answered side by side at most (each in its own worker thread, never
#: waiting for a dream cycle's phase).
API_WORKERS: Final = 8
#: The server's access log (a line per request, on the dreamcycle.api.access logger).
API_ACCESS_LOG: Final = False
#: Mode of the Unix socket file: only the daemon's user may connect.
API_SOCKET_MODE: Final = 0o600
#: How long the server keeps an idle connection open. A client that sends on a kept
#: connection just as the server closes it has its request reset unanswered; Hypercorn's
#: own default (5 s) is a gap an agent leaves between two calls all the time.
API_KEEP_ALIVE_S: Final = 300.0
#: Largest request body accepted, in bytes (a memory is text, not a file upload): room for
#: the longest content a memory may hold (daemon/memory/limits.py) written as JSON, whose escapes
#: take up to twelve bytes a character (a surrogate pair).
API_MAX_BODY_BYTES: Final = 16 << 20
#: How long a thread holding the GIL runs before one waiting for it may take it. A request
#: waits up to this long at each hand-over while a cycle computes in pure Python beside it
#: (Python's default is 5 ms). Chosen with scripts/bench_recall.py (`--switch-interval`),
#: in process with cycles running, against 1 ms.
THREAD_SWITCH_INTERVAL_S: Final = 0.0002
#: How long a client (daemon/api/client.py, `dreamcycle mcp`) waits for the daemon's answer.
CLIENT_TIMEOUT_S: Final = 30.0
#: Connections the blocking client keeps open to the daemon: as many threads call at once.
CLIENT_CONNECTIONS: Final = 4
#: Where a daemon that `dreamcycle mcp` started writes its log, in the data directory.
STARTED_DAEMON_LOG_FILE: Final = "daemon.log"
#: How long `dreamcycle mcp` waits for a daemon it started to serve memory (its model and
#: index loaded), before giving up with the daemon's log.
MCP_DAEMON_START_TIMEOUT_S: Final = 120.0

#: Context bundles (POST /v1/context, mem_context): the token budget when none is given,
#: and the largest one accepted (tokens estimated as in pulses/context.py).
CONTEXT_BUDGET_TOKENS: Final = 3_000
CONTEXT_MAX_BUDGET_TOKENS: Final = 4_000
#: References listed for the memories that did not fit, at most.
CONTEXT_MAX_OVERFLOW: Final = 64
#: The salience pinned memories are ranked at, at least, when the budget is spent.
CONTEXT_PINNED_SALIENCE: Final = 0.9
#: Pinned memories considered at most (highest salience first).
CONTEXT_PINNED_LIMIT: Final = 200
#: Memories the frame-relevant tier asks recall for.
CONTEXT_RELEVANT_TOP_K: Final = 20
#: The outcomes tier: chunks cited by this peer's successful decisions made within the
#: window (the most recent ones first, at most this many decisions), whose query was at
#: least this close (cosine) to the task.
CONTEXT_OUTCOME_WINDOW_S: Final = 30 * DAY_S
CONTEXT_OUTCOME_DECISIONS: Final = 50
CONTEXT_OUTCOME_MIN_SIMILARITY: Final = 0.5
#: What explaining one memory lists at most: its most recent journal steps, and the most
#: recent decisions that returned it.
EXPLAIN_STEPS: Final = 50
EXPLAIN_DECISIONS: Final = 20
#: Timeline pages: rows when a request does not say, and at most.
TIMELINE_PAGE: Final = 20
TIMELINE_MAX_PAGE: Final = 200
#: Rows of the cold tier (`forgotten`) listed when a request does not say, and at most per
#: API request.
FORGOTTEN_PAGE: Final = 20
FORGOTTEN_MAX_PAGE: Final = 500
#: Around a point in time, the timeline spans this long on either side unless told.
TIMELINE_SPAN_S: Final = 3_600.0
#: Characters of each memory's content a timeline row shows.
TIMELINE_PREVIEW_CHARS: Final = 300
#: Strength of a reinforce (Reward) or penalize (Decay) pulse when none is given.
FEEDBACK_STRENGTH: Final = 0.5
#: The pin floor a pin sets when none is given.
PIN_FLOOR: Final = 0.5
