-- Allot store schema, version 14 (postgres): a workload's conditions
-- (docs/conditions.md). array_id: the seq of its array's first element
-- (NULL: not an array element), array_index, array_count, array_limit
-- (ARR-1: at most this many elements queued or running; NULL: no limit);
-- depends_on: its dependencies by seq, as `afterok:12:13,afterany:9` (DEP-1; NULL:
-- none); held: on hold (HOLD-1), kept across restarts.
ALTER TABLE workloads ADD COLUMN array_id BIGINT;
ALTER TABLE workloads ADD COLUMN array_index BIGINT;
ALTER TABLE workloads ADD COLUMN array_count BIGINT;
ALTER TABLE workloads ADD COLUMN array_limit BIGINT;
ALTER TABLE workloads ADD COLUMN depends_on TEXT;
ALTER TABLE workloads ADD COLUMN held BIGINT NOT NULL DEFAULT 0;
CREATE INDEX workloads_array ON workloads (array_id, array_index);
