"""`dreamcycle install-unit`: the unit, its environment file and the config land where the
unit expects them, and the unit passes systemd's own checks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dreamcycle.daemon import defaults
from tests.daemon_helpers import BASE_SETTINGS, DREAMCYCLE

ANALYZE = shutil.which("systemd-analyze")
needs_systemd = pytest.mark.skipif(
    ANALYZE is None, reason="systemd-analyze is not installed (apt-get install systemd)"
)
#: `systemd-analyze security` rates exposure from 0 (locked down) to 10.
MAX_EXPOSURE = 3.0


def install(root: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DREAMCYCLE, "install-unit", "--root", str(root), *extra],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("root")
    result = install(root)
    assert result.returncode == 0, result.stderr
    return root


def test_files_land_where_the_unit_expects_them_naming_one_data_directory(installed: Path) -> None:
    unit = (installed / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME).read_text()
    config_dir = installed / defaults.CONFIG_DIR.lstrip("/")
    environment = (config_dir / defaults.ENVIRONMENT_FILE_NAME).read_text()
    config = tomllib.loads((config_dir / defaults.CONFIG_FILE_NAME).read_text())
    assert f"ExecStart={Path(sys.prefix).resolve()}/bin/dreamcycle run" in unit
    assert f"DREAMCYCLE_CONFIG={defaults.CONFIG_DIR}/{defaults.CONFIG_FILE_NAME}" in unit
    assert f"EnvironmentFile={defaults.CONFIG_DIR}/{defaults.ENVIRONMENT_FILE_NAME}" in unit
    state = re.search(r"^StateDirectory=(\S+)$", unit, re.MULTILINE)
    assert state is not None and f"/var/lib/{state[1]}" == defaults.SERVICE_DATA_DIR
    assert f"DREAMCYCLE_PEER_DATA_DIR={defaults.SERVICE_DATA_DIR}\n" in environment
    assert config["peer"]["data_dir"] == defaults.SERVICE_DATA_DIR
    assert (config_dir / defaults.ENVIRONMENT_FILE_NAME).stat().st_mode & 0o077 == 0
    # Exit 3 (an outage at boot) is restarted; only a bad configuration (2) is not.
    assert re.search(r"^RestartPreventExitStatus=2$", unit, re.MULTILINE)
    assert "Restart=on-failure" in unit


def test_settings_are_kept_the_unit_replaced_and_dry_run_writes_nothing(
    installed: Path, tmp_path: Path
) -> None:
    environment = installed / defaults.CONFIG_DIR.lstrip("/") / defaults.ENVIRONMENT_FILE_NAME
    environment.write_text("DREAMCYCLE_PEER_ID=kept\n")
    again = install(installed)
    assert again.returncode == 0 and "kept" in again.stdout
    assert environment.read_text() == "DREAMCYCLE_PEER_ID=kept\n"
    dry = install(tmp_path / "dry", "--dry-run")
    assert dry.returncode == 0 and dry.stdout.count("would write") == 3
    assert not (tmp_path / "dry").exists()
    bad = install(tmp_path / "bad", "--prefix", str(tmp_path))
    assert bad.returncode == 2 and "is not an executable" in bad.stderr


@needs_systemd
def test_systemd_verifies_the_unit_and_rates_it_hardened(installed: Path) -> None:
    assert ANALYZE is not None
    unit = installed / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME
    verify = subprocess.run(
        [ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = subprocess.run(
        [ANALYZE, "security", "--offline=true", str(unit)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    found = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security.stdout)
    assert found is not None, security.stdout + security.stderr
    assert float(found[1]) <= MAX_EXPOSURE, security.stdout


def test_the_unit_makes_the_signing_key_at_its_first_start_and_keeps_it_after(
    installed: Path, tmp_path: Path
) -> None:
    unit = (installed / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME).read_text()
    executable = f"{Path(sys.prefix).resolve()}/bin/dreamcycle"
    pre = re.findall(r"^ExecStartPre=(.*)$", unit, re.MULTILINE)
    assert pre == [f"{executable} keys init --if-missing"]
    assert unit.index("ExecStartPre=") < unit.index("ExecStart=")
    # Run it as systemd would: the unit's config file, the data directory from the
    # environment file (here a fresh one), twice, as two starts of the service.
    config = installed / defaults.CONFIG_DIR.lstrip("/") / defaults.CONFIG_FILE_NAME
    data_dir = tmp_path / "state"
    env = {
        **os.environ,
        **BASE_SETTINGS,
        "DREAMCYCLE_CONFIG": str(config),
        "DREAMCYCLE_PEER_DATA_DIR": str(data_dir),
        "DREAMCYCLE_PEER_ID": "fresh",
    }

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(args), capture_output=True, text=True, timeout=60, check=False, env=env
        )

    first = run(*pre[0].split())
    assert first.returncode == 0, first.stderr
    key = data_dir / defaults.SIGNING_KEY_FILE
    assert key.stat().st_mode & 0o777 == defaults.KEY_FILE_MODE
    created = key.read_bytes()
    key_id = re.search(r"^key id\s+(\S+)$", first.stdout, re.MULTILINE)
    assert key_id is not None, first.stdout
    second = run(*pre[0].split())
    assert second.returncode == 0 and f"kept {key} (exists)" in second.stdout, second
    assert key.read_bytes() == created
    shown = run(executable, "keys", "show")
    assert shown.returncode == 0 and key_id[1] in shown.stdout, shown
    # Without the flag an existing key is still an error, and the two flags exclude each other.
    assert run(executable, "keys", "init").returncode != 0
    both = run(executable, "keys", "init", "--if-missing", "--rotate")
    assert both.returncode == 2 and "not allowed with argument" in both.stderr, both.stderr


# ---- paths systemd would read otherwise, and places that cannot be written --------------------


def prefix_named(tmp_path: Path, name: str) -> Path:
    """An installation at tmp_path/name whose bin/dreamcycle is this one's."""
    prefix = tmp_path / name
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "dreamcycle").symlink_to(Path(DREAMCYCLE).resolve())
    return prefix


def exec_lines(root: Path) -> list[str]:
    unit = (root / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME).read_text()
    return re.findall(r"^ExecStart(?:Pre)?=.*$", unit, re.MULTILINE)


def test_a_prefix_with_spaces_or_percent_signs_is_written_as_systemd_reads_it(
    tmp_path: Path,
) -> None:
    prefix = prefix_named(tmp_path, "my env 100%h $HOME")
    root = tmp_path / "root"
    result = install(root, "--prefix", str(prefix))
    assert result.returncode == 0, result.stderr
    word = f'"{prefix.resolve()}/bin/dreamcycle"'.replace("%", "%%")
    assert exec_lines(root) == [
        f"ExecStartPre={word} keys init --if-missing",
        f"ExecStart={word} run",
    ]
    if ANALYZE is not None:
        # verify resolves the executable as systemd would: a word split at the space, or
        # %h expanded, names no file.
        unit = root / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME
        verify = subprocess.run(
            [ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
        )
        assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr


def test_a_prefix_systemd_refuses_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    prefix = prefix_named(tmp_path, 'say "hi"')
    root = tmp_path / "root"
    result = install(root, "--prefix", str(prefix))
    assert result.returncode == 2, result
    assert "--prefix" in result.stderr and "quotes" in result.stderr
    assert "Traceback" not in result.stderr
    assert not root.exists()


def test_a_root_that_is_a_file_is_refused_with_a_message(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.write_text("not a directory")
    result = install(root)
    assert result.returncode == 2, result
    assert result.stderr.startswith(f"error: cannot write {root}/") and "--root" in result.stderr
    assert "Traceback" not in result.stderr
    assert root.read_text() == "not a directory"


def test_a_directory_where_the_unit_goes_is_refused_and_no_partial_file_is_left(
    tmp_path: Path,
) -> None:
    root = tmp_path / "root"
    unit = root / defaults.UNIT_DIR.lstrip("/") / defaults.UNIT_NAME
    (unit / "kept").mkdir(parents=True)
    result = install(root)
    assert result.returncode == 2, result
    assert f"error: cannot write {unit}: it is a directory" in result.stderr
    assert "Traceback" not in result.stderr
    assert (unit / "kept").is_dir()
    assert not list(root.rglob("*.partial"))
