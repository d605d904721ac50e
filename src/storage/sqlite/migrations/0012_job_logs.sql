-- Migration 12: what a job said while it ran, kept with each attempt (lines its handler
-- logged, a command's stderr), for `litejobs show ID` and the dashboard's job page.
-- Deleted with its job. Frozen once released; schema.sql holds the same objects.

CREATE TABLE job_logs (
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- The attempt that said it.
    attempt INTEGER NOT NULL,
    -- Its newest 32 KiB, oldest line first.
    log TEXT NOT NULL,
    -- Bytes left out before it.
    cut INTEGER NOT NULL DEFAULT 0,
    -- When the attempt's outcome was written (ms).
    written_at INTEGER NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
