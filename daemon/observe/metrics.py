"""Prometheus metrics of the daemon, exposed over HTTP when metrics.listen is set.

Names follow Prometheus' conventions: counters end in `_total` (the client library adds
it), durations are in seconds and say so, timestamps are seconds since the epoch. The
same listener answers `/healthz` and `/readyz` with small JSON documents (daemon/observe/health.py).
"""

from __future__ import annotations

import json
import math
import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from http import HTTPStatus
from typing import Any, Final
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from dreamcycle.daemon.config.settings import BY_NAME

REGISTRY: Final = CollectorRegistry()
NAMESPACE: Final = "dreamcycle"

CYCLES = Counter(
    "cycles", "Dream cycles finished, by result", ["result"], namespace=NAMESPACE, registry=REGISTRY
)
PHASE_SECONDS = Histogram(
    "phase_duration_seconds",
    "Wall time of each dream-cycle phase",
    ["phase"],
    namespace=NAMESPACE,
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60, 300),
)
PHASE_EVENTS = Counter(
    "phase_events",
    "Events counted by phases (entries applied, pulses rejected, chunks admitted, ...)",
    ["phase", "event"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
LIVE_CHUNKS = Gauge("live_chunks", "Chunks not tombstoned", namespace=NAMESPACE, registry=REGISTRY)
TOMBSTONES = Gauge("tombstones", "Tombstoned hashes", namespace=NAMESPACE, registry=REGISTRY)
LAST_CYCLE = Gauge(
    "last_cycle_timestamp_seconds",
    "When the last cycle finished",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
PUBLISH_SECONDS = Histogram(
    "publish_duration_seconds",
    "Time to write one segment to the zeitgeist",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
SEGMENTS_REFUSED = Counter(
    "segments_refused",
    "Segments read from the log and refused by their seal (unsigned, unknown or revoked "
    "key, bad signature, ...) before any of their entries was decoded, by reason",
    ["reason"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
ENTRIES_REJECTED = Counter(
    "entries_rejected",
    "Remote entries refused before applying (unsigned, unknown or revoked key, bad "
    "signature, signer not the origin, ...), by reason",
    ["reason"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
CYCLE_ERRORS = Counter(
    "cycle_errors",
    "Cycles that failed, by exception type",
    ["error"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
DERIVED_FILE_REBUILDS = Counter(
    "derived_file_rebuilds",
    "Derived files found unusable and rebuilt from the database, by file and reason",
    ["file", "reason"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)

OUTBOX_ENTRIES = Gauge(
    "outbox_entries",
    "This peer's entries waiting to be published (queued, or in a segment not yet written)",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
BACKEND_UP = Gauge(
    "backend_up",
    "1 when the last call to the zeitgeist backend succeeded, 0 when it failed",
    ["backend"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
LAST_POLL = Gauge(
    "last_poll_success_timestamp_seconds",
    "When the zeitgeist was last listed for new segments successfully",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
LAST_PUBLISH = Gauge(
    "last_publish_success_timestamp_seconds",
    "When this peer last wrote a segment to the zeitgeist",
    namespace=NAMESPACE,
    registry=REGISTRY,
)
STORAGE_FAULT = Gauge(
    "storage_fault",
    "1 while writes to the data directory fail for this reason (busy, disk_full, read_only)",
    ["kind"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
STORAGE_FAULTS = Counter(
    "storage_faults",
    "Cycles that could not write the data directory, by reason",
    ["kind"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)
READY = Gauge(
    "ready",
    "1 when /readyz answers ready (database, index, backend usable, a recent cycle)",
    namespace=NAMESPACE,
    registry=REGISTRY,
)

EFFICACY = Gauge(
    "efficacy",
    "Efficacy of the learning loop over a look-back window (NaN: nothing to measure yet)",
    ["metric", "window"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)


class _StoreRequests(Collector):
    """Requests this daemon sent to its zeitgeist store, by operation, as the backend counts
    them (every attempt, retries included: what the store bills)."""

    def __init__(self) -> None:
        self.source: Callable[[], Mapping[str, int]] | None = None

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(
            f"{NAMESPACE}_zeitgeist_requests",
            "Requests sent to the zeitgeist store, by operation (S3: ListObjectsV2, "
            "GetObject, PutObject, HeadObject, DeleteObjects; Redis: its commands)",
            labels=["operation"],
        )
        for operation, count in sorted((self.source() if self.source else {}).items()):
            family.add_metric([operation], count)
        yield family


STORE_REQUESTS: Final = _StoreRequests()
REGISTRY.register(STORE_REQUESTS)


def count_store_requests(backend: object) -> None:
    """Expose the request counts of `backend` (S3 and Redis count theirs; the directory
    sends none)."""
    counter = getattr(backend, "requests", None)
    STORE_REQUESTS.source = None if counter is None else counter.snapshot


#: Phase stats that describe a level (how many chunks are live, the sweep's threshold),
#: not events: adding them up cycle after cycle would count nothing real.
LEVEL_STATS: Final = frozenset({"live", "population", "threshold"})

#: A probe answers an HTTP status and a JSON document.
Probe = Callable[[], tuple[int, dict[str, Any]]]


class MetricsUnavailable(RuntimeError):
    """The metrics address cannot be bound."""


class _QuietHandler(WSGIRequestHandler):
    # Scrapes every few seconds would fill the journal with access lines.
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve(address: tuple[str, int], probes: Mapping[str, Probe] | None = None) -> None:
    """Serve the metrics (at any path but the probes') from a daemon thread."""
    host, port = address
    metrics_app = make_wsgi_app(REGISTRY)
    routes = dict(probes or {})

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        probe = routes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            answer: Iterable[bytes] = metrics_app(environ, start_response)
            return answer
        status, document = probe()
        body = json.dumps(document).encode()
        start_response(
            f"{status} {HTTPStatus(status).phrase}",
            [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
        )
        return [body]

    class Server(ThreadingWSGIServer):
        address_family = socket.AF_INET6 if ":" in host else socket.AF_INET

    try:
        server = make_server(host, port, app, Server, handler_class=_QuietHandler)
    except OSError as exc:
        listen = BY_NAME["metrics.listen"]
        raise MetricsUnavailable(
            f"cannot serve metrics on {host}:{port}: {exc.strerror}; "
            f"set {listen.name} ({listen.env}) to a free HOST:PORT, or empty to disable"
        ) from None
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()


def record_phase(phase: str, seconds: float, stats: dict[str, Any]) -> None:
    PHASE_SECONDS.labels(phase).observe(seconds)
    for event, value in stats.items():
        if event in LEVEL_STATS or isinstance(value, bool) or not isinstance(value, int):
            continue
        if value > 0:
            PHASE_EVENTS.labels(phase, event).inc(value)


def record_efficacy(values: dict[str, float | None], window: str) -> None:
    for metric, value in values.items():
        EFFICACY.labels(metric, window).set(math.nan if value is None else value)
