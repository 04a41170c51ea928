"""Recall steering: a learned key teaches only what a recall its signer published returned.

A compromised but trusted peer once published a `retrieval_key` for a decision no one
made (a random hash), naming a chunk of its choice with the embedding of a query of its
choice: every peer adopted the key and ranked the chunk first for that query. A key is
now accepted only for a decision whose attribution its signer published (applied here
first) or one of this peer's own, and only for a chunk that attribution returned; any
other is refused and counted (`unattributed_key`). A key met before its attribution (read
from a later segment first) waits for it, as long as an outcome would, and is judged when
it comes. Outcomes keep their rules: one for a
decision its signer attributed applies as before (daemon/cycle/authority.py).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest

from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.cycle._awaiting_attribution import AWAITING_REASON
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.recall.retrieve import recall
from dreamcycle.daemon.runtime import Peer
from dreamcycle.zeitgeist.entries import AttributionEntry, OutcomeEntry, RetrievalKeyEntry
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from tests.test_daemon_robustness import (
    entry_status,
    ingested_peer,
    publish_as,
    wall_clock_ms,
)

CHUNKS: Final = 12
#: The query the attacker steers, and how many chunks the attributions name.
QUERY: Final = "how are exceptions raised"
RECALLED: Final = 3
#: How long a key may wait for its decision's attribution here (pulses.outcome_wait_s).
WAIT_S: Final = 600.0


def rejections(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "dreamcycle_entries_rejected_total", {"reason": reason}
    )
    return value or 0.0


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    with ingested_peer(tmp_path, CHUNKS) as opened:
        yield opened


def ranking(peer: Peer) -> list[str]:
    return [hit.content_hash for hit in recall(peer.runtime, QUERY, top_k=CHUNKS).hits]


def key(peer: Peer, decision: str, chunk: str, at: int) -> RetrievalKeyEntry:
    """b's key: `chunk` answers QUERY, learned from `decision`."""
    return RetrievalKeyEntry(
        hlc=at,
        origin="b",
        decision_hash=decision,
        chunk_hash=chunk,
        embedding=peer.embedder.embed_one(QUERY),
        text=QUERY,
        amount=1.0,
    )


def attribution(chunks: list[str], at: int) -> AttributionEntry:
    """A decision of b's that recalled `chunks`."""
    return AttributionEntry(
        hlc=at,
        origin="b",
        decision_hash=secrets.token_hex(32),
        chunk_hashes=tuple(sorted(chunks)),
        decision_text="",
    )


def refused(peer: Peer, entry: RetrievalKeyEntry) -> bool:
    status, reason = entry_status(peer, entry)
    return status == "rejected" and reason is not None and "unattributed_key" in reason


def waiting_keys(peer: Peer) -> int:
    [(count,)] = peer.db.conn.execute("SELECT count(*) FROM keys_awaiting_attribution")
    return int(count)


def test_a_key_for_a_decision_no_one_made_steers_nothing_and_is_refused_after_its_wait(
    tmp_path: Path,
) -> None:
    with ingested_peer(tmp_path, CHUNKS, **{"pulses.outcome_wait_s": WAIT_S}) as peer:
        target = ranking(peer)[-1]
        now = HybridLogicalClock(wall_clock_ms).now()
        steer = key(peer, secrets.token_hex(32), target, now)
        stale = key(peer, secrets.token_hex(32), target, now - hlc_from_ms(int(2 * WAIT_S * 1000)))
        before = rejections("unattributed_key")
        publish_as(tmp_path, "b", [stale, steer])

        run_cycle_blocking(peer)

        # The fresh one waits for its decision's attribution, teaching nothing meanwhile;
        # the one dated past the wait is refused for good, and counted.
        assert entry_status(peer, steer) == ("awaiting", AWAITING_REASON)
        assert refused(peer, stale)
        assert rejections("unattributed_key") == before + 1
        assert waiting_keys(peer) == 1
        assert ranking(peer)[0] != target


@pytest.mark.parametrize("returned", [True, False], ids=["returned", "not-returned"])
def test_a_key_met_before_its_attribution_is_judged_once_the_attribution_comes(
    peer: Peer, tmp_path: Path, returned: bool
) -> None:
    ranked = ranking(peer)
    target = ranked[-1]
    now = HybridLogicalClock(wall_clock_ms).now()
    # The decision's recall returned the key's chunk, or only others.
    decided = attribution([target, *ranked[:2]] if returned else ranked[:RECALLED], now)
    learned = key(peer, decided.decision_hash, target, now + 1)
    publish_as(tmp_path, "b", [learned], seq=2)  # the attribution's segment not read yet

    run_cycle_blocking(peer)
    assert entry_status(peer, learned) == ("awaiting", AWAITING_REASON)
    assert ranking(peer)[0] != target
    before = rejections("unattributed_key")

    publish_as(tmp_path, "b", [decided], seq=1)
    run_cycle_blocking(peer)

    assert entry_status(peer, decided) == ("applied", None)
    assert waiting_keys(peer) == 0
    if returned:
        assert entry_status(peer, learned) == ("applied", None)
        assert ranking(peer)[0] == target
    else:
        assert refused(peer, learned)
        assert rejections("unattributed_key") == before + 1
        assert ranking(peer)[0] != target


def test_a_key_for_a_decision_its_signer_attributed_teaches_a_chunk_it_returned(
    peer: Peer, tmp_path: Path
) -> None:
    ranked = ranking(peer)
    target = ranked[-1]
    now = HybridLogicalClock(wall_clock_ms).now()
    decided = attribution([target, *ranked[:2]], now)
    learned = key(peer, decided.decision_hash, target, now + 1)
    publish_as(tmp_path, "b", [decided, learned])

    run_cycle_blocking(peer)

    assert entry_status(peer, decided) == ("applied", None)
    assert entry_status(peer, learned) == ("applied", None)
    assert ranking(peer)[0] == target


def test_a_key_stamped_before_its_attribution_in_the_same_batch_is_accepted(
    peer: Peer, tmp_path: Path
) -> None:
    # A key carries its outcome's HLC, which an observer whose clock lags may stamp before
    # the attribution: the batch's attributions are applied first.
    ranked = ranking(peer)
    target = ranked[-1]
    now = HybridLogicalClock(wall_clock_ms).now()
    decided = attribution([target], now + 1)
    learned = key(peer, decided.decision_hash, target, now)
    publish_as(tmp_path, "b", [learned, decided])

    run_cycle_blocking(peer)

    assert entry_status(peer, learned) == ("applied", None)
    assert ranking(peer)[0] == target


def test_a_key_naming_a_chunk_its_decision_did_not_return_is_refused(
    peer: Peer, tmp_path: Path
) -> None:
    ranked = ranking(peer)
    target = ranked[-1]
    now = HybridLogicalClock(wall_clock_ms).now()
    decided = attribution(ranked[:RECALLED], now)
    steer = key(peer, decided.decision_hash, target, now + 1)
    before = rejections("unattributed_key")
    publish_as(tmp_path, "b", [decided, steer])

    run_cycle_blocking(peer)

    assert entry_status(peer, decided) == ("applied", None)
    assert refused(peer, steer)
    assert rejections("unattributed_key") == before + 1
    assert ranking(peer)[0] != target


def test_a_key_for_another_peers_decision_is_refused_even_from_an_observer(
    peer: Peer, tmp_path: Path
) -> None:
    ranked = ranking(peer)
    target = ranked[-1]
    now = HybridLogicalClock(wall_clock_ms).now()
    decided = attribution([target], now)
    publish_as(tmp_path, "b", [decided])
    steer = RetrievalKeyEntry(
        hlc=now + 1,
        origin="o",
        decision_hash=decided.decision_hash,
        chunk_hash=target,
        embedding=peer.embedder.embed_one(QUERY),
        text=QUERY,
        amount=1.0,
    )
    publish_as(tmp_path, "o", [steer], roles=("observer",))

    run_cycle_blocking(peer)

    assert refused(peer, steer)
    assert ranking(peer)[0] != target


def test_an_outcome_for_a_decision_its_signer_attributed_applies_as_before(
    peer: Peer, tmp_path: Path
) -> None:
    now = HybridLogicalClock(wall_clock_ms).now()
    decided = attribution(ranking(peer)[:RECALLED], now)
    judged = OutcomeEntry(
        hlc=now + 1,
        origin="b",
        decision_hash=decided.decision_hash,
        reward=1.0,
        observer_peer="b",
        reason="deploy held",
        cited=decided.chunk_hashes[:1],
    )
    publish_as(tmp_path, "b", [decided, judged])

    run_cycle_blocking(peer)

    assert entry_status(peer, judged) == ("applied", None)
    recorded = peer.db.conn.execute(
        "SELECT outcome_id FROM outcomes WHERE decision_hash = ?", (decided.decision_hash,)
    ).fetchall()
    assert recorded == [(judged.id,)]
