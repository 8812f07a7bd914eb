-- Allot store schema, version 4 (SQLite): tokens get a stable id, and a workload
-- records the id of the token that submitted it (its owner), so a token
-- created later under a revoked token's name owns nothing of the old one's.
-- Existing tokens take the start of their hash as id; existing workloads are
-- owned by the token that has their submitter's name now, if any.
ALTER TABLE tokens ADD COLUMN id TEXT;
UPDATE tokens SET id = substr(hash, 1, 32);
CREATE UNIQUE INDEX tokens_id ON tokens (id);
ALTER TABLE workloads ADD COLUMN owner TEXT;
UPDATE workloads SET owner = (SELECT t.id FROM tokens t WHERE t.name = workloads.submitter);
