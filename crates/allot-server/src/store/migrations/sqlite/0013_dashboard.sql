-- Allot store schema, version 13: the web dashboard.
-- sessions: a signed-in browser (docs/dashboard.md). Only the SHA-256 of the
-- session cookie is kept, with the hash of the API token it was opened with
-- (a revoked token ends its sessions), the session's CSRF token and its
-- expiry (Unix seconds).
-- gpu_samples: an attempt's GPU utilization over time for the dashboard, at
-- most one point per attempt and sample bucket (docs/server.md, "GPU
-- telemetry"): mean utilization of its GPUs (0..1) and the most memory used
-- on one of them (MiB).
CREATE TABLE sessions (
    hash TEXT PRIMARY KEY,
    token_hash TEXT NOT NULL,
    csrf TEXT NOT NULL,
    created_t BIGINT NOT NULL,
    expires_t BIGINT NOT NULL
);
CREATE INDEX sessions_expiry ON sessions (expires_t);
CREATE TABLE gpu_samples (
    workload BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    t BIGINT NOT NULL,
    util DOUBLE PRECISION NOT NULL,
    mem_mib BIGINT,
    PRIMARY KEY (workload, attempt, t)
);
-- The dashboard's windows of history and burn-downs read attempts, workloads
-- and node events by time.
CREATE INDEX attempts_start ON attempts (start_t);
CREATE INDEX attempts_end ON attempts (end_t);
CREATE INDEX workloads_submit ON workloads (submit_t);
CREATE INDEX node_events_t ON node_events (t);
