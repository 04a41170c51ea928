"""Taking permissions away from a test's files: the commands must then obey file modes,
which root does only without the capabilities that bypass them (setpriv drops those)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pytest

#: The capabilities that let root read and write whatever the file modes say.
MODE_BYPASSING_CAPABILITIES: Final = "-dac_override,-dac_read_search,-fowner"
#: How long the probe of setpriv may take.
PROBE_TIMEOUT_S: Final = 60.0


def _mode_obeying_prefix() -> list[str] | None:
    """What to run a command under so that it obeys file modes: nothing for a user other
    than root; setpriv dropping the capabilities for root; None when that cannot be done."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    prefix = [setpriv, f"--bounding-set={MODE_BYPASSING_CAPABILITIES}"]
    with tempfile.TemporaryDirectory() as scratch:
        unreadable = Path(scratch) / "unreadable"
        unreadable.touch(mode=0)
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", "import sys; open(sys.argv[1])", str(unreadable)],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    return prefix if "PermissionError" in probe.stderr else None


MODE_OBEYING_PREFIX: Final = _mode_obeying_prefix()
needs_file_modes = pytest.mark.skipif(
    MODE_OBEYING_PREFIX is None,
    reason="root here cannot drop the capabilities that bypass file modes (setpriv)",
)


@contextmanager
def modes_taken(*changes: tuple[Path, int]) -> Iterator[None]:
    """Each path's mode set as given, and put back afterwards."""
    saved = [(path, stat.S_IMODE(path.stat().st_mode)) for path, _ in changes]
    try:
        for path, mode in changes:
            path.chmod(mode)
        yield
    finally:
        for path, mode in reversed(saved):
            path.chmod(mode)
