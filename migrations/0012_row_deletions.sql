-- The change stamp (store/database.py: change_stamp) reads only a few index pages: the
-- largest id (rows added), the pending count (rows admitted) and the tombstoned count.
-- Counting every row instead read them all again on each connection after every commit,
-- since SQLite drops a connection's page cache when another one commits.
-- Those three catch every change because no row of observations is ever deleted (a
-- tombstone keeps its row); should one be, this counter moves the stamp too. A migration
-- that rebuilds observations (a copy and a rename) drops this trigger with the old table
-- and must create it again.
CREATE TRIGGER observations_row_deleted AFTER DELETE ON observations BEGIN
    INSERT INTO meta (key, value) VALUES ('observations_deleted', '1')
    ON CONFLICT (key) DO UPDATE SET value = CAST(value AS INTEGER) + 1;
END;
