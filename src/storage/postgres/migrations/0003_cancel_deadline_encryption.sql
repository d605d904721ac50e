-- Migration 3: who cancelled a job and why, deadlines, and job types whose payloads are
-- encrypted. Frozen once released; schema.pg.sql holds the same objects.

-- Set when a job was cancelled: who (a person's name given to `cancel`, `handler` when its
-- handler returned a cancel, `deadline` when it expired before it started) and why.
ALTER TABLE jobs ADD COLUMN cancelled_by TEXT;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;

-- The job's deadline (ms): a job not started by then never starts.
ALTER TABLE jobs ADD COLUMN expires_at BIGINT;
ALTER TABLE jobs ADD CONSTRAINT jobs_expires_at_ms
    CHECK (expires_at IS NULL OR (expires_at >= created_at / 100 AND expires_at < 100000000000000));

-- Waiting jobs with a deadline, for the sweep that cancels those past it.
CREATE INDEX jobs_expiring_idx ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed');

-- Job types whose payloads every litejobs enqueuer encrypts (`litejobs keys encrypt-type`).
CREATE TABLE encrypted_types (
    job_type TEXT PRIMARY KEY,
    created_at BIGINT NOT NULL DEFAULT (floor(extract(epoch FROM now()) * 1000)::bigint)
);
