"""Stores for the store's tests: one as an older version left it (only the migrations
numbered below a given one), and a chunk retracted the way a tombstone entry does."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from dreamcycle import migrations
from dreamcycle.store.database import Database


@contextmanager
def migrations_before(monkeypatch: pytest.MonkeyPatch, number: int) -> Iterator[None]:
    """Within it, a database opened or migrated knows only the migrations numbered below
    `number`; once it ends, the next open applies the rest."""
    before = [f for f in migrations.migration_files() if int(f.name[:4]) < number]
    with monkeypatch.context() as patch:
        patch.setattr(migrations, "migration_files", lambda: before)
        yield


def tombstone(db: Database, digest: str, now_ms: int) -> int | None:
    """Retract the chunk `digest` for good; the rowid it hid, if stored here."""
    with db.transaction():
        return db.tombstone(
            digest, reason="wrong", origin_peer="p", now_ms=now_ms,
            collectable_after_ms=None, journal_seq=None,
        )  # fmt: skip
