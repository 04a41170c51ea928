-- What `dreamcycle import engram` brought in: one row per engram observation or
-- session summary, so that the next import takes only what changed there.

CREATE TABLE engram_imports (
    -- "sync:<sync_id>"; "fields:<blake3 of normalized_hash, project, scope, type,
    -- title>" for engram versions without sync_id; "session:<id>" for summaries.
    source_key      TEXT PRIMARY KEY,
    content_hash    TEXT NOT NULL,     -- the chunk it maps to now
    fingerprint     TEXT NOT NULL,     -- blake3 of the mapped fields: any change re-imports
    source_path     TEXT NOT NULL,     -- the engram database it was last read from
    source_id       TEXT NOT NULL,     -- engram's row id there (observation id or session id)
    -- engram's own times, kept verbatim: the chunk's created_at is when it was imported.
    created_at      TEXT,
    updated_at      TEXT,
    revision_count  INTEGER,
    deleted_at      TEXT,              -- engram's deletion time, once it was imported here
    imported_ms     INTEGER NOT NULL
);
CREATE INDEX engram_imports_hash ON engram_imports (content_hash);
