-- The cold tier's rows that are not tombstoned, in an index of their own. Every cycle
-- counts them and looks among them for content ingested again (last_seen_at after
-- cold_at), and recall reads their ids; with only observations_cold (cold_at) each of
-- those reads visited every cold row, embedding included, to test deleted_at, so a
-- cycle's cost grew with the cold tier. This index answers all three alone.
CREATE INDEX observations_cold_live ON observations (cold_at, last_seen_at)
    WHERE cold_at IS NOT NULL AND deleted_at IS NULL;
