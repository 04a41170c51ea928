-- Context bundles read the pinned memories (a pin floor, or deletion policy never) of a
-- filter, highest salience first: without this index that read scans every chunk
-- (a third of a second at 100k chunks); with it, only the pinned ones, already in order.
CREATE INDEX observations_pinned ON observations (deleted_at, salience DESC, id)
    WHERE pin_floor > 0 OR deletion_policy = 'never';
