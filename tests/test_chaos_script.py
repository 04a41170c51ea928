"""scripts/chaos.py end to end, small: three daemons under twenty-five seconds of every fault.

The script starts its own SeaweedFS and three daemons, queues pulses and outcomes while it
injects every kind of fault at least once (forged objects in the bucket, junk at a freshly
claimed segment key, keyring churn, an S3 outage, kill -9, clock skew), lets the peers
catch up and checks them. Here: it exits 0, every check of its report holds, and each kind
of fault was injected, each forgery with at least one object written.

Keyring churn is kept away from daemons still starting (`--keyring-churn
not-during-start`): a daemon reads the keyring a second time when it opens its store,
after the start-up probe of the zeitgeist, and exits 1 when that read meets a half-written
file (docs/operations.md, "A long run of faults").
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Final

import pytest

from scripts.chaos import FAULTS, FORGERIES

pytestmark = pytest.mark.slow

REPO: Final = Path(__file__).resolve().parent.parent
RUN_TIMEOUT_S: Final = 280.0
SMALL_RUN: Final = (
    "--seconds", "25", "--interval", "1", "--fault-every-s", "2", "--chunks", "20",
    "--keyring-churn", "not-during-start", "--seed", "1",
)  # fmt: skip


@pytest.mark.long
def test_a_short_run_of_every_fault_holds_every_check(tmp_path: Path) -> None:
    out = tmp_path / "chaos.json"
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "chaos.py"), *SMALL_RUN, "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    tail = "\n".join((result.stdout + result.stderr).splitlines()[-80:])
    assert result.returncode == 0, tail
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["seed"] == 1
    assert report["machine"]["usable_cpus"] >= 1
    failed = {name: c["detail"] for name, c in report["checks"].items() if not c["holds"]}
    assert failed == {}, tail
    assert set(report["checks"]) == {
        "salience", "acknowledged", "cycling", "bounded", "forgeries_refused",
    }  # fmt: skip
    assert {kind: n for kind, n in report["faults"].items() if n < 1} == {}, report["faults"]
    assert set(report["faults"]) == set(FAULTS)
    written = report["objects"]
    assert {kind: written.get(kind, 0) for kind in FORGERIES if written.get(kind, 0) < 1} == {}
    assert report["acknowledged"]["pulses"] > 0 and report["acknowledged"]["outcomes"] > 0
    assert report["settle"]["caught_up"]


def test_bad_arguments_exit_2_and_help_explains(tmp_path: Path) -> None:
    script = str(REPO / "scripts" / "chaos.py")
    for bad in (["--minutes", "0"], ["--max-skew-s", "600"], ["--interval", "nan"]):
        result = subprocess.run(
            [sys.executable, script, *bad, "--out", str(tmp_path / "x.json")],
            cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 2, (bad, result.stderr)
        assert not (tmp_path / "x.json").exists()
    shown = subprocess.run(
        [sys.executable, script, "--help"], cwd=REPO, capture_output=True, text=True,
        timeout=60, check=True,
    ).stdout  # fmt: skip
    for option in ("--minutes", "--seconds", "--seed", "--out", "--keep", "Exit status"):
        assert option in shown
