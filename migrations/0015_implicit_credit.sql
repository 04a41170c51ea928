-- Credit from what agents do when they report no outcome (daemon/implicit_credit.py).
-- A decision remembers the agent session it was made in, so what the session does next
-- (a save that reproduces a recalled chunk, the same question asked again, a result
-- reported for the whole session) can credit the chunks it recalled.
ALTER TABLE attributions ADD COLUMN session_id TEXT;
CREATE INDEX attributions_by_session ON attributions (session_id, hlc)
    WHERE session_id IS NOT NULL;

-- What was inferred, once per signal, decision and chunk: converted in the cycle like an
-- outcome (pulses, keys), superseded when the decision has an outcome of its own.
CREATE TABLE implicit_credits (
    signal         TEXT NOT NULL CHECK (signal IN ('saved', 'summary', 'asked_again',
                                                   'session')),
    decision_hash  TEXT NOT NULL,
    chunk_hash     TEXT NOT NULL,
    amount         REAL NOT NULL,
    reason         TEXT NOT NULL,
    status         TEXT NOT NULL DEFAULT 'waiting'
                   CHECK (status IN ('waiting', 'converted', 'superseded', 'rejected')),
    created_ms     INTEGER NOT NULL,
    PRIMARY KEY (signal, decision_hash, chunk_hash)
);
CREATE INDEX implicit_credits_waiting ON implicit_credits (created_ms)
    WHERE status = 'waiting';

-- A later decision of a session that asks again what an earlier one asked: what serves
-- the later question is credited to the earlier one too.
CREATE TABLE rephrasings (
    earlier  TEXT NOT NULL,
    later    TEXT NOT NULL,
    PRIMARY KEY (later, earlier)
);

-- Results reported once for a whole session (`pulse-emit outcome --session`).
CREATE TABLE session_outcomes (
    id          INTEGER PRIMARY KEY,
    session_id  TEXT NOT NULL,
    reward      REAL NOT NULL,
    reason      TEXT NOT NULL,
    ts_ms       INTEGER NOT NULL,
    status      TEXT NOT NULL DEFAULT 'waiting' CHECK (status IN ('waiting', 'converted'))
);
