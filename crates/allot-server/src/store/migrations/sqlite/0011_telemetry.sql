-- Allot store schema, version 11 (SQLite): GPU telemetry per attempt, the
-- summary of its samples ([telemetry] of the config), updated with the
-- scheduler's batched writes as samples arrive (not one row per sample):
-- samples taken, seconds they cover, mean utilization (0..1, NULL: never
-- measured), seconds below the idle threshold, the most GPU memory used on
-- one of its GPUs (MiB) and the time of the last sample. Attempts recorded
-- before, or never measured, have 0 samples.
ALTER TABLE attempts ADD COLUMN gpu_samples BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN gpu_measured_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN gpu_util_mean DOUBLE PRECISION;
ALTER TABLE attempts ADD COLUMN gpu_idle_s BIGINT NOT NULL DEFAULT 0;
ALTER TABLE attempts ADD COLUMN gpu_mem_max_mib BIGINT;
ALTER TABLE attempts ADD COLUMN gpu_sample_t BIGINT;
