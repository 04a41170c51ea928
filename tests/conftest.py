"""Shared fixtures. Real servers (SeaweedFS, redis-server) come from tests/servers.py."""

from __future__ import annotations

import functools
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from dreamcycle.store.embedder import Embedder
from dreamcycle.zeitgeist.backend import LogBackend

pytest_plugins = ["tests.servers"]

# No time limit per example: on a busy machine one example may take ten times as long, and
# a property test checks what a function returns, not how fast.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")

BACKEND_NAMES = ["dir", "s3", "redis"]

# One embedding thread in every test process and every command or daemon it starts: three
# test processes share two cores, and an onnxruntime pool per process (its default) only
# adds threads spinning between calls. An embedder asked for a number of threads keeps it.
os.environ["DREAMCYCLE_EMBEDDING_THREADS"] = "1"
_embedder_init = Embedder.__init__


@functools.wraps(_embedder_init)
def _one_thread_unless_asked(self: Embedder, *args: Any, **kwargs: Any) -> None:
    if len(args) < 3 and kwargs.get("threads") is None:
        kwargs["threads"] = 1
    _embedder_init(self, *args, **kwargs)


Embedder.__init__ = _one_thread_unless_asked  # type: ignore[method-assign]


def make_backend(request: pytest.FixtureRequest, name: str, tmp_path: Path) -> LogBackend:
    """A fresh, empty backend of kind `name`, under a prefix no other test uses."""
    prefix = f"t-{uuid.uuid4().hex[:12]}"
    if name == "dir":
        from dreamcycle.zeitgeist.directory import DirectoryBackend

        return DirectoryBackend(tmp_path / "zeitgeist" / prefix)
    if name == "s3":
        return request.getfixturevalue("s3_server").backend(prefix)  # type: ignore[no-any-return]
    if name == "redis":
        return request.getfixturevalue("redis_server").backend(prefix)  # type: ignore[no-any-return]
    raise ValueError(f"unknown backend {name!r}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files with tests marked `slow` first, each file's tests in their order: a run on
    several workers hands out whole files in this order, and the long ones started first
    leave no worker finishing one alone at the end."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


@pytest.fixture(params=BACKEND_NAMES)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> LogBackend:
    """Every contract test runs once per backend, each against a real store."""
    return make_backend(request, str(request.param), tmp_path)
