-- Seed 001's stability per memory: how resistant it is to change, which stretches or
-- shortens its kind's decay half-life. Confidence (how sure the store is that the
-- memory is accurate) has had a column since 0001, never set: 1.0 everywhere.
-- Existing rows get the defaults a new memory of their type and kind gets
-- (pulses/confidence.py; tests/test_confidence.py checks the two agree), so a memory
-- stored before keeps decaying at its kind's half-life.
ALTER TABLE observations ADD COLUMN stability REAL NOT NULL DEFAULT 0.5
    CHECK (stability >= 0.0 AND stability <= 1.0);

UPDATE observations SET stability = CASE kind
    WHEN 'fact' THEN 0.9
    WHEN 'preference' THEN 0.6
    WHEN 'note' THEN 0.4
    WHEN 'insight' THEN 0.4
    WHEN 'summary' THEN 0.2
    ELSE 0.5 END;

UPDATE observations SET confidence = min(
    CASE type
        WHEN 'manual' THEN 0.9
        WHEN 'decision' THEN 0.8
        WHEN 'config' THEN 0.8
        WHEN 'architecture' THEN 0.8
        WHEN 'bugfix' THEN 0.8
        WHEN 'discovery' THEN 0.7
        WHEN 'learning' THEN 0.7
        WHEN 'pattern' THEN 0.6
        WHEN 'session_summary' THEN 0.6
        ELSE 0.7 END,
    CASE kind WHEN 'insight' THEN 0.6 WHEN 'summary' THEN 0.6 ELSE 1.0 END);

-- The journal learns a step: a change of confidence (the audit trail explain reads).
-- SQLite cannot widen a CHECK in place: the table is copied, rows, ids and the id
-- counter kept (steps pruned by retention must not have their numbers reused).
CREATE TABLE journal_new (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL CHECK (kind IN ('chunk', 'pulse', 'tombstone', 'supersede',
                                           'reconsolidate', 'downscale', 'sweep', 'revive',
                                           'confidence')),
    ref      TEXT NOT NULL,
    body     TEXT NOT NULL,
    at_ms    INTEGER NOT NULL
);
INSERT INTO journal_new (seq, kind, ref, body, at_ms) SELECT seq, kind, ref, body, at_ms FROM journal;
DELETE FROM sqlite_sequence WHERE name = 'journal_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'journal_new', seq FROM sqlite_sequence WHERE name = 'journal';
DROP TABLE journal;
ALTER TABLE journal_new RENAME TO journal;
