-- Read paths of recall and of downscale at 100k chunks, measured before and after.
--
-- Full text holds live and cold chunks only. A tombstoned chunk never comes back, so its
-- words leave recall_fts when it is retracted; recall then searches recall_fts alone
-- (1.2 ms) instead of reading every match's row to see whether it was retracted (2.3 ms).
DELETE FROM recall_fts WHERE rowid IN (SELECT id FROM observations WHERE deleted_at IS NOT NULL);
CREATE TRIGGER recall_fts_tombstone AFTER UPDATE OF deleted_at ON observations
WHEN old.deleted_at IS NULL AND new.deleted_at IS NOT NULL BEGIN
    DELETE FROM recall_fts WHERE rowid = new.id;
END;

-- Recall's filters (project, kind, scope, session, topic prefix, time range) read this
-- covering index instead of every row with its content and embedding: 107 ms -> 1 ms
-- for one project and kind, 142 ms -> 17 ms for a kind alone.
CREATE INDEX observations_filters
    ON observations (project, kind, scope, session_id, topic_key, created_at, deleted_at, type);

-- Downscale decays the chunks that waited longest since their last decay, a bounded
-- number per cycle (store/database.py: decay_candidates); this index hands them over in
-- that order without reading every chunk's row.
CREATE INDEX observations_decay
    ON observations (coalesce(last_decay_ts, created_at), id)
    WHERE deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != 'efficacy';
