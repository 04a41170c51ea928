"""`dreamcycle doctor`: each failure injected into a sound peer is found, named and given a fix."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.daemon_helpers import DREAMCYCLE, Peer, documentation_chunks, side_by_side, write_jsonl


@pytest.fixture(scope="module")
def sound(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    root = tmp_path_factory.mktemp("doctor")
    peer = Peer(root / "data", "doc", root / "zeitgeist")
    peer.dreamcycle("ingest", str(write_jsonl(root / "c.jsonl", documentation_chunks(["try"], 5))))
    peer.dreamcycle("run", "--once")
    yield peer


def doctor(peer: Peer, *args: str, **settings: str) -> tuple[int, dict[str, dict[str, Any]]]:
    result = peer.dreamcycle("doctor", "--json", *args, expect=None, settings=settings)
    assert result.returncode in (0, 1), result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] == (result.returncode == 0)
    return result.returncode, {check["name"]: check for check in report["checks"]}


def failed(checks: dict[str, dict[str, Any]]) -> set[str]:
    return {name for name, check in checks.items() if check["status"] == "fail"}


def test_a_sound_peer_passes_and_text_output_names_each_check(sound: Peer) -> None:
    code, checks = doctor(sound)
    assert code == 0 and not failed(checks)
    assert checks["index"]["status"] == "ok" and "sealed" in checks["index"]["detail"]
    assert checks["keys"]["status"] == "ok" and "mode strict" in checks["keys"]["detail"]
    text = sound.dreamcycle("doctor")
    assert [line.split()[1] for line in text.stdout.splitlines()] == list(checks)


def test_each_injected_failure_is_named_with_a_fix(sound: Peer, tmp_path: Path) -> None:
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[cycle]\ninterval_s = -1\n")
    locked = sound.copy_to(tmp_path / "locked")
    locked.data_dir.chmod(0)
    corrupt = sound.copy_to(tmp_path / "corrupt")
    with corrupt.database_path.open("r+b") as handle:
        handle.seek(4096)
        handle.write(os.urandom(4096 * 4))
    damaged = sound.copy_to(tmp_path / "damaged")
    index = damaged.data_dir / "index.hnsw"
    data = bytearray(index.read_bytes())
    data[len(data) // 2] ^= 0xFF
    index.write_bytes(bytes(data))
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        nothing_listens = closed.getsockname()[1]
    (tmp_path / "empty-cache").mkdir()
    try:
        runs = side_by_side(
            [
                lambda: doctor(sound, "--config", str(bad_config)),
                lambda: doctor(locked),
                lambda: doctor(corrupt),
                lambda: doctor(damaged),
                lambda: doctor(
                    sound,
                    DREAMCYCLE_EMBEDDING_MODEL="BAAI/bge-small-en-v1.5",
                    FASTEMBED_CACHE_PATH=str(tmp_path / "empty-cache"),
                    HF_HUB_OFFLINE="1",
                ),
                lambda: doctor(
                    sound,
                    DREAMCYCLE_ZEITGEIST_BACKEND="s3",
                    DREAMCYCLE_ZEITGEIST_S3_BUCKET="mesh",
                    DREAMCYCLE_ZEITGEIST_S3_ENDPOINT_URL=f"http://127.0.0.1:{nothing_listens}",
                    AWS_ACCESS_KEY_ID="test",
                    AWS_SECRET_ACCESS_KEY="test",
                ),
            ]
        )
    finally:
        locked.data_dir.chmod(0o755)
    config, permissions, database, index_run, model, backend = runs
    assert failed(config[1]) == {"config"} and "cycle.interval_s" in config[1]["config"]["detail"]
    assert "data_dir" in failed(permissions[1])
    assert "mode 000" in permissions[1]["data_dir"]["detail"]
    assert failed(database[1]) == {"database"}
    assert failed(index_run[1]) == {"index"}
    assert "checksum" in index_run[1]["index"]["detail"]
    assert failed(model[1]) == {"model"} and "bge-small" in model[1]["model"]["detail"]
    assert failed(backend[1]) == {"backend"}
    assert f"127.0.0.1:{nothing_listens}" in backend[1]["backend"]["detail"]
    assert backend[1]["clock"]["status"] == "skip"
    for code, checks in runs:
        assert code == 1
        assert all(check["fix"] for check in checks.values() if check["status"] == "fail")


def test_doctor_creates_no_data_directory(tmp_path: Path) -> None:
    missing = Peer(tmp_path / "typo", "doc", tmp_path / "zeitgeist-typo")
    code, checks = doctor(missing)
    assert code == 1 and {"data_dir", "database", "backend"} <= failed(checks)
    assert not missing.data_dir.exists() and not missing.zeitgeist_dir.exists()


def test_version_comes_from_the_package() -> None:
    from importlib.metadata import version

    result = subprocess.run(
        [DREAMCYCLE, "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == f"dreamcycle {version('dreamcycle')}"
