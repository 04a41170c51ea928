"""The index is derived: damaged, foreign, missing or stale, it is rebuilt (and counted).

hnswlib trusts its input, so a damaged body that reached it would crash the process
(SIGSEGV) in the first query, or answer from the wrong neighbours. The daemon and
`recall --direct` run as real processes on a damaged file; the other damages are shown
on a real Runtime, where the rebuild counter can be read by reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Final

import numpy as np
import pytest

from dreamcycle.daemon import defaults
from dreamcycle.daemon.clock import ManualClock, SystemClock
from dreamcycle.daemon.config import Config, load_config
from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import INDEX_FILE_LABEL, INDEX_IDENTITY_META_KEY, Runtime, save_index
from dreamcycle.daemon.service.loop import serve
from dreamcycle.store.database import Database, NewObservation
from dreamcycle.store.embedder import Embedder
from dreamcycle.store.index import HnswIndex, Unusable
from dreamcycle.store.index_file import meta_path
from tests.daemon_helpers import Peer, documentation_chunks

TOPICS: Final = ("typesmapping", "typesseq")
CHUNK_COUNT: Final = 24
PEER_ID: Final = "alpha"
QUERIES: Final = (
    "remove a key from a dictionary",
    "sort a list in place",
    "the slice of a sequence",
)
#: Bytes flipped in the body of the index (after hnswlib's header): enough that hnswlib,
#: trusting them, crashes in its first query.
FLIPPED_BYTES: Final = 200
HEADER_BYTES: Final = 96
SEED: Final = 20260521
#: Nearest neighbours compared with an exact search.
NEIGHBOURS: Final = 5
REBUILDS_METRIC: Final = "dreamcycle_derived_file_rebuilds_total"
UNRELATED_CHUNK: Final = "The staging cluster rotates its TLS certificates every ninety days."

Answer = list[tuple[str, float]]


def _config(data_dir: Path) -> Config:
    return load_config(
        None,
        environ={},
        overrides={
            "peer.data_dir": str(data_dir),
            "peer.id": PEER_ID,
            "metrics.listen": "",
            "zeitgeist.dir": str(data_dir.parent / "zeitgeist"),
        },
    )


def _runtime(data_dir: Path, embedder: Embedder) -> Runtime:
    config = _config(data_dir)
    return Runtime(config, Database(config.database_path), embedder, SystemClock())


def _answers(rt: Runtime, index: HnswIndex | None = None) -> list[Answer]:
    return [
        [(hit.content_hash, hit.score) for hit in recall(rt, query, record=False, index=index).hits]
        for query in QUERIES
    ]


def _rebuilds(reason: Unusable) -> float:
    labels = {"file": INDEX_FILE_LABEL, "reason": reason.value}
    return metrics.REGISTRY.get_sample_value(REBUILDS_METRIC, labels) or 0.0


def _all_rebuilds() -> dict[Unusable, float]:
    return {reason: _rebuilds(reason) for reason in Unusable}


def _flip_body(path: Path) -> None:
    data = bytearray(path.read_bytes())
    rng = np.random.default_rng(SEED)
    for position in rng.integers(HEADER_BYTES, len(data), FLIPPED_BYTES).tolist():
        data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def _assert_index_is_the_databases(rt: Runtime, index: HnswIndex) -> None:
    """The live labels are the database's live chunks, and their neighbours the exact ones."""
    labels, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
    assert sorted(index.labels() - index.deleted_labels()) == labels.tolist()
    found, _ = index.knn_many(vectors, NEIGHBOURS)
    exact = labels[np.argsort(-(vectors @ vectors.T), axis=1, kind="stable")[:, :NEIGHBOURS]]
    assert found.tolist() == exact.tolist()
    assert rt.db.get_meta(INDEX_IDENTITY_META_KEY) == index.identity


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    config = Config()
    return Embedder(config.embedding.model, batch_size=config.embedding.batch_size)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Path:
    """A data directory after one dream cycle: chunks admitted, the index saved and sealed."""
    root = tmp_path_factory.mktemp("integrity")
    data_dir = root / "template"
    chunks = documentation_chunks(TOPICS, CHUNK_COUNT)
    rt = _runtime(data_dir, embedder)
    try:
        observations = [
            NewObservation(
                content=chunk["content"], title=chunk["title"], topic_key=chunk["topic_key"]
            )
            for chunk in chunks
        ]
        ingest(rt, [observations])
        rt.lock_data_dir()
        assert serve(rt, max_cycles=1) == 0
    finally:
        rt.close()
    return data_dir


@pytest.fixture(scope="module")
def clean_answers(
    template: Path, embedder: Embedder, tmp_path_factory: pytest.TempPathFactory
) -> list[Answer]:
    data_dir = tmp_path_factory.mktemp("clean") / "data"
    shutil.copytree(template, data_dir)
    rt = _runtime(data_dir, embedder)
    try:
        index, reason = rt.open_index()
        assert reason is None, f"a sound index was rebuilt: {reason}"
        return _answers(rt, index)
    finally:
        rt.close()


def _json_recall(peer: Peer, query: str) -> subprocess.CompletedProcess[str]:
    return peer.dreamcycle("recall", "--direct", "--no-record", "--json", query)


def _answer_of(result: subprocess.CompletedProcess[str]) -> Answer:
    return [(hit["content_hash"], hit["score"]) for hit in json.loads(result.stdout)["hits"]]


def test_a_damaged_body_never_reaches_hnswlib_and_the_daemon_rebuilds_it(
    template: Path, clean_answers: list[Answer], tmp_path: Path
) -> None:
    peer = Peer(tmp_path / "data", PEER_ID, tmp_path / "zeitgeist")
    shutil.copytree(template, peer.data_dir)
    index_path = peer.data_dir / defaults.INDEX_FILE
    _flip_body(index_path)

    # A reader never rebuilds the daemon's file: it searches the stored vectors instead.
    before = _json_recall(peer, QUERIES[0])
    assert "reason=checksum" in before.stderr
    assert _answer_of(before) == clean_answers[0]
    damaged = index_path.read_bytes()

    run = peer.dreamcycle("run", "--once")
    assert "derived file unusable; rebuilding it from the database" in run.stderr
    assert "file=index reason=checksum" in run.stderr
    assert index_path.read_bytes() != damaged
    recorded = peer.scalar("SELECT value FROM meta WHERE key = ?", (INDEX_IDENTITY_META_KEY,))
    assert json.loads(meta_path(index_path).read_text())["identity"] == recorded

    after = _json_recall(peer, QUERIES[0])
    assert "derived file unusable" not in after.stderr
    assert _answer_of(after) == clean_answers[0]


def _truncate(rt: Runtime) -> None:
    path = rt.config.index_path
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _flip(rt: Runtime) -> None:
    _flip_body(rt.config.index_path)


def _another_peers_index(rt: Runtime) -> None:
    """A sound index of other chunks, claiming the database's own stamp."""
    labels, vectors, _ = rt.db.embeddings(rt.embedder.index_version, rt.embedder.dim)
    other = HnswIndex.create(rt.config.index_path, rt.embedder.dim, rt.embedder.index_version)
    other.add(labels[::2], vectors[::2])
    other.save(rt.db.change_stamp())


def _delete(rt: Runtime) -> None:
    rt.config.index_path.unlink()


def _unsealed(rt: Runtime) -> None:
    """The sidecar an older version wrote: no size, checksum or identity."""
    sidecar = meta_path(rt.config.index_path)
    fields = json.loads(sidecar.read_text())
    for sealed in ("size", "checksum", "identity"):
        del fields[sealed]
    sidecar.write_text(json.dumps({**fields, "format": 1}))


def _ingest_unrelated(rt: Runtime) -> None:
    ingest(rt, [[NewObservation(content=UNRELATED_CHUNK)]])


def _older_save(rt: Runtime) -> None:
    """The files of a save the database has since moved past (a backup put back)."""
    path, sidecar = rt.config.index_path, meta_path(rt.config.index_path)
    older = (path.read_bytes(), sidecar.read_bytes())
    index, _ = rt.open_index()
    _ingest_unrelated(rt)
    save_index(rt.db, index)
    path.write_bytes(older[0])
    sidecar.write_bytes(older[1])


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (_truncate, Unusable.SIZE),
        (_flip, Unusable.CHECKSUM),
        (_another_peers_index, Unusable.IDENTITY),
        (_delete, Unusable.MISSING),
        (_unsealed, Unusable.NO_CHECKSUM),
        (_older_save, Unusable.IDENTITY),
        (_ingest_unrelated, Unusable.STALE),
    ],
    ids=["truncated", "flipped", "another-peer", "deleted", "older-version", "older-save", "stale"],
)
def test_an_unusable_index_is_rebuilt_once_and_counted_by_reason(
    template: Path,
    clean_answers: list[Answer],
    embedder: Embedder,
    tmp_path: Path,
    damage: Callable[[Runtime], None],
    reason: Unusable,
) -> None:
    shutil.copytree(template, tmp_path / "data")
    rt = _runtime(tmp_path / "data", embedder)
    try:
        damage(rt)
        counted = _all_rebuilds()
        assert rt.saved_index(rt.db.change_stamp()) is None

        index, why = rt.open_index()

        assert why is not None
        assert _all_rebuilds() == {**counted, reason: counted[reason] + 1}
        _assert_index_is_the_databases(rt, index)
        assert _answers(rt, index) == clean_answers
        again, why_again = rt.open_index()
        assert why_again is None
        assert again.identity == index.identity
        assert _all_rebuilds()[reason] == counted[reason] + 1
    finally:
        rt.close()


def test_the_first_start_builds_the_index_without_a_warning(
    template: Path, embedder: Embedder, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    shutil.copytree(template, tmp_path / "data")
    rt = _runtime(tmp_path / "data", embedder)
    try:
        rt.config.index_path.unlink()
        meta_path(rt.config.index_path).unlink()
        with rt.db.transaction():
            rt.db.conn.execute("DELETE FROM meta WHERE key = ?", (INDEX_IDENTITY_META_KEY,))
        counted = _all_rebuilds()

        index, why = rt.open_index()

        assert why == "missing"
        assert _all_rebuilds() == counted
        assert "derived file unusable" not in caplog.text
        _assert_index_is_the_databases(rt, index)
    finally:
        rt.close()


def test_an_unchanged_index_is_not_written_again_and_a_changed_one_is(
    template: Path, tmp_path: Path, embedder: Embedder
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    rt = _runtime(data_dir, embedder)
    try:
        index, rebuilt = rt.open_index()
        assert rebuilt is None
        path = rt.config.index_path
        written = (path.stat().st_mtime_ns, rt.db.get_meta(INDEX_IDENTITY_META_KEY))
        assert index.is_saved_at(rt.db.change_stamp())
        save_index(rt.db, index)
        assert (path.stat().st_mtime_ns, rt.db.get_meta(INDEX_IDENTITY_META_KEY)) == written
        # A tombstoned chunk leaves the index: the next save writes it, sealed anew.
        label = min(index.labels() - index.deleted_labels())
        index.mark_deleted(np.array([label], dtype=np.int64))
        assert not index.is_saved_at(rt.db.change_stamp())
        save_index(rt.db, index)
        assert rt.db.get_meta(INDEX_IDENTITY_META_KEY) not in (None, written[1])
        assert index.is_saved_at(rt.db.change_stamp())
    finally:
        rt.close()


def test_the_daemon_writes_a_changed_index_at_most_once_per_save_interval(
    template: Path, tmp_path: Path, embedder: Embedder
) -> None:
    data_dir = tmp_path / "data"
    shutil.copytree(template, data_dir)
    config = _config(data_dir)
    config.index.save_interval_s = 300.0
    clock = ManualClock(1_900_000_000_000)
    rt = Runtime(config, Database(config.database_path), embedder, clock)
    try:
        peer = rt.open_peer()

        def admit_one(text: str) -> dict[str, object]:
            ingest(rt, [[NewObservation(content=text)]])
            return run_cycle_blocking(peer).stats["promote"]

        def written() -> tuple[int, str | None]:
            return config.index_path.stat().st_mtime_ns, rt.db.get_meta(INDEX_IDENTITY_META_KEY)

        assert admit_one(UNRELATED_CHUNK)["index_saved"] is True  # the first time: at once
        first = written()
        clock.advance(60_000)
        assert admit_one("The build cache is pruned every Sunday night.")["index_saved"] is False
        assert written() == first
        # Not written, so a process starting now would rebuild: the stamp moved on.
        assert not peer.index.is_saved_at(rt.db.change_stamp())
        clock.advance(300_000)
        assert admit_one("Release tags are signed with the team's key.")["index_saved"] is True
        assert written() != first and peer.index.is_saved_at(rt.db.change_stamp())
        peer.close()
    finally:
        rt.close()
