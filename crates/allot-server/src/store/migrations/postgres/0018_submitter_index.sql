-- Allot store schema, version 18: workloads by submitter, so that a share
-- or budget set for a user (FS-2, BUD-6) can check that the user is known
-- here without reading every workload.
CREATE INDEX workloads_submitter ON workloads (submitter);
