-- Allot store schema, version 12 (sqlite): what running workloads report.
-- workloads.checkpoint_on_signal: it saves when signalled (CON-8; 0 or 1).
-- attempts: checkpoints reported (CON-7), the last one's time and the
-- progress of the attempt it saved; the idle warning's time and the time
-- it was to be stopped at (CON-9; NULL: not warned, or the warning was
-- withdrawn).
ALTER TABLE workloads ADD COLUMN checkpoint_on_signal BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN checkpoints BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN checkpoint_t BIGINT;
ALTER TABLE attempts ADD COLUMN checkpoint_saved_s BIGINT;
ALTER TABLE attempts ADD COLUMN idle_warning_t BIGINT;
ALTER TABLE attempts ADD COLUMN idle_reclaim_t BIGINT;
