-- Checkpoints of the journal: the state replaying it up to a step produces, per chunk,
-- so that steps older than the audit retention can be deleted and rebuild still replays
-- the rest from there.

CREATE TABLE journal_checkpoints (
    seq            INTEGER PRIMARY KEY,  -- the state after every journal step up to this one
    at_ms          INTEGER NOT NULL,     -- when it was written
    journal_at_ms  INTEGER NOT NULL,     -- the newest time among the steps it covers
    chunks         INTEGER NOT NULL
);

CREATE TABLE checkpoint_chunks (
    checkpoint_seq  INTEGER NOT NULL REFERENCES journal_checkpoints (seq) ON DELETE CASCADE,
    chunk_id        INTEGER NOT NULL,    -- observations.id
    admitted_seq    INTEGER NOT NULL,    -- its chunk step: the order it joined the index
    kind            TEXT NOT NULL,
    salience        REAL NOT NULL,
    pin_floor       REAL NOT NULL,
    decay_from_ms   INTEGER NOT NULL,    -- its last downscale (or creation)
    tier            TEXT NOT NULL CHECK (tier IN ('live', 'cold', 'tombstoned')),
    PRIMARY KEY (checkpoint_seq, chunk_id)
) WITHOUT ROWID;
