-- Allot store schema, version 6 (SQLite): the cluster of the fleet an attempt
-- ran on (its nodes'; a gang never spans clusters), so views, filters and
-- the export need not derive it from node names (which an executor may set,
-- e.g. to Slurm's). NULL: a fleet of one, or an attempt recorded before.
ALTER TABLE attempts ADD COLUMN cluster TEXT;
