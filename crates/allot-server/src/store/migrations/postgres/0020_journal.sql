-- Allot store schema, version 20 (PostgreSQL): the journal. Every step the
-- engine took live (its instant, how it closed, its inputs) and every start
-- of an engine, as JSON (`allot_core::engine::Entry`), written in the same
-- transaction as the step's other writes; `allot sim --journal` replays it.
CREATE TABLE journal (
    seq BIGSERIAL PRIMARY KEY,
    t BIGINT NOT NULL,
    entry TEXT NOT NULL
);
