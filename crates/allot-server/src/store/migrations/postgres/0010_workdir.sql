-- Allot store schema, version 10 (PostgreSQL): where a workload's command starts
-- (`workdir`), an absolute path as validated at submission (`allot submit`
-- sends the submitter's current directory, or --chdir); NULL: the server's
-- own working directory. Existing workloads have none, and run as before.
ALTER TABLE workloads ADD COLUMN workdir TEXT;
