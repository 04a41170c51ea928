-- Cold chunks whose content was ingested again after they went cold, in an index of
-- their own. Every cycle looks for them (the sweep phase revives them), and there are
-- almost never any; searching observations_cold_live for them read every one of its
-- entries in every cycle, a cost that grew with the cold tier. This index holds only the
-- rows the search wants, and a revived row leaves it.
CREATE INDEX observations_cold_reingested ON observations (id)
    WHERE cold_at IS NOT NULL AND deleted_at IS NULL AND last_seen_at > cold_at;
