-- Revivals in the journal, in an index of their own. Every sweep asks which chunks were
-- revived within the grace period, so that it does not sweep them straight back; with no
-- index, that read the whole journal (a step per chunk ever ingested, swept or credited)
-- in every sweep. Revivals are rare: this index holds just them, and costs the journal's
-- other writes nothing.
CREATE INDEX journal_revivals ON journal (at_ms) WHERE kind = 'revive';
