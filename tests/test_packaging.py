"""The wheel installs under `dreamcycle.*`, beside python-daemon (whose import name is `daemon`).

The wheel is built from this checkout and installed, without the editable install's import
hook, into a fresh virtual environment together with python-daemon. The third-party
dependencies come from the test environment through a path file, so the test does not
download the embedding runtime again; the package itself and python-daemon are real installs.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from dreamcycle import migrations

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent

CHECK_BOTH = """
import json
import daemon, daemon.pidfile
import dreamcycle.daemon, dreamcycle.daemon.cli.main, dreamcycle.daemon.api.http
import dreamcycle.migrations, dreamcycle.store.database, dreamcycle.store.bundled_model
from pathlib import Path
print(json.dumps({
    "python_daemon": daemon.__file__,
    "dreamcycle_daemon": dreamcycle.daemon.__file__,
    "has_daemon_context": hasattr(daemon, "DaemonContext"),
    "migrations": len(dreamcycle.migrations.migration_files()),
    "tokenizer": Path(dreamcycle.store.bundled_model.tokenizer_folder(), "tokenizer.json").is_file(),
}))
"""


def _run(*argv: str | Path, cwd: Path | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in argv], cwd=cwd, capture_output=True, text=True, timeout=240
    )
    assert done.returncode == 0, f"{argv} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def fresh_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("wheel")
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", work / "dist", REPO)
    (wheel,) = (work / "dist").glob("dreamcycle-*.whl")
    env = work / "env"
    _run(sys.executable, "-m", "venv", "--without-pip", env)
    python = env / "bin" / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel)
    _run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "python-daemon")
    site = Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))").strip()
    )
    # A plain path entry: the test environment's packages, but not its .pth import hooks.
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return env


def test_dreamcycle_and_python_daemon_import_side_by_side(fresh_env: Path, tmp_path: Path) -> None:
    import json

    out = json.loads(_run(fresh_env / "bin" / "python", "-c", CHECK_BOTH, cwd=tmp_path))
    assert out["has_daemon_context"], "`import daemon` is not python-daemon"
    assert "site-packages/daemon/" in out["python_daemon"]
    assert str(fresh_env) in out["dreamcycle_daemon"], "dreamcycle came from outside the wheel"
    assert out["dreamcycle_daemon"].endswith("site-packages/dreamcycle/daemon/__init__.py")
    assert out["migrations"] == len(migrations.migration_files())
    assert out["tokenizer"], "the tokenizer files are missing from the wheel"


def test_installed_commands_run(fresh_env: Path, tmp_path: Path) -> None:
    from importlib.metadata import version

    out = _run(fresh_env / "bin" / "dreamcycle", "--version", cwd=tmp_path)
    assert out.strip() == f"dreamcycle {version('dreamcycle')}"
    assert "usage: pulse-emit" in _run(fresh_env / "bin" / "pulse-emit", "--help", cwd=tmp_path)
