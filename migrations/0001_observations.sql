-- Memory chunks. Column names are a superset of engram's `observations` table,
-- plus the salience deltas of the Signed Salience Pulse protocol (section 9)
-- and what this daemon needs: content addressing, the stored embedding (so the
-- index can be rebuilt without re-embedding), per-kind decay and the ranking
-- counters of neighbouring salience systems.
CREATE TABLE observations (
    id               INTEGER PRIMARY KEY,   -- also the HNSW label
    session_id       TEXT,
    type             TEXT NOT NULL DEFAULT 'manual',
    title            TEXT NOT NULL DEFAULT '',
    content          TEXT NOT NULL,
    tool_name        TEXT,
    project          TEXT,
    scope            TEXT NOT NULL DEFAULT 'project',
    topic_key        TEXT,
    normalized_hash  TEXT,
    revision_count   INTEGER NOT NULL DEFAULT 1,
    duplicate_count  INTEGER NOT NULL DEFAULT 1,
    last_seen_at     TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL,
    deleted_at       TEXT,
    salience         REAL NOT NULL DEFAULT 1.0 CHECK (salience >= 0.0 AND salience <= 1.0),
    pin_floor        REAL NOT NULL DEFAULT 0.0 CHECK (pin_floor >= 0.0 AND pin_floor <= 1.0),
    last_decay_ts    TEXT,
    content_hash     TEXT NOT NULL UNIQUE,  -- blake3 of the normalised content: the storage unit
    kind             TEXT NOT NULL DEFAULT 'note',
    embedding        BLOB,                  -- little-endian float32, unit-normalised
    model_id         TEXT,
    index_version    TEXT,
    access_count     INTEGER NOT NULL DEFAULT 0,
    citation_count   INTEGER NOT NULL DEFAULT 0,
    importance       INTEGER NOT NULL DEFAULT 5 CHECK (importance BETWEEN 0 AND 10),
    confidence       REAL NOT NULL DEFAULT 1.0 CHECK (confidence >= 0.0 AND confidence <= 1.0),
    deletion_policy  TEXT NOT NULL DEFAULT 'auto_prune'
                     CHECK (deletion_policy IN ('auto_prune', 'manual_only', 'never')),
    origin_peer      TEXT,
    source_ref       TEXT,                  -- e.g. "engram:<db path>#<id>" for imported rows
    admitted_seq     INTEGER                -- journal seq at which the daemon indexed it; NULL: pending
);

CREATE INDEX observations_live ON observations (deleted_at, salience);
CREATE INDEX observations_topic ON observations (topic_key);
CREATE INDEX observations_pending ON observations (id) WHERE admitted_seq IS NULL;

CREATE VIRTUAL TABLE observations_fts USING fts5(
    title, content, topic_key,
    content = 'observations', content_rowid = 'id'
);

CREATE TRIGGER observations_fts_insert AFTER INSERT ON observations BEGIN
    INSERT INTO observations_fts (rowid, title, content, topic_key)
    VALUES (new.id, new.title, new.content, new.topic_key);
END;

CREATE TRIGGER observations_fts_delete AFTER DELETE ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, content, topic_key)
    VALUES ('delete', old.id, old.title, old.content, old.topic_key);
END;

CREATE TRIGGER observations_fts_update AFTER UPDATE OF title, content, topic_key ON observations BEGIN
    INSERT INTO observations_fts (observations_fts, rowid, title, content, topic_key)
    VALUES ('delete', old.id, old.title, old.content, old.topic_key);
    INSERT INTO observations_fts (rowid, title, content, topic_key)
    VALUES (new.id, new.title, new.content, new.topic_key);
END;
