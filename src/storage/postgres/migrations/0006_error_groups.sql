-- Migration 6: failures grouped by fingerprint. litejobs writes, beside each error, its
-- fingerprint: the line that matters (a traceback's exception line, the last line of a
-- command's stderr) with numbers, ids and quoted values blanked, so that one outage is one
-- group however much each job's text differs. Rows without one (written before this
-- version, or by another program) group by their whole text, as before.
-- Frozen once released; schema.pg.sql holds the same objects.

ALTER TABLE jobs ADD COLUMN error_group TEXT;
ALTER TABLE job_attempts ADD COLUMN error_group TEXT;

DROP INDEX jobs_errors_idx;
CREATE INDEX jobs_errors_idx ON jobs ((COALESCE(error_group, last_error)), updated_at, status, job_type)
    WHERE last_error IS NOT NULL AND status IN ('failed', 'dead') AND requeued_as IS NULL;

DROP INDEX job_attempts_error_idx;
CREATE INDEX job_attempts_error_idx ON job_attempts ((COALESCE(error_group, error)), finished_at)
    WHERE error IS NOT NULL;
