-- Allot store schema, version 7 (SQLite): budget threshold events, each once
-- per account, budget period and threshold (the unique key; a restarted
-- server that notices one again inserts nothing and posts nothing).
CREATE TABLE budget_events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    t BIGINT NOT NULL,
    account TEXT NOT NULL,
    period_start_t BIGINT NOT NULL,
    threshold DOUBLE PRECISION NOT NULL,
    used_gpu_hours DOUBLE PRECISION NOT NULL,
    budget_gpu_hours DOUBLE PRECISION NOT NULL,
    UNIQUE (account, period_start_t, threshold)
);
