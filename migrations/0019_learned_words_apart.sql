-- The words of the questions a chunk learned to answer move to a full-text table of
-- their own. FTS5's bm25() divides a row's score by the row's length over every column of
-- its table, so with the learned words beside the content a chunk that had answered
-- questions ranked lower by its own words for every other query. recall_fts keeps its
-- `learned` column, emptied (dropping a column would mean building the index again).
CREATE VIRTUAL TABLE learned_fts USING fts5(learned, tokenize = 'porter unicode61');
INSERT INTO learned_fts (rowid, learned)
    SELECT rowid, learned FROM recall_fts WHERE learned != '';
UPDATE recall_fts SET learned = '' WHERE learned != '';
CREATE TRIGGER learned_fts_delete AFTER DELETE ON observations BEGIN
    DELETE FROM learned_fts WHERE rowid = old.id;
END;
CREATE TRIGGER learned_fts_tombstone AFTER UPDATE OF deleted_at ON observations
WHEN old.deleted_at IS NULL AND new.deleted_at IS NOT NULL BEGIN
    DELETE FROM learned_fts WHERE rowid = new.id;
END;
