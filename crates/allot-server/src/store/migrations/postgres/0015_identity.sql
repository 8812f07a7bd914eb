-- Allot store schema, version 15: people as Unix users (docs/security.md).
-- A token may act for a Unix user (a service account) and may expire.
ALTER TABLE tokens ADD COLUMN unix_user TEXT;
ALTER TABLE tokens ADD COLUMN expires_t BIGINT;
-- A person's sessions (allot login): the SHA-256 of the session token,
-- whose it is, how and from where it was opened, and its end.
CREATE TABLE logins (
    hash TEXT PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    unix_user TEXT NOT NULL,
    method TEXT NOT NULL,
    source TEXT NOT NULL,
    created_t BIGINT NOT NULL,
    expires_t BIGINT NOT NULL
);
CREATE INDEX logins_user ON logins (unix_user, created_t);
CREATE INDEX logins_expiry ON logins (expires_t);
-- The Unix user a workload runs as (NULL: the server's own user, under
-- allot serve --single-user).
ALTER TABLE workloads ADD COLUMN run_as TEXT;
