-- What this peer has read from and written to the shared log.

-- Segments fully applied (their entries are in the same transaction).
CREATE TABLE applied_segments (
    key         TEXT PRIMARY KEY,
    applied_at  TEXT NOT NULL,
    entries     INTEGER NOT NULL,
    rejected    INTEGER NOT NULL,
    skipped     INTEGER NOT NULL
);

-- Every entry id seen, whichever segment or snapshot brought it.
CREATE TABLE seen_entries (
    entry_id  TEXT PRIMARY KEY,
    kind      TEXT NOT NULL,
    hlc       INTEGER NOT NULL,
    origin    TEXT NOT NULL,
    status    TEXT NOT NULL,
    reason    TEXT
);

-- Entries this peer made, waiting to be published (seq NULL) or published.
CREATE TABLE outbox (
    entry_id    TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,
    hlc         INTEGER NOT NULL,
    body        TEXT NOT NULL,     -- the encoded entry, JSON
    created_at  TEXT NOT NULL,
    applied     INTEGER NOT NULL DEFAULT 0,   -- applied locally yet?
    segment_seq INTEGER,
    -- What makes a repeated command the same request (pulse-emit is idempotent).
    request_key TEXT UNIQUE
);
CREATE INDEX outbox_unpublished ON outbox (segment_seq) WHERE segment_seq IS NULL;
CREATE INDEX outbox_unapplied ON outbox (applied) WHERE applied = 0;

-- A segment is prepared (key and bytes fixed) before it is written, so a crash
-- between the write and this row's update retries the identical object.
CREATE TABLE segments_out (
    seq         INTEGER PRIMARY KEY,
    key         TEXT NOT NULL UNIQUE,
    data        BLOB NOT NULL,
    hlc         INTEGER NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('prepared', 'published', 'superseded')),
    created_at  TEXT NOT NULL
);

CREATE TABLE meta (
    key    TEXT PRIMARY KEY,
    value  TEXT NOT NULL
);

CREATE TABLE cycles (
    id           INTEGER PRIMARY KEY,
    started_at   TEXT NOT NULL,
    finished_at  TEXT,
    status       TEXT NOT NULL,
    phases_json  TEXT NOT NULL DEFAULT '{}'
);
