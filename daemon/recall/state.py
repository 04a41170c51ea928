"""What recall keeps between calls, found by the runtime it reads through.

A runtime is the database, the embedder and the clock; recall keeps more beside it: values
read whole (the tier sets, learned keys, the cold tier's embeddings, filter matches),
valid while the database's stamp holds, the stored embeddings it has gathered, and the
cold tier's search. One-shot commands and the cycle get a state of their own per runtime
on first use; the daemon's API shares one state between its views, one per connection
(`share`).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Final

from dreamcycle.daemon.memo import StampedCache
from dreamcycle.daemon.recall.cold_search import ColdSearch
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store.read_paths import StoredVectors

__all__ = ["RecallState", "recall_state", "share"]


@dataclass(eq=False)
class RecallState:
    """The caches of recall, and the cold tier's search that reads through them."""

    cold_search: ColdSearch = field(default_factory=ColdSearch)

    @classmethod
    def of(cls, rt: Runtime) -> RecallState:
        """A state holding as many stored embeddings as `rt`'s configuration lets it."""
        held_bytes = rt.config.recall.embeddings_held_mib * BYTES_PER_MIB
        return cls(
            ColdSearch(
                rt.config.recall.cold_graph_from, vectors=StoredVectors(held_bytes=held_bytes)
            )
        )

    @property
    def cache(self) -> StampedCache:
        """What recall reads whole, kept while the database has not changed."""
        return self.cold_search.cache

    @property
    def stored_vectors(self) -> StoredVectors:
        """Stored embeddings recall has read, kept: an admitted chunk's never changes."""
        return self.cold_search.vectors


BYTES_PER_MIB: Final = 1 << 20

_STATES: weakref.WeakKeyDictionary[Runtime, RecallState] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def recall_state(rt: Runtime) -> RecallState:
    """`rt`'s recall state, made on first use."""
    with _LOCK:
        state = _STATES.get(rt)
    return state if state is not None else share(rt, RecallState.of(rt))


def share(rt: Runtime, state: RecallState) -> RecallState:
    """Let `rt` recall with `state` (views of the API share one), unless it has a state
    already. Returns the state `rt` recalls with."""
    with _LOCK:
        kept = _STATES.setdefault(rt, state)
    if kept is state:
        # A value cached inside a write transaction carries a stamp of changes that a
        # rollback undoes, and a later commit can reach the same stamp with other rows.
        # One hook per cache: several runtimes may share a connection.
        rt.db.conn.set_rollback_hook(state.cache.clear, id=id(state.cache))
    return kept
