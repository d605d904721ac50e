-- Migration 8: what a job said while it ran, kept with each attempt (lines its handler
-- logged, a command's stderr), for `litejobs show ID` and the dashboard's job page.
-- Deleted with its job. Frozen once released; schema.pg.sql holds the same objects.

CREATE TABLE job_logs (
    job_id BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- The attempt that said it.
    attempt BIGINT NOT NULL,
    -- Its newest 32 KiB, oldest line first.
    log TEXT NOT NULL,
    -- Bytes left out before it.
    cut BIGINT NOT NULL DEFAULT 0,
    -- When the attempt's outcome was written (ms).
    written_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, attempt)
);
