-- Allot store schema, version 9 (PostgreSQL): the time limit of a workload (rule
-- CON-6), seconds of running time per attempt as validated at submission
-- (the class's default included); NULL: no limit. Existing workloads have none.
ALTER TABLE workloads ADD COLUMN time_limit_s BIGINT;
