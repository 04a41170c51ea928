"""The charges of other peers' pulses against their budget, per window of pulse time.

Each pulse's charge is kept (`origin_budget_charges`), and each window's state beside it
(`origin_budget_windows`: spent units, and the pulse that closed it), both written in the
transaction that records the pulse.
"""

from __future__ import annotations

from dataclasses import dataclass

from dreamcycle.pulses.budget import WindowState, from_units
from dreamcycle.store.database import Database


@dataclass(frozen=True)
class Charge:
    """What one pulse cost its origin's window (0 when refused), and the pulse that closed
    the window if it is closed once this pulse is counted."""

    origin_peer: str
    window_start_ms: int
    cost_units: int
    admitted: bool
    closed_by: str | None = None


def window_state(db: Database, origin_peer: str, window_start_ms: int) -> WindowState:
    row = db.fetch_one(
        "SELECT spent_units, closed_by_pulse FROM origin_budget_windows "
        "WHERE origin_peer = ? AND window_start_ms = ?",
        (origin_peer, window_start_ms),
    )
    return WindowState() if row is None else WindowState(int(row[0]), row[1])


def record_charge(db: Database, pulse_id: str, charge: Charge) -> None:
    """Inside the transaction that records the pulse; a pulse charged before is not
    charged again."""
    db.conn.execute(
        "INSERT OR IGNORE INTO origin_budget_charges "
        "(pulse_id, origin_peer, window_start_ms, cost, admitted) VALUES (?, ?, ?, ?, ?)",
        (
            pulse_id,
            charge.origin_peer,
            charge.window_start_ms,
            from_units(charge.cost_units),
            int(charge.admitted),
        ),
    )
    if db.conn.changes() == 0:
        return
    db.conn.execute(
        "INSERT INTO origin_budget_windows "
        "(origin_peer, window_start_ms, spent_units, closed_by_pulse) VALUES (?, ?, ?, ?) "
        "ON CONFLICT (origin_peer, window_start_ms) DO UPDATE SET "
        "spent_units = spent_units + excluded.spent_units, "
        "closed_by_pulse = coalesce(closed_by_pulse, excluded.closed_by_pulse)",
        (charge.origin_peer, charge.window_start_ms, charge.cost_units, charge.closed_by),
    )


def forget_windows_before(db: Database, window_start_ms: int) -> None:
    db.conn.execute(
        "DELETE FROM origin_budget_charges WHERE window_start_ms < ?", (window_start_ms,)
    )
    db.conn.execute(
        "DELETE FROM origin_budget_windows WHERE window_start_ms < ?", (window_start_ms,)
    )
