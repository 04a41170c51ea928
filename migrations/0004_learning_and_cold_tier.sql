-- Memory that gets better with use: a cold tier for swept chunks, learned
-- retrieval keys, recall's own full-text index, and what credit needs
-- (attributions in rank order with their query; outcomes with citations).

-- A swept chunk is a scar, not a deletion: it leaves the live index and default
-- recall but keeps its row and embedding, and can come back. NULL: live.
ALTER TABLE observations ADD COLUMN cold_at TEXT;
ALTER TABLE observations ADD COLUMN cold_reason TEXT;
CREATE INDEX observations_cold ON observations (cold_at) WHERE cold_at IS NOT NULL;

-- Questions a chunk has been shown to answer (a credited success adds one).
CREATE TABLE learned_keys (
    id          INTEGER PRIMARY KEY,
    chunk_id    INTEGER NOT NULL REFERENCES observations (id),
    embedding   BLOB NOT NULL,           -- the query's embedding, little-endian float32
    text        TEXT,                    -- the query's words; NULL when they did not travel
    weight      REAL NOT NULL CHECK (weight >= 0.0 AND weight <= 1.0),
    updated_ms  INTEGER NOT NULL
);
CREATE INDEX learned_keys_chunk ON learned_keys (chunk_id);

-- Recall's lexical side: Porter-stemmed content, plus the words of learned keys
-- in a column of their own. Efficacy observations are not memory to recall.
CREATE VIRTUAL TABLE recall_fts USING fts5(content, learned, tokenize = 'porter unicode61');
INSERT INTO recall_fts (rowid, content, learned)
    SELECT id, content, '' FROM observations WHERE type != 'efficacy';

CREATE TRIGGER recall_fts_insert AFTER INSERT ON observations WHEN new.type != 'efficacy' BEGIN
    INSERT INTO recall_fts (rowid, content, learned) VALUES (new.id, new.content, '');
END;

CREATE TRIGGER recall_fts_delete AFTER DELETE ON observations BEGIN
    DELETE FROM recall_fts WHERE rowid = old.id;
END;

CREATE TRIGGER recall_fts_update AFTER UPDATE OF content ON observations
WHEN new.type != 'efficacy' BEGIN
    UPDATE recall_fts SET content = new.content WHERE rowid = new.id;
END;

-- Credit needs the recalled order and the query; outcomes may cite chunks.
ALTER TABLE attributions ADD COLUMN ranked_json TEXT;     -- JSON array, best first
ALTER TABLE attributions ADD COLUMN query_text TEXT;
ALTER TABLE attributions ADD COLUMN query_embedding BLOB;
ALTER TABLE outcomes ADD COLUMN cited_json TEXT NOT NULL DEFAULT '[]';

-- The journal learns two steps: a chunk swept to the cold tier, and one revived.
-- SQLite cannot widen a CHECK in place: the table is copied, rows and ids kept.
CREATE TABLE journal_new (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    kind     TEXT NOT NULL CHECK (kind IN ('chunk', 'pulse', 'tombstone', 'supersede',
                                           'reconsolidate', 'downscale', 'sweep', 'revive')),
    ref      TEXT NOT NULL,
    body     TEXT NOT NULL,
    at_ms    INTEGER NOT NULL
);
INSERT INTO journal_new (seq, kind, ref, body, at_ms) SELECT seq, kind, ref, body, at_ms FROM journal;
DROP TABLE journal;
ALTER TABLE journal_new RENAME TO journal;

-- Sweeps made before the cold tier existed were tombstones; they become scars.
UPDATE journal SET kind = 'sweep'
    WHERE kind = 'tombstone' AND ref IN (SELECT hash FROM tombstones WHERE reason = 'percentile_sweep');
UPDATE observations SET cold_at = deleted_at, cold_reason = 'percentile_sweep', deleted_at = NULL
    WHERE content_hash IN (SELECT hash FROM tombstones WHERE reason = 'percentile_sweep');
DELETE FROM tombstones WHERE reason = 'percentile_sweep';
