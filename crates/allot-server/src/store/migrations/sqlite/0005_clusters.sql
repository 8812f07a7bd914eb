-- Allot store schema, version 5 (SQLite): the clusters of the fleet a workload
-- may run on (rule FLEET-1), names separated by commas as validated at
-- submission; NULL: any cluster. Existing workloads may run anywhere.
ALTER TABLE workloads ADD COLUMN clusters TEXT;
