"""The checks `dreamcycle doctor` makes of the zeitgeist backend: it answers and honours
conditional writes (the daemon's own start-up probe, one object written and deleted), and
this host's clock agrees with the backend's."""

from __future__ import annotations

import email.utils
from collections.abc import Callable
from typing import TYPE_CHECKING

from dreamcycle.daemon.cli.doctor_checks import FAIL, OK, SKIP, WARN, Check

if TYPE_CHECKING:
    from dreamcycle.daemon.config import Config
    from dreamcycle.zeitgeist.backend import LogBackend


def check_backend(config: Config) -> tuple[LogBackend | None, Check]:
    from dreamcycle.daemon import defaults
    from dreamcycle.daemon.runtime import open_backend
    from dreamcycle.zeitgeist.backend import BackendError, UnsupportedStore
    from dreamcycle.zeitgeist.retry import RetryPolicy

    name = config.zeitgeist.backend
    if name == "dir" and not config.zeitgeist_dir.is_dir():
        # Probing would create it: a diagnosis writes nowhere new.
        return None, Check(
            "backend",
            FAIL,
            f"dir: {config.zeitgeist_dir} does not exist",
            "check zeitgeist.dir / --zeitgeist-dir; the daemon creates it at its first start",
        )
    try:
        backend = open_backend(config, RetryPolicy(deadline_s=defaults.DOCTOR_BACKEND_DEADLINE_S))
        backend.probe()
    except UnsupportedStore as exc:
        return None, Check(
            "backend",
            FAIL,
            str(exc),
            "use a store that honours If-None-Match (AWS S3, MinIO since 2024, SeaweedFS) "
            "or Redis >= 7 (docs/s3.md)",
        )
    except (BackendError, ValueError) as exc:
        return None, Check(
            "backend",
            FAIL,
            str(exc),
            "check zeitgeist.* in the config, the network path to the store and its "
            "credentials; the daemon waits out an outage by itself",
        )
    return backend, Check("backend", OK, f"{name}: reachable, conditional writes honoured")


def check_clock(config: Config, backend: LogBackend) -> Check:
    from dreamcycle.daemon import defaults
    from dreamcycle.daemon.clock import clock_from_config

    server_ms = _server_time_ms(backend)
    if server_ms is None:
        return Check("clock", SKIP, f"the {backend.name} backend gives no server time")
    skew_s = (clock_from_config(config).now_ms() - server_ms) / 1000
    limit_s = config.zeitgeist.window_s / 2
    detail = f"{skew_s:+.1f} s against the {backend.name} server"
    fix = "run a time service (chrony, systemd-timesyncd) on this host"
    if abs(skew_s) > limit_s:
        return Check("clock", FAIL, f"{detail}: more than half of zeitgeist.window_s", fix)
    if abs(skew_s) > defaults.DOCTOR_MAX_CLOCK_SKEW_S:
        return Check("clock", WARN, detail, fix)
    return Check("clock", OK, detail)


def _server_time_ms(backend: LogBackend) -> int | None:
    """The store's own clock: S3's Date header (1 s resolution), Redis' TIME."""
    reader: Callable[[], int] | None = None
    if backend.name == "s3":
        from dreamcycle.zeitgeist.s3 import S3Backend

        assert isinstance(backend, S3Backend)
        s3 = backend

        def reader() -> int:
            reply = s3.client.list_objects_v2(Bucket=s3.bucket, Prefix=s3.prefix, MaxKeys=1)
            date = reply["ResponseMetadata"]["HTTPHeaders"]["date"]
            return int(email.utils.parsedate_to_datetime(date).timestamp() * 1000)

    elif backend.name == "redis":
        from dreamcycle.zeitgeist.redis_streams import RedisStreamsBackend

        assert isinstance(backend, RedisStreamsBackend)
        redis_backend = backend

        def reader() -> int:
            seconds, micros = redis_backend.client.time()
            return int(seconds) * 1000 + int(micros) // 1000

    if reader is None:
        return None
    try:
        return reader()
    except Exception:
        return None
