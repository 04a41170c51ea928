-- The protocol tables (section 9), each with what replay needs: the journal
-- sequence number at which the change was applied, and why a pulse was not.

-- Every state change applied locally, in order. Rebuild replays it.
CREATE TABLE journal (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL CHECK (kind IN ('chunk', 'pulse', 'tombstone', 'supersede',
                                           'reconsolidate', 'downscale')),
    ref      TEXT NOT NULL,        -- content hash, pulse id, or run id
    body     TEXT NOT NULL,        -- JSON needed to replay the step
    at_ms    INTEGER NOT NULL
);

CREATE TABLE applied_pulses (
    pulse_id     TEXT PRIMARY KEY,
    applied_at   TEXT NOT NULL,
    journal_seq  INTEGER REFERENCES journal (seq),
    origin_peer  TEXT,
    status       TEXT NOT NULL CHECK (status IN ('applied', 'rejected', 'expired', 'skipped')),
    reason       TEXT,             -- reject / skip reason, or the pulse's topic
    changed      INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE tombstones (
    hash               TEXT PRIMARY KEY,
    reason             TEXT,
    origin_peer        TEXT,
    ts                 TEXT NOT NULL,
    collectable_after  TEXT,
    journal_seq        INTEGER REFERENCES journal (seq)
);
CREATE INDEX tombstones_reason ON tombstones (reason);

CREATE TABLE attributions (
    decision_hash      TEXT PRIMARY KEY,
    chunk_hashes_json  TEXT NOT NULL,   -- JSON array of blake3 hex
    peer               TEXT NOT NULL,
    ts                 TEXT NOT NULL,
    hlc                INTEGER NOT NULL,
    decision_text      TEXT NOT NULL DEFAULT ''
);

-- Outcomes, local or received. One whose attribution is unknown waits here
-- (status 'waiting') until it appears or the outcome expires.
CREATE TABLE outcomes (
    outcome_id     TEXT PRIMARY KEY,
    decision_hash  TEXT NOT NULL,
    reward         REAL NOT NULL,
    observer_peer  TEXT NOT NULL,
    hlc            INTEGER NOT NULL,
    reason         TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('waiting', 'converted', 'foreign', 'expired',
                                                   'rejected')),
    expires_ms     INTEGER NOT NULL,
    pulses         INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX outcomes_waiting ON outcomes (status, decision_hash);
