-- Read paths of recall and of downscale (scripts/bench_recall.py and scripts/bench_scale.py
-- measure both).
--
-- Full text holds live and cold chunks only. A tombstoned chunk never comes back, so its
-- words leave recall_fts when it is retracted; recall then searches recall_fts alone
-- instead of reading every match's row to see whether it was retracted.
DELETE FROM recall_fts WHERE rowid IN (SELECT id FROM observations WHERE deleted_at IS NOT NULL);
CREATE TRIGGER recall_fts_tombstone AFTER UPDATE OF deleted_at ON observations
WHEN old.deleted_at IS NULL AND new.deleted_at IS NOT NULL BEGIN
    DELETE FROM recall_fts WHERE rowid = new.id;
END;

-- Recall's filters (project, kind, scope, session, topic prefix, time range) read this
-- covering index instead of every row with its content and embedding (scripts/bench_recall.py
-- measures recall by text with filters).
CREATE INDEX observations_filters
    ON observations (project, kind, scope, session_id, topic_key, created_at, deleted_at, type);

-- Downscale decays the chunks that waited longest since their last decay, a bounded
-- number per cycle (store/database.py: decay_candidates); this index hands them over in
-- that order without reading every chunk's row.
CREATE INDEX observations_decay
    ON observations (coalesce(last_decay_ts, created_at), id)
    WHERE deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != 'efficacy';
