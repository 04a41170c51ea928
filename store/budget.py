"""The charges of other peers' pulses against their budget, per window of pulse time."""

from __future__ import annotations

from dataclasses import dataclass

from store.database import Database


@dataclass(frozen=True)
class WindowSpend:
    """What an origin's admitted pulses of one window may move, and whether one of its
    pulses in that window was already refused (then every later one is too)."""

    spent: float
    went_over: bool


@dataclass(frozen=True)
class Charge:
    origin_peer: str
    window_start_ms: int
    cost: float
    admitted: bool


def window_spend(db: Database, origin_peer: str, window_start_ms: int) -> WindowSpend:
    row = db.fetch_one(
        "SELECT coalesce(sum(CASE WHEN admitted THEN cost END), 0.0), "
        "coalesce(max(admitted = 0), 0) FROM origin_budget_charges "
        "WHERE window_start_ms = ? AND origin_peer = ?",
        (window_start_ms, origin_peer),
    )
    return WindowSpend(spent=float(row[0]), went_over=bool(row[1]))


def record_charge(db: Database, pulse_id: str, charge: Charge) -> None:
    """Inside the transaction that records the pulse."""
    db.conn.execute(
        "INSERT OR IGNORE INTO origin_budget_charges "
        "(pulse_id, origin_peer, window_start_ms, cost, admitted) VALUES (?, ?, ?, ?, ?)",
        (pulse_id, charge.origin_peer, charge.window_start_ms, charge.cost, int(charge.admitted)),
    )


def forget_windows_before(db: Database, window_start_ms: int) -> None:
    db.conn.execute(
        "DELETE FROM origin_budget_charges WHERE window_start_ms < ?", (window_start_ms,)
    )
