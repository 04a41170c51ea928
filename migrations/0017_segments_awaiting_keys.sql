-- Segments refused only because their seal names a key this peer did not trust yet: read
-- again once the keyring trusts that key (a peer added after it published), for a bounded
-- time and in a bounded number. Every other refusal is for good and leaves no row here.
CREATE TABLE segments_awaiting_key (
    key          TEXT PRIMARY KEY,
    key_id       TEXT NOT NULL,
    segment_hlc  INTEGER NOT NULL
);
CREATE INDEX segments_awaiting_key_by_key_id ON segments_awaiting_key (key_id, segment_hlc);
CREATE INDEX segments_awaiting_key_by_hlc ON segments_awaiting_key (segment_hlc);
