-- Migration 3: report runs and periodic job slots. Frozen once released;
-- schema.sql holds the same statements.

-- One requested report: what a UI polls for progress and the result to download.
CREATE TABLE report_runs (
    -- Row id, never reused (AUTOINCREMENT): job payloads and download links refer to it.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The report kind, as registered on the worker (e.g. 'activity'). Required.
    kind TEXT NOT NULL,
    -- The request's parameters (JSON text).
    params TEXT NOT NULL DEFAULT '{}',
    -- processing, then ready (result below) or failed (error below).
    state TEXT NOT NULL DEFAULT 'processing',
    -- Chunks planned, chunks finished, and the rows they produced so far.
    chunks_total INTEGER NOT NULL DEFAULT 0,
    chunks_done INTEGER NOT NULL DEFAULT 0,
    rows_done INTEGER NOT NULL DEFAULT 0,
    -- The result: a file written by the finishing job (NULL when the rows are kept in
    -- report_rows only), and its row count.
    result_path TEXT,
    result_rows INTEGER,
    -- Why the run failed.
    error TEXT,
    -- The jobs that planned the chunks and that finish the run.
    request_job_id INTEGER,
    finish_job_id INTEGER,
    -- When the chunks were planned (ms); NULL until then.
    planned_at INTEGER,
    -- When the row was inserted and last changed (ms).
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- When the run became ready or failed (ms).
    finished_at INTEGER,
    CONSTRAINT report_runs_state_valid CHECK (state = 'processing' OR state = 'ready' OR state = 'failed')
);

-- A UI lists the latest runs of a kind.
CREATE INDEX report_runs_kind_created_idx ON report_runs (kind, created_at);

-- A retried request job finds the run it already created.
CREATE UNIQUE INDEX report_runs_request_job_idx ON report_runs (request_job_id)
    WHERE request_job_id IS NOT NULL;

-- The chunks of a run: each is done once, whatever the retries of its job.
CREATE TABLE report_chunks (
    run_id INTEGER NOT NULL REFERENCES report_runs (id) ON DELETE CASCADE,
    -- Chunk number, from 0.
    chunk INTEGER NOT NULL,
    -- What the chunk covers (JSON text: a page, a key range). Required.
    spec TEXT NOT NULL,
    -- pending, then done.
    state TEXT NOT NULL DEFAULT 'pending',
    -- Rows the chunk produced.
    row_count INTEGER NOT NULL DEFAULT 0,
    -- The job that runs the chunk.
    job_id INTEGER,
    -- When the chunk was done (ms).
    finished_at INTEGER,
    PRIMARY KEY (run_id, chunk),
    CONSTRAINT report_chunks_state_valid CHECK (state = 'pending' OR state = 'done')
) WITHOUT ROWID;

-- The rows of a run, in (chunk, seq) order: written with their chunk in one transaction.
CREATE TABLE report_rows (
    run_id INTEGER NOT NULL REFERENCES report_runs (id) ON DELETE CASCADE,
    chunk INTEGER NOT NULL,
    -- Position within the chunk, from 0.
    seq INTEGER NOT NULL,
    -- One row as JSON text (an array of fields, or an object).
    data TEXT NOT NULL,
    PRIMARY KEY (run_id, chunk, seq)
) WITHOUT ROWID;

-- Periodic schedules: the latest slot enqueued per schedule, shared by every process so
-- that each slot is enqueued once.
CREATE TABLE periodic_schedules (
    -- The schedule's name (by default its job type).
    name TEXT PRIMARY KEY NOT NULL,
    -- The cron expression or interval, for people.
    schedule TEXT NOT NULL DEFAULT '',
    -- Slots up to this time (ms) are handled: enqueued, or skipped by the missed-slot rule.
    last_slot_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- The job enqueued for the latest slot.
    last_job_id INTEGER,
    -- The next slot (ms), for people.
    next_slot_at INTEGER,
    -- When the row last changed (ms).
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;
