-- Learned keys from another peer that arrived before the attribution of their decision
-- (published in a segment read later, or refused until its key was trusted): applied once
-- the attribution is here, for as long as an outcome waits for its decision and in a
-- bounded number. The entry is kept as its wire object, already verified.
CREATE TABLE keys_awaiting_attribution (
    entry_id       TEXT PRIMARY KEY,
    decision_hash  TEXT NOT NULL,
    hlc            INTEGER NOT NULL,
    wire_json      TEXT NOT NULL
);
CREATE INDEX keys_awaiting_attribution_by_decision ON keys_awaiting_attribution (decision_hash);
CREATE INDEX keys_awaiting_attribution_by_hlc ON keys_awaiting_attribution (hlc);
