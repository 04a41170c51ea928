"""scripts/mesh_check.py's comparison of the peers' salience, on replicas held in memory."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scripts.mesh_check import agreement


@dataclass
class StoredReplica:
    peer_id: str
    stored: dict[str, float]

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        raise AssertionError("agreement reads salience only")

    def salience(self) -> dict[str, float]:
        return dict(self.stored)


def test_agreement_compares_only_the_chunks_every_peer_holds() -> None:
    first = StoredReplica("p0", {"a": 0.5, "b": 0.25, "only-here": 0.1})
    second = StoredReplica("p1", {"a": 0.5, "b": 0.25})
    agreed = agreement([first, second])
    assert (agreed.common, agreed.identical, agreed.max_difference) == (2, 2, 0.0)
    assert agreed.differing == {"p0": 0, "p1": 0}


def test_agreement_counts_a_difference_of_one_bit() -> None:
    nudged = 0.5 + 2**-53
    peers = [
        StoredReplica("p0", {"a": 0.5, "b": 0.25}),
        StoredReplica("p1", {"a": 0.5, "b": 0.25}),
        StoredReplica("p2", {"a": nudged, "b": 0.25}),
    ]
    agreed = agreement(peers)
    assert agreed.identical == 1
    assert agreed.differing == {"p0": 0, "p1": 0, "p2": 1}
    assert agreed.max_difference == nudged - 0.5
