-- Allot store schema, version 21: snapshots of the live run. The engine and
-- its policy's memory at the journal entry `journal_seq` (encoded by
-- `allot_sim::replay::encode`), written in the same transaction as that
-- step; recovery restores the latest and replays the journal after it, and
-- the journal before the oldest one kept is compacted away.
CREATE TABLE snapshots (
    journal_seq BIGINT PRIMARY KEY,
    t BIGINT NOT NULL,
    data BLOB NOT NULL
);
