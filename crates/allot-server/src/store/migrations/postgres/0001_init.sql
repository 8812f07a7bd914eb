-- Allot store schema, version 1 (PostgreSQL). Same logical schema as sqlite/0001_init.sql.
CREATE TABLE workloads (
    seq BIGSERIAL PRIMARY KEY,
    submit_t BIGINT NOT NULL,
    account TEXT NOT NULL,
    submitter TEXT NOT NULL,
    class TEXT NOT NULL,
    gpus BIGINT NOT NULL,
    nodes BIGINT NOT NULL,
    gpu_type TEXT,
    work_s BIGINT NOT NULL,
    checkpoint_s BIGINT NOT NULL,
    util DOUBLE PRECISION NOT NULL,
    priority TEXT NOT NULL,
    preemptible BIGINT NOT NULL,
    name TEXT,
    command TEXT NOT NULL,
    env TEXT NOT NULL,
    retries BIGINT NOT NULL,
    failures BIGINT NOT NULL DEFAULT 0,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    state TEXT NOT NULL,
    reason TEXT,
    end_t BIGINT
);
CREATE INDEX workloads_state ON workloads (state);
CREATE INDEX workloads_account ON workloads (account);
CREATE TABLE attempts (
    workload BIGINT NOT NULL REFERENCES workloads (seq),
    attempt BIGINT NOT NULL,
    alloc TEXT NOT NULL,
    gpus BIGINT NOT NULL,
    weight DOUBLE PRECISION NOT NULL,
    state TEXT NOT NULL,
    start_t BIGINT NOT NULL,
    start_reason TEXT NOT NULL,
    signal_t BIGINT,
    signal_reason TEXT,
    end_t BIGINT,
    outcome TEXT,
    exit_code BIGINT,
    kept_s BIGINT,
    pid BIGINT,
    log_path TEXT NOT NULL,
    PRIMARY KEY (workload, attempt)
);
CREATE INDEX attempts_state ON attempts (state);
CREATE TABLE node_events (
    seq BIGSERIAL PRIMARY KEY,
    t BIGINT NOT NULL,
    node TEXT NOT NULL,
    kind TEXT NOT NULL,
    principal TEXT NOT NULL
);
CREATE TABLE account_overrides (
    path TEXT PRIMARY KEY,
    budget_gpu_hours DOUBLE PRECISION,
    budget_set BIGINT NOT NULL DEFAULT 0,
    share DOUBLE PRECISION,
    share_set BIGINT NOT NULL DEFAULT 0,
    updated_t BIGINT NOT NULL
);
CREATE TABLE tokens (
    name TEXT PRIMARY KEY,
    hash TEXT NOT NULL UNIQUE,
    role TEXT NOT NULL,
    scope TEXT,
    created_t BIGINT NOT NULL,
    created_by TEXT NOT NULL
);
CREATE TABLE grants (
    principal TEXT NOT NULL,
    account TEXT NOT NULL,
    PRIMARY KEY (principal, account)
);
CREATE TABLE audit (
    seq BIGSERIAL PRIMARY KEY,
    t BIGINT NOT NULL,
    principal TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    before_value TEXT,
    after_value TEXT
);
CREATE TABLE meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
