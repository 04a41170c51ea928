-- Each other peer's budget per window of its pulses' own time, as one row: what its
-- admitted pulses may move, in whole units of 1e-9 salience (pulses/budget.py: integer
-- sums are the same however the pulses were batched), and the pulse at which the window
-- closed (every later pulse of the origin in the window is refused), NULL while open.
-- Updated in the transaction that records each pulse's charge (origin_budget_charges), so
-- a crash neither loses nor repeats one. Existing charges are folded in; a window closed
-- before this migration names one of its refused pulses.
CREATE TABLE origin_budget_windows (
    origin_peer      TEXT NOT NULL,
    window_start_ms  INTEGER NOT NULL,
    spent_units      INTEGER NOT NULL CHECK (spent_units >= 0),
    closed_by_pulse  TEXT,
    PRIMARY KEY (origin_peer, window_start_ms)
) WITHOUT ROWID;

CREATE INDEX origin_budget_windows_start ON origin_budget_windows (window_start_ms);

INSERT INTO origin_budget_windows (origin_peer, window_start_ms, spent_units, closed_by_pulse)
SELECT origin_peer,
       window_start_ms,
       coalesce(sum(CASE WHEN admitted THEN CAST(round(cost * 1000000000) AS INTEGER) END), 0),
       min(CASE WHEN admitted = 0 THEN pulse_id END)
FROM origin_budget_charges
GROUP BY origin_peer, window_start_ms;
