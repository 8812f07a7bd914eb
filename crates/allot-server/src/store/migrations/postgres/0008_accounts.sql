-- Allot store schema, version 8 (PostgreSQL): the live account tree (rules ACC-1..ACC-3).
-- One row per account of the tree, implied parents included; `id` is the
-- engine's account id (parents before children: path order for the seed,
-- then creation order), `spec` the declaration as JSON, NULL for an account
-- only implied by a path. The first start of a server with this version
-- fills it from the config and the overrides of `account_overrides`; from
-- then on the store is the truth and the config's [[accounts]] only seed.
CREATE TABLE accounts (
    id BIGINT PRIMARY KEY,
    path TEXT NOT NULL UNIQUE,
    spec TEXT,
    updated_t BIGINT NOT NULL
);
