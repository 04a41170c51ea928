"""The zeitgeist backend, probed before anything is written to it.

The probe refuses a store that would silently overwrite log entries (no create-only
writes). At start-up it gets a short deadline: a store that does not answer then is an
outage, not a configuration error, so the daemon starts anyway (reads served, local
phases run, entries wait in the outbox), and the probe is made again before the first
write, when the store answers. A store that answers and refuses create-only writes is
never written to.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from dreamcycle.zeitgeist.backend import (
    MAX_OBJECT_BYTES,
    BackendError,
    LogBackend,
    UnsupportedStore,
    Versioned,
)

log = logging.getLogger("dreamcycle.backend")


class ProbeBeforeWrite:
    """A backend whose first write waits for a successful probe (reads never do)."""

    def __init__(self, inner: LogBackend) -> None:
        self.inner = inner
        self.name = inner.name
        self._probed = False
        self._refusal_logged = False
        self._lock = threading.Lock()

    @property
    def probed(self) -> bool:
        return self._probed

    def probe(self) -> None:
        with self._lock:
            try:
                self.inner.probe()
            except UnsupportedStore as exc:
                if not self._refusal_logged:
                    self._refusal_logged = True
                    log.error(
                        "zeitgeist store refused; nothing is written to it",
                        extra={"error": str(exc)},
                    )
                raise
            self._probed = True

    def probe_at_start(self, quick: LogBackend) -> None:
        """Probe through `quick` (the same store, a short retry deadline). An unsupported
        store raises (a configuration error); an unreachable one is logged and probed
        again before the first write."""
        try:
            quick.probe()
        except UnsupportedStore:
            raise
        except BackendError as exc:
            log.warning(
                "zeitgeist unreachable at start-up; running on local entries until it answers",
                extra={"backend": self.name, "error": str(exc)},
            )
            return
        finally:
            quick.close()
        self._probed = True

    def _before_write(self) -> None:
        if not self._probed:
            self.probe()

    def create(self, key: str, data: bytes) -> None:
        self._before_write()
        self.inner.create(key, data)

    def read(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> bytes:
        return self.inner.read(key, max_bytes=max_bytes)

    def list_after(self, prefix: str, start_after: str) -> list[str]:
        return self.inner.list_after(prefix, start_after)

    def delete(self, keys: list[str]) -> None:
        self._before_write()
        self.inner.delete(keys)

    def read_versioned(self, key: str, *, max_bytes: int = MAX_OBJECT_BYTES) -> Versioned | None:
        return self.inner.read_versioned(key, max_bytes=max_bytes)

    def write_versioned(self, key: str, data: bytes, expect: str | None) -> str:
        self._before_write()
        return self.inner.write_versioned(key, data, expect)

    def write_overwrite(self, key: str, data: bytes) -> None:
        self._before_write()
        self.inner.write_overwrite(key, data)

    def close(self) -> None:
        self.inner.close()


def probed_backend(backend: LogBackend, open_quick: Callable[[], LogBackend]) -> ProbeBeforeWrite:
    """`backend`, probed now through `open_quick()` if the store answers, else before its
    first write."""
    probed = ProbeBeforeWrite(backend)
    probed.probe_at_start(open_quick())
    return probed
