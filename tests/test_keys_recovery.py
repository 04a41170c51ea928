"""A damaged private key (open to other users, or not a key at all) is recovered from with
the command its refusal names: `keys init --rotate` sets it aside, never deleting it, and
makes a new one. The real `dreamcycle` in subprocesses, as an operator runs it."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon import defaults
from tests.daemon_helpers import BASE_SETTINGS, CLI_TIMEOUT_S, DREAMCYCLE

EXIT_UNAVAILABLE: Final = 3
GARBAGE: Final = b"-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n"


def keys(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DREAMCYCLE_")}
    return subprocess.run(
        [DREAMCYCLE, "keys", *args, "--data-dir", str(data_dir), "--peer-id", "p",
         "--log-format", "text"],
        capture_output=True, text=True, env={**env, **BASE_SETTINGS},
        timeout=CLI_TIMEOUT_S, check=False,
    )  # fmt: skip


def readable_by_others(key: Path) -> None:
    key.chmod(0o644)


def garbage(key: Path) -> None:
    key.chmod(0o600)
    key.write_bytes(GARBAGE)


@pytest.mark.parametrize("damage", [readable_by_others, garbage])
def test_rotate_sets_a_damaged_key_aside_and_makes_a_new_one(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    data_dir = tmp_path / "data"
    assert keys(data_dir, "init").returncode == 0
    key = data_dir / defaults.SIGNING_KEY_FILE
    damage(key)
    damaged = key.read_bytes()

    shown = keys(data_dir, "show")
    assert shown.returncode == EXIT_UNAVAILABLE, shown
    assert "`dreamcycle keys init --rotate` moves it aside" in shown.stderr
    plain = keys(data_dir, "init")
    assert plain.returncode == EXIT_UNAVAILABLE, plain
    assert "unusable key" in plain.stderr and "keys init --rotate" in plain.stderr
    # The service's first-start step says so too, rather than keeping it.
    if_missing = keys(data_dir, "init", "--if-missing")
    assert if_missing.returncode == EXIT_UNAVAILABLE, if_missing
    assert "keys init --rotate" in if_missing.stderr and "kept" not in if_missing.stdout
    assert key.read_bytes() == damaged

    rotated = keys(data_dir, "init", "--rotate")
    assert rotated.returncode == 0, rotated.stderr
    assert "unusable private key moved aside" in rotated.stderr
    (aside,) = data_dir.glob(
        f"{defaults.SIGNING_KEY_FILE}.{defaults.SIGNING_KEY_UNUSABLE_SUFFIX}-*"
    )
    assert f"previous key kept as {aside}" in rotated.stdout
    assert aside.read_bytes() == damaged
    assert aside.stat().st_mode & 0o777 == defaults.KEY_FILE_MODE
    assert key.stat().st_mode & 0o777 == defaults.KEY_FILE_MODE
    assert keys(data_dir, "show").returncode == 0

    # A second recovery never overwrites the first one's file.
    garbage(key)
    assert keys(data_dir, "init", "--rotate").returncode == 0
    kept = sorted(
        data_dir.glob(f"{defaults.SIGNING_KEY_FILE}.{defaults.SIGNING_KEY_UNUSABLE_SUFFIX}-*")
    )
    assert len(kept) == 2 and aside in kept
    assert aside.read_bytes() == damaged
