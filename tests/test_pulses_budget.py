"""Admission within an origin's budget is a function of its pulse sequence alone.

However the same pulses are split into batches (cycles), carrying each window's state from
one batch to the next admits the same pulses: the longest prefix whose bounds fit, in
whole units so that no grouping of the sums moves the edge. The window's state is kept in
the database (migration 0010) and folded from the per-pulse charges 0009 kept.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import apsw
from hypothesis import given, settings
from hypothesis import strategies as st

from dreamcycle.pulses.budget import (
    BudgetVerdict,
    WindowState,
    admit_within_budget,
    cost_units,
    to_units,
)
from dreamcycle.pulses.constants import (
    OUTCOME_DECAY_PER_HOP,
    OUTCOME_K,
    OUTCOME_MAX_HOPS,
    OUTCOME_SIGMA,
)
from dreamcycle.pulses.pulse import SalientPulse
from dreamcycle.store import budget as stored
from dreamcycle.store.database import Database
from tests.test_pulses_pulse import make_pulse

MIGRATIONS = Path(__file__).parent.parent / "migrations"
WINDOW_MS = 1_750_000_020_000


def pulse(origin: str, strength: float, nonce: int) -> SalientPulse:
    return make_pulse(
        strength=strength,
        sigma=OUTCOME_SIGMA,
        k=OUTCOME_K,
        max_hops=OUTCOME_MAX_HOPS,
        decay_per_hop=OUTCOME_DECAY_PER_HOP,
        origin_peer=origin,
        ts=nonce,
    )


def in_batches(
    pulses: Sequence[SalientPulse], cuts: Sequence[int], budget: float
) -> tuple[list[str], dict[str, WindowState]]:
    """Admitted pulse ids when `pulses` arrive in the batches `cuts` marks, each batch
    starting from the windows the one before left."""
    admitted: list[str] = []
    windows: dict[str, WindowState] = {}
    bounds = [0, *sorted(set(cuts)), len(pulses)]
    for start, end in itertools.pairwise(bounds):
        verdict = admit_within_budget(pulses[start:end], budget, windows=windows)
        admitted += [p.pulse_id for p in verdict.admitted]
        windows = verdict.windows
    return admitted, windows


def longest_fitting_prefix(pulses: Sequence[SalientPulse], budget: float) -> set[str]:
    """Per origin, the pulses before the first whose cost would go over (the rule, by hand)."""
    admitted: set[str] = set()
    spent: dict[str, int] = {}
    closed: set[str] = set()
    for p in pulses:
        cost = cost_units(p)
        if p.origin_peer in closed or cost is None:
            closed.add(p.origin_peer)
            continue
        if spent.get(p.origin_peer, 0) + cost > to_units(budget):
            closed.add(p.origin_peer)
            continue
        spent[p.origin_peer] = spent.get(p.origin_peer, 0) + cost
        admitted.add(p.pulse_id)
    return admitted


@given(
    st.lists(st.tuples(st.sampled_from("ab"), st.floats(0.0, 1.0)), min_size=1, max_size=30),
    st.lists(st.integers(0, 30), max_size=6),
    st.floats(0.5, 8.0),
)
@settings(max_examples=150, deadline=None)
def test_any_split_into_batches_admits_the_same_longest_prefix(
    drawn: list[tuple[str, float]], cuts: list[int], budget: float
) -> None:
    pulses = [pulse(origin, strength, n) for n, (origin, strength) in enumerate(drawn)]
    whole, whole_windows = in_batches(pulses, [], budget)
    split, split_windows = in_batches(pulses, [c for c in cuts if c < len(pulses)], budget)
    one_by_one, _ = in_batches(pulses, list(range(1, len(pulses))), budget)
    assert whole == split == one_by_one
    assert set(whole) == longest_fitting_prefix(pulses, budget)
    assert whole_windows == split_windows


def test_a_closed_window_refuses_a_later_batch_however_small_its_pulses() -> None:
    large = [pulse("a", 1.0, n) for n in range(3)]  # 1.71 each
    first = admit_within_budget(large, 4.0)
    assert [p.pulse_id for p in first.admitted] == [large[0].pulse_id, large[1].pulse_id]
    assert first.windows["a"].closed_by == large[2].pulse_id
    later = admit_within_budget(
        [pulse("a", 0.001, 9), pulse("b", 0.001, 9)], 4.0, windows=first.windows
    )
    (refused,) = later.rejected
    assert refused.pulse.origin_peer == "a"
    assert f"at pulse {large[2].pulse_id}" in refused.reason
    assert [p.origin_peer for p in later.admitted] == ["b"]


def test_the_edge_of_the_budget_does_not_depend_on_how_costs_were_grouped() -> None:
    # Bounds whose float sums differ by grouping: ((x + y) + z) != (x + (y + z)).
    pulses = [pulse("a", strength, n) for n, strength in enumerate((0.01, 0.01, 0.58))]
    bounds = [p.moved_salience_bound() for p in pulses]
    # Summed in order, in floats, the three would go over a budget of their other sum.
    budget = bounds[0] + (bounds[1] + bounds[2])
    assert (bounds[0] + bounds[1]) + bounds[2] > budget
    results = {tuple(in_batches(pulses, cuts, budget)[0]) for cuts in ([], [1], [2], [1, 2])}
    assert results == {tuple(p.pulse_id for p in pulses)}


# ---- the window kept in the database ------------------------------------------------------------


def replay(db: Database, verdicts: Sequence[tuple[BudgetVerdict, Sequence[SalientPulse]]]) -> None:
    """Record each batch's charges as the daemon does, one transaction per batch."""
    for verdict, batch in verdicts:
        admitted = {p.pulse_id for p in verdict.admitted}
        with db.transaction():
            for p in batch:
                ok = p.pulse_id in admitted
                charge = stored.Charge(
                    p.origin_peer,
                    WINDOW_MS,
                    (cost_units(p) or 0) if ok else 0,
                    ok,
                    None if ok else verdict.windows[p.origin_peer].closed_by,
                )
                stored.record_charge(db, p.pulse_id, charge)


def test_the_window_is_kept_across_cycles_and_a_charge_counts_once(tmp_path: Path) -> None:
    db = Database(tmp_path / "budget.db")
    try:
        pulses = [pulse("a", strength, n) for n, strength in enumerate((1.0, 0.5, 1.0, 0.01))]
        first = admit_within_budget(pulses[:2], 3.0)
        replay(db, [(first, pulses[:2])])
        kept = stored.window_state(db, "a", WINDOW_MS)
        assert kept == first.windows["a"] and kept.closed_by is None
        second = admit_within_budget(pulses[2:], 3.0, windows={"a": kept})
        replay(db, [(second, pulses[2:]), (second, pulses[2:])])  # the second time: a crash redo
        kept = stored.window_state(db, "a", WINDOW_MS)
        assert kept == second.windows["a"]
        assert kept.closed_by == pulses[2].pulse_id
        assert kept.spent_units == (cost_units(pulses[0]) or 0) + (cost_units(pulses[1]) or 0)
        assert stored.window_state(db, "b", WINDOW_MS) == WindowState()
        with db.transaction():
            stored.forget_windows_before(db, WINDOW_MS + 1)
        assert stored.window_state(db, "a", WINDOW_MS) == WindowState()
    finally:
        db.close()


def test_migration_0010_folds_the_charges_0009_kept_into_windows() -> None:
    conn = apsw.Connection(":memory:")
    conn.execute((MIGRATIONS / "0009_origin_budget.sql").read_text(encoding="utf-8"))
    conn.executemany(
        "INSERT INTO origin_budget_charges VALUES (?, ?, ?, ?, ?)",
        [
            ("p1", "a", 0, 1.71, 1),
            ("p2", "a", 0, 0.1, 1),
            ("p3", "a", 0, 0.0, 0),
            ("p4", "a", 30_000, 0.3, 1),
            ("p5", "b", 0, 0.2, 1),
        ],
    )
    conn.execute((MIGRATIONS / "0010_origin_budget_windows.sql").read_text(encoding="utf-8"))
    rows = conn.execute(
        "SELECT origin_peer, window_start_ms, spent_units, closed_by_pulse "
        "FROM origin_budget_windows ORDER BY 1, 2"
    ).fetchall()
    assert rows == [
        ("a", 0, to_units(1.71) + to_units(0.1), "p3"),
        ("a", 30_000, to_units(0.3), None),
        ("b", 0, to_units(0.2), None),
    ]
