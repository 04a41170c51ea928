"""A cache of values derived from the database, valid while the database's stamp holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StampedCache:
    """Values tagged with the stamp they were computed at; a new stamp misses."""

    entries: dict[str, tuple[str, Any]] = field(default_factory=dict)
    #: How many times it was emptied: what was read at a stamp can be gone while the stamp
    #: stays (a rollback empties it).
    emptied: int = 0

    def get(self, name: str, stamp: str) -> Any | None:
        found = self.entries.get(name)
        return found[1] if found is not None and found[0] == stamp else None

    def put(self, name: str, stamp: str, value: Any) -> Any:
        self.entries[name] = (stamp, value)
        return value

    def clear(self) -> None:
        self.entries.clear()
        self.emptied += 1
