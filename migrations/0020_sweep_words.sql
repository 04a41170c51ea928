-- The sweep weighs each chunk's distinct words by how few chunks hold them. Each chunk's
-- words are kept as numbers, once, so that a sweep counts them without reading or
-- tokenizing every text again; a chunk without a row here is tokenized at the next sweep.
CREATE TABLE sweep_words (
    id   INTEGER PRIMARY KEY,
    word TEXT NOT NULL UNIQUE
);
CREATE TABLE chunk_words (
    id       INTEGER PRIMARY KEY,  -- observations.id
    word_ids BLOB NOT NULL         -- its distinct words' sweep_words ids, uint32 little-endian
);
CREATE TRIGGER chunk_words_delete AFTER DELETE ON observations BEGIN
    DELETE FROM chunk_words WHERE id = old.id;
END;
CREATE TRIGGER chunk_words_content AFTER UPDATE OF content ON observations BEGIN
    DELETE FROM chunk_words WHERE id = new.id;
END;
-- What the sweep reads of every chunk, without the rows' text and embeddings. The columns
-- of the condition are in the index too, or SQLite would read each row to check them.
CREATE INDEX observations_sweep
    ON observations (id, kind, importance, created_at, cold_at, deleted_at, admitted_seq, type)
    WHERE deleted_at IS NULL AND admitted_seq IS NOT NULL AND type != 'efficacy';
