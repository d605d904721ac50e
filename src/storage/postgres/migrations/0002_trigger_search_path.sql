-- Migration 2: the counting triggers find their tables from any connection. Frozen once
-- released; schema.pg.sql holds the same objects.
--
-- A trigger function runs with the search path of the connection that fired it, and these name
-- job_counts, attempt_counts and job_attempts without a schema: a plain-SQL insert from a
-- connection that had not put litejobs' schema on its path (`psql` with no settings) failed with
-- `relation "job_counts" does not exist`. Each function now carries the path it was created
-- under (the migration runs with litejobs' schema on it, whatever its name). The cost is one
-- setting per statement-level firing, and per deleted job for the row-level one.
ALTER FUNCTION jobs_count_changes() SET search_path FROM CURRENT;
ALTER FUNCTION job_attempts_count_changes() SET search_path FROM CURRENT;
ALTER FUNCTION jobs_attempts_uncount() SET search_path FROM CURRENT;
