"""The daemon's process hands freed memory back to the system (daemon/service/allocator.py).

With glibc's defaults, once a large block was freed, later blocks of that size come from
the heap, and a small block allocated after them keeps the heap from shrinking: a sweep's
arrays over a million chunks stayed resident after the sweep (scripts/bench_scale.py).
The case runs in a process of its own, as the settings are process-wide.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from dreamcycle.daemon import defaults

_SETTINGS = (defaults.MALLOC_ARENAS, defaults.MALLOC_MMAP_THRESHOLD_BYTES)

#: Forty blocks of 6 MiB, each followed by a small block that outlives it.
_ALLOCATE_AND_FREE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from dreamcycle.daemon.service.allocator import hand_back_freed_memory
    if not hand_back_freed_memory(int(sys.argv[1]), int(sys.argv[2])):
        sys.exit("the C library did not take the settings")
    def resident():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096
    first = np.ones((6 << 20) // 8)
    del first  # glibc raises its threshold for blocks of their own past this one
    before, small, large = resident(), [], []
    for _ in range(40):
        large.append(np.ones((6 << 20) // 8))
        small.append(bytearray(1024))
    del large
    print((resident() - before) >> 20)
    """
)


def _kept_mib() -> int:
    """MiB still resident after the blocks were freed, in a process with the settings."""
    done = subprocess.run(
        [sys.executable, "-c", _ALLOCATE_AND_FREE, *map(str, _SETTINGS)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_daemon_process_hands_freed_blocks_back() -> None:
    assert _kept_mib() < 16
