"""An index that cannot be written, and a journal that cannot be replayed: `run` and
`rebuild` say so in one line (exit 3) and leave what is stored as it was; the daemon still
tells a storage fault behind a failed save by its cause."""

from __future__ import annotations

import errno
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Final

import apsw
import numpy as np
import pytest

from dreamcycle.daemon.observe.storage_health import StorageFault, storage_fault
from dreamcycle.store.index import HnswIndex
from dreamcycle.store.index_file import (
    IndexSaveFailed,
    meta_path,
    replace_durably,
    temporary_path,
)
from tests.daemon_helpers import CLI_TIMEOUT_S, DREAMCYCLE, Peer, documentation_chunks, write_jsonl
from tests.permission_helpers import MODE_OBEYING_PREFIX, modes_taken, needs_file_modes

EXIT_UNAVAILABLE: Final = 3
DIM: Final = 8
INDEX_VERSION: Final = "test-model/8"
INDEX_FILE: Final = "index.hnsw"
#: Logged when a saved index cannot be used and is rebuilt from the database.
REBUILDING: Final = "derived file unusable; rebuilding it from the database"


def one_error_line(result: subprocess.CompletedProcess[str], *words: str) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    for word in words:
        assert word in errors[0], (word, errors[0])
    return errors[0]


def small_index(path: Path) -> HnswIndex:
    index = HnswIndex.create(path, DIM, INDEX_VERSION)
    vectors = np.random.default_rng(3).random((4, DIM), dtype=np.float32)
    index.add(np.arange(4, dtype=np.int64), vectors)
    return index


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Peer:
    """Chunks ingested and one cycle run: an index saved; copy before changing."""
    root = tmp_path_factory.mktemp("unusable-index")
    peer = Peer(root / "template", "indexed", root / "zeitgeist")
    chunks = write_jsonl(root / "chunks.jsonl", documentation_chunks(["assert", "try"], 4))
    peer.dreamcycle("ingest", str(chunks))
    peer.dreamcycle("run", "--once")
    assert (peer.data_dir / INDEX_FILE).is_file()
    return peer


@pytest.fixture
def peer(template: Peer, tmp_path: Path) -> Peer:
    return template.copy_to(tmp_path / "data")


# ---- saving --------------------------------------------------------------------------------


@pytest.mark.parametrize("in_the_way", [INDEX_FILE, f"{INDEX_FILE}.meta.json"])
def test_a_directory_where_the_index_goes_fails_the_save_and_stays(
    tmp_path: Path, in_the_way: str
) -> None:
    path = tmp_path / INDEX_FILE
    (tmp_path / in_the_way).mkdir()
    (tmp_path / in_the_way / "kept").write_text("someone's")
    with pytest.raises(IndexSaveFailed, match="is a directory"):
        small_index(path).save("stamp")
    assert (tmp_path / in_the_way / "kept").read_text() == "someone's"
    assert not temporary_path(path).exists() and not temporary_path(meta_path(path)).exists()


def test_a_directory_where_the_temporary_file_goes_fails_the_save_and_stays(
    tmp_path: Path,
) -> None:
    path = tmp_path / INDEX_FILE
    temporary_path(path).mkdir()
    with pytest.raises(IndexSaveFailed, match="is a directory"):
        small_index(path).save("stamp")
    assert temporary_path(path).is_dir() and not path.exists()


def test_a_failed_replace_keeps_its_cause_for_the_daemon(tmp_path: Path) -> None:
    written = tmp_path / "written"
    written.write_bytes(b"index")
    (tmp_path / "final").mkdir()
    with pytest.raises(IndexSaveFailed) as raised:
        replace_durably(written, tmp_path / "final")
    assert isinstance(raised.value.__cause__, OSError)
    # A failed save of the daemon's is waited out when the file system refused it.
    refused = IndexSaveFailed("cannot write index")
    refused.__cause__ = PermissionError(errno.EACCES, "Permission denied")
    assert storage_fault(refused) is StorageFault.READ_ONLY
    assert storage_fault(raised.value) is None


# ---- the commands ----------------------------------------------------------------------------


def test_run_and_rebuild_say_an_index_path_is_a_directory(peer: Peer) -> None:
    index = peer.data_dir / INDEX_FILE
    index.unlink()
    index.mkdir()
    before = peer.dump()
    ran = peer.dreamcycle("run", "--once", expect=EXIT_UNAVAILABLE)
    one_error_line(ran, str(index), "is a directory")
    # Unreadable like any damaged index: rebuilt from the database, and the log says why.
    assert REBUILDING in ran.stderr and "reason=corrupt" in ran.stderr, ran.stderr
    rebuilt = peer.dreamcycle("rebuild", expect=EXIT_UNAVAILABLE)
    one_error_line(rebuilt, str(index), "is a directory")
    assert index.is_dir()
    assert peer.dump() == before


def test_a_journal_another_model_wrote_is_refused_by_rebuild(peer: Peer) -> None:
    first = peer.scalar("SELECT min(id) FROM observations WHERE embedding IS NOT NULL")
    with closing(sqlite3.connect(peer.database_path)) as conn:
        conn.execute(
            "UPDATE observations SET index_version = 'another-model/384' WHERE id = ?", (first,)
        )
        conn.commit()
    before = peer.dump()
    ran = peer.dreamcycle("rebuild", expect=EXIT_UNAVAILABLE)
    one_error_line(ran, "another model's vector space", "stored salience is kept")
    assert peer.dump() == before


@needs_file_modes
def test_rebuild_in_a_data_directory_it_cannot_write_is_refused(peer: Peer) -> None:
    holder = apsw.Connection(str(peer.database_path))
    try:
        # An open connection keeps the WAL and its index: the database can still be
        # written, only a new file in the directory cannot.
        holder.execute("SELECT count(*) FROM meta").fetchall()
        before = peer.dump()
        with modes_taken((peer.data_dir, 0o555)):
            result = subprocess.run(
                [*(MODE_OBEYING_PREFIX or []), DREAMCYCLE, "rebuild", *peer.options()],
                capture_output=True,
                text=True,
                env=peer.environment(),
                timeout=CLI_TIMEOUT_S,
                check=False,
            )
    finally:
        holder.close()
    assert result.returncode == EXIT_UNAVAILABLE, result.stderr
    one_error_line(result, str(peer.data_dir), "cannot be written")
    assert peer.dump() == before


def test_a_lock_file_that_cannot_be_opened_is_named(peer: Peer) -> None:
    lock = peer.data_dir / "daemon.lock"
    lock.unlink(missing_ok=True)
    lock.mkdir()  # what can stand in its place, whoever runs the command
    before = peer.dump()
    for verb in ("rebuild", "run"):
        ran = peer.dreamcycle(
            verb, *(("--once",) if verb == "run" else ()), expect=EXIT_UNAVAILABLE
        )
        one_error_line(ran, str(lock), "cannot be opened")
    assert peer.dump() == before
