-- Allot store schema, version 17: why an operator drained, failed,
-- undrained or repaired a node (`allot node drain NODE --reason TEXT`, as
-- Slurm's `scontrol update … reason=`). NULL: no reason given (and every
-- event recorded before).
ALTER TABLE node_events ADD COLUMN reason TEXT;
