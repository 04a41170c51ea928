"""A readers-writer lock for the HNSW index, which hnswlib does not guard itself."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ReadersWriterLock:
    """Many readers or one writer; a waiting writer holds new readers back.

    hnswlib answers concurrent queries safely, but not a query concurrent with an
    add, a resize or a (un)deletion. Writers hold the lock for one small mutation,
    so a reader waits at most that long. The writing thread may read while it writes.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer: int | None = None
        self._writers_waiting = 0

    @property
    def free(self) -> bool:
        """Whether a reader would get in now without waiting. Only a hint: a writer that
        comes the next moment is waited for, for its one small mutation."""
        return self._writer is None and not self._writers_waiting

    @contextmanager
    def reading(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._writer == me:
            yield
            return
        with self._condition:
            while self._writer is not None or self._writers_waiting:
                self._condition.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._condition:
                self._readers -= 1
                if self._readers == 0:
                    self._condition.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        me = threading.get_ident()
        if self._writer == me:
            yield
            return
        with self._condition:
            self._writers_waiting += 1
            try:
                while self._writer is not None or self._readers:
                    self._condition.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = me
        try:
            yield
        finally:
            with self._condition:
                self._writer = None
                self._condition.notify_all()
