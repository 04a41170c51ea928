-- What a peer loads of every chunk at start-up (its salience, pin floor, deletion policy,
-- tombstone and tier) in an index of its own: read from the table, each row brought its
-- text and embedding along, and a million chunks meant reading the whole database.
CREATE INDEX observations_salience_state
    ON observations (id, salience, pin_floor, deleted_at, deletion_policy, cold_at);
