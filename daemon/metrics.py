"""Prometheus metrics of the daemon, exposed over HTTP when metrics.listen is set."""

from __future__ import annotations

import math
from typing import Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY: Final = CollectorRegistry()
NAMESPACE: Final = "dreamcycle"

CYCLES = Counter(
    "cycles", "Dream cycles finished, by result", ["result"], namespace=NAMESPACE, registry=REGISTRY
)
PHASE_SECONDS = Histogram(
    "phase_seconds",
    "Wall time of each dream-cycle phase",
    ["phase"],
    namespace=NAMESPACE,
    registry=REGISTRY,
    buckets=(0.001, 0.005, 0.02, 0.1, 0.5, 2, 10, 60, 300),
)
PHASE_EVENTS = Counter(
    "phase_events",
    "Counts reported by phases (entries applied, pulses rejected, ...)",
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
    "publish_seconds", "Time to write one segment", namespace=NAMESPACE, registry=REGISTRY
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

EFFICACY = Gauge(
    "efficacy",
    "Efficacy of the learning loop over a look-back window (NaN: nothing to measure yet)",
    ["metric", "window"],
    namespace=NAMESPACE,
    registry=REGISTRY,
)


class MetricsUnavailable(RuntimeError):
    """The metrics address cannot be bound."""


def serve(address: tuple[str, int]) -> None:
    try:
        start_http_server(address[1], addr=address[0], registry=REGISTRY)
    except OSError as exc:
        raise MetricsUnavailable(
            f"cannot serve metrics on {address[0]}:{address[1]}: {exc.strerror}; "
            "set metrics.listen (DREAMCYCLE_METRICS_LISTEN) to a free HOST:PORT, or empty to disable"
        ) from None


def record_phase(phase: str, seconds: float, stats: dict[str, Any]) -> None:
    PHASE_SECONDS.labels(phase).observe(seconds)
    for event, value in stats.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            PHASE_EVENTS.labels(phase, event).inc(value)


def record_efficacy(values: dict[str, float | None], window: str) -> None:
    for metric, value in values.items():
        EFFICACY.labels(metric, window).set(math.nan if value is None else value)
