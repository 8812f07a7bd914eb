-- Allot store schema, version 3: the lease of the one active server.
-- One row (id = 1). `epoch` grows by one at every takeover; every write of
-- a serving process checks it (the fencing token). Times are milliseconds
-- of the database's clock.
CREATE TABLE lease (
    id BIGINT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    host TEXT NOT NULL,
    pid BIGINT NOT NULL,
    listen TEXT NOT NULL,
    since_ms BIGINT NOT NULL,
    renewed_ms BIGINT NOT NULL,
    expires_ms BIGINT NOT NULL
);
INSERT INTO lease (id, epoch, host, pid, listen, since_ms, renewed_ms, expires_ms) VALUES (1, 0, '', 0, '', 0, 0, 0);
