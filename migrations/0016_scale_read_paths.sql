-- Two reads that visited every chunk's row (its content and embedding with it) to find
-- a few, a cost that grew with the store: the labels a live index holds, read at every
-- start to check the saved index (scripts/bench_scale.py measures start-up at a million
-- chunks), and the chunks still to embed, read once per batch of an ingest (each batch
-- scanned the table).
CREATE INDEX observations_live_labels ON observations (index_version, id)
    WHERE admitted_seq IS NOT NULL AND deleted_at IS NULL AND cold_at IS NULL
      AND type != 'efficacy';
CREATE INDEX observations_unembedded ON observations (id)
    WHERE embedding IS NULL AND deleted_at IS NULL AND type != 'efficacy';
