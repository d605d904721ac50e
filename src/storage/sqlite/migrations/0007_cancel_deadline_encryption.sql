-- Migration 7: who cancelled a job and why, deadlines, and job types whose payloads are
-- encrypted. Frozen once released; schema.sql holds the same objects.
--
-- Columns are added in place (SQLite puts each after the last column, before the table's
-- rules), so a big file migrates without copying its rows.

-- Set when a job was cancelled: who (a person's name given to `cancel`, `handler` when its
-- handler returned a cancel, `deadline` when it expired before it started) and why.
ALTER TABLE jobs ADD COLUMN cancelled_by TEXT;
ALTER TABLE jobs ADD COLUMN cancel_reason TEXT;

-- The job's deadline (ms): a job not started by then never starts.
ALTER TABLE jobs ADD COLUMN expires_at INTEGER CONSTRAINT jobs_expires_at_ms CHECK (expires_at IS NULL
        OR ((typeof(expires_at) = 'integer' OR (typeof(expires_at) = 'real' AND expires_at = CAST(expires_at AS INTEGER))
            OR (typeof(expires_at) = 'text' AND CAST(CAST(expires_at AS INTEGER) AS TEXT) = CAST(expires_at AS TEXT)))
            AND CAST(expires_at AS INTEGER) >= CAST(created_at AS INTEGER) / 100
            AND CAST(expires_at AS INTEGER) < 100000000000000)
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled');

-- Waiting jobs with a deadline, for the sweep that cancels those past it. Jobs without a
-- deadline never enter it.
CREATE INDEX jobs_expiring_idx ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed');

-- Job types whose payloads every litejobs enqueuer encrypts (`litejobs keys encrypt-type`).
CREATE TABLE encrypted_types (
    job_type TEXT PRIMARY KEY NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;
