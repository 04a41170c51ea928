-- What each other peer's pulses were charged against its budget of salience, per window
-- of the pulses' own timestamps (daemon/cycle.py). Kept per pulse, in the transaction
-- that records the pulse, so a crash charges nothing twice; rows of windows past the
-- look-back are deleted.
CREATE TABLE origin_budget_charges (
    pulse_id         TEXT PRIMARY KEY,
    origin_peer      TEXT NOT NULL,
    window_start_ms  INTEGER NOT NULL,
    cost             REAL NOT NULL,
    admitted         INTEGER NOT NULL CHECK (admitted IN (0, 1))
);

CREATE INDEX origin_budget_charges_window ON origin_budget_charges (window_start_ms, origin_peer);
