-- Migration 1: the initial schema. Frozen: later changes go in new files, and schema.sql
-- (the contract for other languages) is kept equal to the result of all of them.
CREATE TABLE jobs (
    -- Row id, never reused (AUTOINCREMENT): a dead job's requeued_as and log lines stay valid after pruning.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- Named queue; each worker queue has its own handler threads.
    queue TEXT NOT NULL DEFAULT 'default',
    -- Which handler runs the job, e.g. 'send_email'. Required.
    job_type TEXT NOT NULL,
    -- The job's arguments as JSON text. Required; kept small (64 KiB by default).
    payload TEXT NOT NULL,
    -- One of the six statuses above. Insert as 'queued' (the default).
    status TEXT NOT NULL DEFAULT 'queued',
    -- Higher runs first within a queue.
    priority INTEGER NOT NULL DEFAULT 0,
    -- Attempts started so far (the running one included).
    attempts INTEGER NOT NULL DEFAULT 0,
    -- After this many attempts a failing job is dead.
    max_attempts INTEGER NOT NULL DEFAULT 6,
    -- When the job is next due (ms). Defaults to now.
    run_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- When the row was inserted (ms).
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- When litejobs last changed the row (ms).
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- When the latest attempt started (ms), NULL before the first.
    started_at INTEGER,
    -- When the job reached succeeded, dead or cancelled (ms).
    finished_at INTEGER,
    -- Lease: the worker running the job, and until when its lease holds (ms).
    locked_by TEXT,
    locked_until INTEGER,
    -- The latest failure's message, and HTTP status code for webhooks.
    last_error TEXT,
    last_status_code INTEGER,
    -- Deduplication key: at most one queued, running, failed or succeeded job holds it.
    idempotency_key TEXT,
    -- At most one job per group key runs at a time (e.g. one per webhook endpoint).
    group_key TEXT,
    -- Per-attempt time limit in ms; NULL takes the job type's or worker's default.
    timeout_ms INTEGER,
    -- What the handler stored as its result (JSON), and its latest progress (JSON).
    result TEXT,
    progress TEXT,
    -- Set on a dead job when a person requeued it: who, when (ms), why, and the new job's id.
    requeued_by TEXT,
    requeued_at INTEGER,
    requeue_reason TEXT,
    requeued_as INTEGER,
    -- Written with ORs: measured to cost almost nothing, where an IN list halved insert speed.
    CONSTRAINT jobs_status_valid CHECK (status = 'queued' OR status = 'running' OR status = 'succeeded'
        OR status = 'failed' OR status = 'dead' OR status = 'cancelled')
);

-- The claim reads due rows of one queue in (priority DESC, run_at, id) order; the index holds
-- only waiting rows, so finished jobs never slow it down.
CREATE INDEX jobs_due_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status IN ('queued', 'failed');

-- Enforces idempotency keys among live and succeeded jobs (dead and cancelled release theirs).
CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('queued', 'running', 'failed', 'succeeded');

-- Per-key ordering: finds the running job and the next due job of a group key.
CREATE INDEX jobs_group_key_idx ON jobs (group_key, status)
    WHERE group_key IS NOT NULL;

-- The reaper finds running jobs whose lease expired.
CREATE INDEX jobs_running_lease_idx ON jobs (locked_until)
    WHERE status = 'running';

-- Listing, stats and retention by status and age.
CREATE INDEX jobs_status_updated_idx ON jobs (status, updated_at);

-- One row per failed, timed-out or released attempt, and per success that followed failures.
CREATE TABLE job_attempts (
    id INTEGER PRIMARY KEY,
    job_id INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    -- Attempt number, starting at 1.
    attempt INTEGER NOT NULL,
    -- The worker that ran it (jobs.locked_by at the time).
    worker TEXT,
    started_at INTEGER,
    finished_at INTEGER NOT NULL,
    -- succeeded, failed, timed_out, released, snoozed, cancelled, dead or lost (lease expired).
    outcome TEXT NOT NULL,
    error TEXT,
    status_code INTEGER,
    duration_ms INTEGER
);

CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, attempt);

-- Idempotency keys of succeeded jobs, remembered for a window, also after the job is pruned.
CREATE TABLE idempotency_keys (
    key TEXT PRIMARY KEY NOT NULL,
    job_id INTEGER NOT NULL,
    completed_at INTEGER NOT NULL,
    -- Forgotten after this time (ms).
    expires_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Queue switches honoured by every process: a paused queue is not claimed from.
CREATE TABLE queues (
    name TEXT PRIMARY KEY NOT NULL,
    paused INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;

