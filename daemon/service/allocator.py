"""The C allocator's settings in the daemon's process: what it frees goes back to the system.

A peer of a million chunks holds its index and model for good, and beside them allocates
and frees arrays over every chunk (the sweep, a cycle's checkpoint). With glibc's defaults
that freed memory stays in the process: each thread that allocates grows an arena of its
own, and the threshold above which a block gets pages of its own rises past the largest
block freed, so the next ones come from the heap and stay there.
"""

from __future__ import annotations

import ctypes
from typing import Final

#: glibc's mallopt parameters (malloc.h).
_M_MMAP_THRESHOLD: Final = -3
_M_ARENA_MAX: Final = -8


def hand_back_freed_memory(arenas: int, mmap_threshold_bytes: int) -> bool:
    """Allocate in at most `arenas` arenas, and give each block of `mmap_threshold_bytes`
    or more pages of its own (which stops glibc raising that threshold); whether the C
    library took both. A process-wide setting, made once at start-up; a C library without
    glibc's mallopt (musl, macOS) is left as it is."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return all(
        mallopt(parameter, value) == 1
        for parameter, value in ((_M_ARENA_MAX, arenas), (_M_MMAP_THRESHOLD, mmap_threshold_bytes))
    )
