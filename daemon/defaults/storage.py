"""Where the daemon keeps what it holds: the data directory, the database, the index (its file,
its graph and how often it is saved), the lock, and the embedded zeitgeist's directory.
"""

from __future__ import annotations

from typing import Final

from dreamcycle.store import index_graph as hnsw_index

#: Data directory when none is configured (XDG data home).
DATA_DIR: Final = "~/.local/share/dreamcycle"
DATABASE_FILE: Final = "dreamcycle.db"
INDEX_FILE: Final = "index.hnsw"
#: The daemon writes its changed index at most this often (and when it stops): a write
#: holds the GIL for a time that grows with the index, during which nothing is added to it
#: (an API save waits). A crash in between costs a rebuild from stored vectors at the next
#: start, far slower than loading the saved file; 0 writes it after every cycle that
#: changed it.
INDEX_SAVE_INTERVAL_S: Final = 300.0
INDEX_M: Final = hnsw_index.DEFAULT_M
INDEX_EF_CONSTRUCTION: Final = hnsw_index.DEFAULT_EF_CONSTRUCTION
INDEX_EF: Final = hnsw_index.DEFAULT_EF
LOCK_FILE: Final = "daemon.lock"
#: The embedded default zeitgeist: a directory beside the database.
ZEITGEIST_DIR: Final = "zeitgeist"
