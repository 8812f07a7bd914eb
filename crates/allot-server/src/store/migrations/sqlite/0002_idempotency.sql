-- Allot store schema, version 2 (SQLite): idempotency keys of submissions.
-- Same logical schema as postgres/0002_idempotency.sql.
CREATE TABLE idempotency_keys (
    principal TEXT NOT NULL,
    key TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    workload BIGINT NOT NULL REFERENCES workloads (seq),
    created_t BIGINT NOT NULL,
    PRIMARY KEY (principal, key)
);
