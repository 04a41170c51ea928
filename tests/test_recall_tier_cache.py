"""What recall reads per tier (the cold tier's vectors) is read again when a tier changes,
not after every save: re-reading it made the first recall after a save read every cold
embedding (docs/benchmarks-history.md, runs S)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dreamcycle.daemon.clock import ManualClock
from dreamcycle.daemon.config import load_config
from dreamcycle.daemon.recall.state import recall_state
from dreamcycle.daemon.runtime import Runtime
from dreamcycle.store import tiers
from dreamcycle.store.database import NewObservation

NOW_MS = 1_700_000_000_000


def _add(rt: Runtime, text: str) -> int:
    with rt.db.transaction():
        rowid = rt.db.add_observations([NewObservation(content=text)], now_ms=NOW_MS)[0].rowid
        vector = np.random.default_rng(rowid).standard_normal((1, rt.embedder.dim))
        rt.db.set_embeddings(
            [rowid],
            (vector / np.linalg.norm(vector)).astype(np.float32),
            model_id=rt.embedder.model_id,
            index_version=rt.embedder.index_version,
        )
    return rowid


def test_cold_vectors_are_read_again_when_the_tiers_change_and_not_after_a_save(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = load_config(
        None,
        environ={},
        overrides={"peer.data_dir": str(tmp_path / "data"), "peer.id": "p1", "metrics.listen": ""},
    )
    rt = Runtime.open(config, clock=ManualClock(NOW_MS))
    reads: list[int] = []
    read_cold = tiers.cold_vectors

    def counted(*args: object, **kwargs: object) -> object:
        reads.append(1)
        return read_cold(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(tiers, "cold_vectors", counted)
    try:
        first, second = _add(rt, "the ferry leaves at nine"), _add(rt, "winter tyres")
        with rt.db.transaction():
            tiers.move_to_cold(rt.db, [first], reason="test", now_ms=NOW_MS)
        labels, _ = recall_state(rt).cold_search.cold_vectors(rt, rt.db.change_stamp())
        assert labels.tolist() == [first] and len(reads) == 1
        _add(rt, "saved since: a live chunk, the cold tier is as it was")
        labels, _ = recall_state(rt).cold_search.cold_vectors(rt, rt.db.change_stamp())
        assert labels.tolist() == [first] and len(reads) == 1
        with rt.db.transaction():
            tiers.move_to_cold(rt.db, [second], reason="test", now_ms=NOW_MS)
        labels, _ = recall_state(rt).cold_search.cold_vectors(rt, rt.db.change_stamp())
        assert labels.tolist() == [first, second] and len(reads) == 2
        with rt.db.transaction():
            rt.db.conn.execute(
                "UPDATE observations SET deleted_at = '2027-01-01' WHERE id = ?", (first,)
            )
        labels, _ = recall_state(rt).cold_search.cold_vectors(rt, rt.db.change_stamp())
        assert labels.tolist() == [second] and len(reads) == 3
    finally:
        rt.close()
