"""What a compromised but trusted peer can no longer do, on the daemon's real phases.

Peer a runs in-process on a real database, index, embedding model and directory
zeitgeist; the attacker writes segments signed with a key a trusts for its peer id
(tests/test_daemon_robustness.py: publish_as), as the issue tracker's reproductions did:

- pulses whose entries carry the present HLC but whose own time lies a year ahead, each
  in a window of its own, once spent no window's budget and never expired; they are now
  refused (`from_the_future`), and the windows charged lie within the allowed skew;
- an `assert` carrying a pin from a key not marked operator once planted a chunk that no
  other peer could tombstone; the chunk is now adopted unpinned, the pin refused and
  counted (`not_operator`), while an operator's pin and this peer's own still hold;
- pulses refused (past the budget, or naming another origin than their signer) cost no
  search of the index, though a batch's hops are asked ahead of its pulses.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, Final

import pytest

from dreamcycle.daemon.cycle import run_cycle_blocking
from dreamcycle.daemon.defaults import PULSE_BUDGET_WINDOW_S
from dreamcycle.daemon.intake.ingest import ingest
from dreamcycle.daemon.observe import metrics
from dreamcycle.daemon.runtime import Peer
from dreamcycle.pulses.pulse import PulseKind, SalientPulse
from dreamcycle.store.database import NewObservation
from dreamcycle.store.hashing import content_hash
from dreamcycle.zeitgeist.entries import (
    ENTRY_TYPES,
    RECONSOLIDATE_FIELDS,
    AssertEntry,
    PulseEntry,
    TombstoneEntry,
)
from dreamcycle.zeitgeist.hlc import HybridLogicalClock, hlc_from_ms
from tests.test_daemon_robustness import (
    entry_status,
    ingested_peer,
    paragraphs,
    publish_as,
    wall_clock_ms,
)

CHUNKS: Final = 12
#: Pulses of the defaults below may each move 0.3 * (0.9 + 0.81) = 0.513 salience at
#: most: a budget of 2 admits three of them per window.
BUDGET: Final = 2.0
PER_WINDOW: Final = 3
WINDOW_MS: Final = int(PULSE_BUDGET_WINDOW_S * 1000)
YEAR_MS: Final = 365 * 86_400_000
#: How many pulses the attacker sends from the future: several windows' budget.
FUTURE_PULSES: Final = 5 * PER_WINDOW


def rejections(reason: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "dreamcycle_entries_rejected_total", {"reason": reason}
    )
    return value or 0.0


def scalar(peer: Peer, sql: str) -> Any:
    row = peer.db.conn.execute(sql).fetchone()
    assert row is not None, sql
    return row[0]


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[Peer]:
    with ingested_peer(tmp_path, CHUNKS, **{"pulses.origin_budget": BUDGET}) as peer:
        yield peer


@pytest.fixture
def adopting(tmp_path: Path) -> Iterator[Peer]:
    with ingested_peer(tmp_path, CHUNKS, **{"zeitgeist.adopt_remote_chunks": True}) as peer:
        yield peer


# ---- pulses dated beyond the allowed skew ----------------------------------------------


def decay(peer: Peer, *, entry_hlc: int, pulse_ms: int, n: int) -> PulseEntry:
    """A Decay pulse of b's whose own time is `pulse_ms`, in an entry stamped `entry_hlc`."""
    pulse = SalientPulse(
        seed_embedding=peer.embedder.embed_one("exceptions"),
        kind=PulseKind.DECAY,
        strength=0.3,
        sigma=0.3,
        max_hops=2,
        k=3,
        decay_per_hop=0.3,
        ts=hlc_from_ms(pulse_ms) + n,
        origin_peer="b",
        reason=f"pulse {n}",
        ttl_s=7 * 24 * 3600.0,
        index_version=peer.embedder.index_version,
    ).with_id()
    return PulseEntry(hlc=entry_hlc + n, origin="b", pulse=pulse)


def pulse_status(peer: Peer, entry: PulseEntry) -> tuple[str, str | None]:
    row = peer.db.conn.execute(
        "SELECT status, reason FROM applied_pulses WHERE pulse_id = ?", (entry.pulse.pulse_id,)
    ).fetchone()
    assert row is not None, f"pulse {entry.pulse.pulse_id} was never recorded"
    return str(row[0]), row[1]


def test_pulses_dated_a_year_ahead_are_refused_not_charged_to_windows_of_their_own(
    budgeted: Peer, tmp_path: Path
) -> None:
    peer = budgeted
    now_ms = wall_clock_ms()
    entry_hlc = HybridLogicalClock(wall_clock_ms).now()
    # Each in a window of its own a year ahead: no window would ever fill.
    future = [
        decay(peer, entry_hlc=entry_hlc, pulse_ms=now_ms + YEAR_MS + n * WINDOW_MS, n=n)
        for n in range(FUTURE_PULSES)
    ]
    salience_before = peer.db.conn.execute("SELECT id, salience FROM observations").fetchall()
    refused_before = rejections("from_the_future")
    publish_as(tmp_path, "b", list(future))

    st = run_cycle_blocking(peer)

    for entry in future:
        for status, reason in (entry_status(peer, entry), pulse_status(peer, entry)):
            assert status == "rejected" and reason is not None, (status, reason)
            assert reason.startswith("from_the_future: pulse time"), reason
    assert rejections("from_the_future") == refused_before + FUTURE_PULSES
    assert st.stats["salience_pulse_propagate"]["from_the_future"] == FUTURE_PULSES
    # Nothing moved, and no budget window lies in the future.
    assert peer.db.conn.execute("SELECT id, salience FROM observations").fetchall() == (
        salience_before
    )
    assert scalar(peer, "SELECT count(*) FROM origin_budget_windows") == 0


def test_refused_pulses_cost_no_search_of_the_index(
    budgeted: Peer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pulses naming another origin than their signer, and pulses past the budget, are
    refused before any of their neighbours is searched (a batch's hops are asked ahead)."""
    peer = budgeted
    now_ms = wall_clock_ms()
    entry_hlc = HybridLogicalClock(wall_clock_ms).now()
    within = [decay(peer, entry_hlc=entry_hlc, pulse_ms=now_ms, n=n) for n in range(PER_WINDOW)]
    over, claiming = [], []
    for n in range(PER_WINDOW, 5 * PER_WINDOW):
        entry = decay(peer, entry_hlc=entry_hlc, pulse_ms=now_ms, n=n)
        # Each seeded apart: a search asked for it would show as a row of its own.
        seed = peer.embedder.embed_one(f"seed {n} of a pulse to refuse")
        if n < 3 * PER_WINDOW:
            over.append(replace(entry, pulse=replace(entry.pulse, seed_embedding=seed).with_id()))
        else:
            pulse = replace(entry.pulse, seed_embedding=seed, origin_peer="c").with_id()
            claiming.append(replace(entry, pulse=pulse))
    publish_as(tmp_path, "b", [*within, *over, *claiming])
    asked: list[int] = []
    search = peer.index.knn_many

    def counted(vectors: Any, k: int, **options: Any) -> Any:
        asked.append(len(vectors))
        return search(vectors, k, **options)

    monkeypatch.setattr(peer.index, "knn_many", counted)

    run_cycle_blocking(peer)

    assert [pulse_status(peer, e)[0] for e in within] == ["applied"] * PER_WINDOW
    assert {pulse_status(peer, e)[0] for e in [*over, *claiming]} == {"rejected"}
    # The admitted pulses' one seed, asked once, then at most the k = 3 chunks it reaches.
    assert asked[0] == 1
    assert sum(asked[1:]) <= 3


def test_within_the_skew_a_peer_spends_at_most_its_budget_per_window_of_its_time(
    budgeted: Peer, tmp_path: Path
) -> None:
    """Dated ahead within the allowed skew, pulses are charged to their own windows, each
    admitting its budget: ahead of the present by no more than the skew."""
    peer = budgeted
    now_ms = wall_clock_ms()
    skew_ms = peer.zeitgeist.max_future_ms
    entry_hlc = HybridLogicalClock(wall_clock_ms).now()
    windows = 4
    # Spread over the last windows before the horizon, twice each window's budget in each.
    first_ms = now_ms + skew_ms - windows * WINDOW_MS
    within = [
        decay(peer, entry_hlc=entry_hlc, pulse_ms=first_ms + w * WINDOW_MS, n=w * 100 + i)
        for w in range(windows)
        for i in range(2 * PER_WINDOW)
    ]
    beyond = decay(peer, entry_hlc=entry_hlc, pulse_ms=now_ms + skew_ms + WINDOW_MS, n=999)
    publish_as(tmp_path, "b", [*within, beyond])

    run_cycle_blocking(peer)

    statuses = [pulse_status(peer, entry) for entry in within]
    assert sum(status == "applied" for status, _ in statuses) == windows * PER_WINDOW
    assert all(
        status == "applied" or (reason or "").startswith("over_budget")
        for status, reason in statuses
    ), statuses
    status, reason = pulse_status(peer, beyond)
    assert status == "rejected" and (reason or "").startswith("from_the_future"), reason
    latest = scalar(peer, "SELECT max(window_start_ms) FROM origin_budget_windows")
    assert latest <= now_ms + skew_ms


# ---- pins planted by an assert ---------------------------------------------------------


def asserted(peer: Peer, origin: str, text: str, pin_floor: float, hlc: int) -> AssertEntry:
    """An honest-looking assert of `text` (untitled: its embedding is its content's)."""
    return AssertEntry(
        hlc=hlc,
        origin=origin,
        content_hash=content_hash(text),
        title="",
        content=text,
        obs_type="manual",
        project=None,
        scope="project",
        topic_key=None,
        session_id=None,
        tool_name=None,
        chunk_kind="note",
        pin_floor=pin_floor,
        embedding=peer.embedder.embed_one(text),
        model_id=peer.embedder.model_id,
        index_version=peer.embedder.index_version,
    )


def tombstone(origin: str, text: str, hlc: int) -> TombstoneEntry:
    return TombstoneEntry(
        hlc=hlc,
        origin=origin,
        content_hash=content_hash(text),
        reason="retracted",
        collectable_after_ms=None,
        forget_pulse=None,
    )


def test_a_pin_asserted_without_operator_authority_is_not_adopted(
    adopting: Peer, tmp_path: Path
) -> None:
    peer = adopting
    planted_text, blessed_text = paragraphs(CHUNKS + 2)[CHUNKS:]
    now = HybridLogicalClock(wall_clock_ms).now()
    planted = asserted(peer, "b", planted_text, 1.0, now)
    blessed = asserted(peer, "op", blessed_text, 0.6, now + 1)
    refused_before = rejections("not_operator")
    publish_as(tmp_path, "b", [planted])
    publish_as(tmp_path, "op", [blessed], roles=("operator",))

    run_cycle_blocking(peer)

    status, reason = entry_status(peer, planted)
    assert status == "applied" and reason is not None, (status, reason)
    assert reason.startswith("authority: not_operator") and "pin_floor 1" in reason, reason
    assert rejections("not_operator") == refused_before + 1
    held = peer.db.observation_by_hash(content_hash(planted_text))
    assert held is not None and held.pin_floor == 0.0 and held.deletion_policy == "auto_prune"
    assert held.salience < 1.0
    assert entry_status(peer, blessed) == ("applied", None)
    pinned = peer.db.observation_by_hash(content_hash(blessed_text))
    assert pinned is not None and pinned.pin_floor == 0.6

    # Any other trusted peer may now retract the planted chunk; the operator's pin holds.
    later = HybridLogicalClock(wall_clock_ms).now()
    retract_planted = tombstone("c", planted_text, later)
    retract_pinned = tombstone("c", blessed_text, later + 1)
    publish_as(tmp_path, "c", [retract_planted, retract_pinned])

    run_cycle_blocking(peer)

    assert entry_status(peer, retract_planted) == ("applied", None)
    gone = peer.db.observation_by_hash(content_hash(planted_text))
    assert gone is not None and gone.deleted_at is not None
    status, reason = entry_status(peer, retract_pinned)
    assert status == "rejected" and "not_operator" in (reason or ""), (status, reason)
    kept = peer.db.observation_by_hash(content_hash(blessed_text))
    assert kept is not None and kept.deleted_at is None and kept.pin_floor == 0.6


def test_this_peers_own_pins_are_kept(adopting: Peer) -> None:
    peer = adopting
    (text,) = paragraphs(CHUNKS + 1)[CHUNKS:]
    refused_before = rejections("not_operator")
    ingest(peer.runtime, [[NewObservation(content=text, pin_floor=0.7)]])

    run_cycle_blocking(peer)  # admits it and queues its assert
    run_cycle_blocking(peer)  # applies and publishes that assert

    assert scalar(peer, "SELECT count(*) FROM outbox WHERE kind = 'assert'") > CHUNKS
    held = peer.db.observation_by_hash(content_hash(text))
    assert held is not None and held.pin_floor == 0.7
    assert rejections("not_operator") == refused_before


def test_no_entry_carries_a_deletion_policy() -> None:
    """A `never` policy would refuse other peers' tombstones like a pin: no entry may set
    one, so an adopted chunk always has the default (asserted above)."""
    for kind in ENTRY_TYPES.values():
        assert "deletion_policy" not in kind.RULES, kind.KIND
    assert "deletion_policy" not in RECONSOLIDATE_FIELDS
