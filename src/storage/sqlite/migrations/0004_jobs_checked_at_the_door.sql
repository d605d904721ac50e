-- Migration 4: rows from other programs are checked at the door. Frozen once released;
-- schema.sql holds the same table.
--
-- SQLite cannot add a CHECK constraint to an existing table, so `jobs` is rebuilt in the
-- migration's one transaction: set aside, created again with the constraints, refilled with
-- every row (same ids), and the old copy dropped. migrate.rs turns foreign_keys off and
-- legacy_alter_table on around it, so job_attempts keeps pointing at `jobs` throughout.
--
-- Rows an older version let in that break a rule, and are still live (queued, running or
-- failed), become dead with an error naming the job, the column and what it held; their raw
-- values are kept for a person to inspect. Fractional times (REAL, e.g. Python's
-- time.time() * 1000), which older versions ran, are rounded down to whole milliseconds.

ALTER TABLE jobs RENAME TO jobs_before_v4;

CREATE TABLE jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    queue TEXT NOT NULL DEFAULT 'default',
    job_type TEXT NOT NULL,
    payload TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'queued',
    priority INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 6,
    run_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    started_at INTEGER,
    finished_at INTEGER,
    locked_by TEXT,
    locked_until INTEGER,
    last_error TEXT,
    last_status_code INTEGER,
    idempotency_key TEXT,
    group_key TEXT,
    timeout_ms INTEGER,
    result TEXT,
    progress TEXT,
    requeued_by TEXT,
    requeued_at INTEGER,
    requeue_reason TEXT,
    requeued_as INTEGER,
    CONSTRAINT jobs_status_valid CHECK (status = 'queued' OR status = 'running' OR status = 'succeeded'
        OR status = 'failed' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_queue_text CHECK ((typeof(queue) <> 'blob' AND queue <> '')
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_job_type_text CHECK ((typeof(job_type) <> 'blob' AND job_type <> '')
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_payload_text CHECK (typeof(payload) <> 'blob'
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_priority_integer CHECK ((typeof(priority) = 'integer' OR (typeof(priority) = 'real' AND priority = CAST(priority AS INTEGER))
            OR (typeof(priority) = 'text' AND CAST(CAST(priority AS INTEGER) AS TEXT) = CAST(priority AS TEXT)))
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_attempts_integer CHECK (((typeof(attempts) = 'integer' OR (typeof(attempts) = 'real' AND attempts = CAST(attempts AS INTEGER))
            OR (typeof(attempts) = 'text' AND CAST(CAST(attempts AS INTEGER) AS TEXT) = CAST(attempts AS TEXT)))
            AND CAST(attempts AS INTEGER) >= 0)
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_max_attempts_positive CHECK (((typeof(max_attempts) = 'integer' OR (typeof(max_attempts) = 'real' AND max_attempts = CAST(max_attempts AS INTEGER))
            OR (typeof(max_attempts) = 'text' AND CAST(CAST(max_attempts AS INTEGER) AS TEXT) = CAST(max_attempts AS TEXT)))
            AND CAST(max_attempts AS INTEGER) >= 1)
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_run_at_ms CHECK (((typeof(run_at) = 'integer' OR (typeof(run_at) = 'real' AND run_at = CAST(run_at AS INTEGER))
            OR (typeof(run_at) = 'text' AND CAST(CAST(run_at AS INTEGER) AS TEXT) = CAST(run_at AS TEXT)))
            AND CAST(run_at AS INTEGER) >= CAST(created_at AS INTEGER) / 100
            AND CAST(run_at AS INTEGER) < 100000000000000)
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_times_ms CHECK (((typeof(created_at) = 'integer' OR (typeof(created_at) = 'real' AND created_at = CAST(created_at AS INTEGER))
            OR (typeof(created_at) = 'text' AND CAST(CAST(created_at AS INTEGER) AS TEXT) = CAST(created_at AS TEXT)))
            AND (typeof(updated_at) = 'integer' OR (typeof(updated_at) = 'real' AND updated_at = CAST(updated_at AS INTEGER))
            OR (typeof(updated_at) = 'text' AND CAST(CAST(updated_at AS INTEGER) AS TEXT) = CAST(updated_at AS TEXT))))
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_timeout_ms_positive CHECK ((timeout_ms IS NULL OR ((typeof(timeout_ms) = 'integer' OR (typeof(timeout_ms) = 'real' AND timeout_ms = CAST(timeout_ms AS INTEGER))
            OR (typeof(timeout_ms) = 'text' AND CAST(CAST(timeout_ms AS INTEGER) AS TEXT) = CAST(timeout_ms AS TEXT)))
            AND CAST(timeout_ms AS INTEGER) > 0))
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_idempotency_key_text CHECK (typeof(idempotency_key) <> 'blob'
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    CONSTRAINT jobs_group_key_text CHECK (typeof(group_key) <> 'blob'
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled')
);

INSERT INTO jobs (id, queue, job_type, payload, status, priority, attempts, max_attempts, run_at,
                  created_at, updated_at, started_at, finished_at, locked_by, locked_until,
                  last_error, last_status_code, idempotency_key, group_key, timeout_ms, result,
                  progress, requeued_by, requeued_at, requeue_reason, requeued_as)
SELECT id, queue, job_type, payload,
       CASE WHEN problem IS NULL THEN status ELSE 'dead' END,
       priority, attempts, max_attempts, run_at, created_at,
       CASE WHEN problem IS NULL THEN updated_at ELSE now_ms END,
       started_at,
       CASE WHEN problem IS NULL THEN finished_at ELSE now_ms END,
       CASE WHEN problem IS NULL THEN locked_by END,
       CASE WHEN problem IS NULL THEN locked_until END,
       CASE WHEN problem IS NULL THEN last_error
            ELSE 'job ' || id || ': ' || problem || '; dead without running (found when the '
                 || 'schema was upgraded to version 4, which refuses such rows at insert)' END,
       last_status_code, idempotency_key, group_key, timeout_ms, result, progress, requeued_by,
       requeued_at, requeue_reason, requeued_as
FROM (
    SELECT c.*,
        CASE
            WHEN c.status = 'succeeded' OR c.status = 'dead' OR c.status = 'cancelled' THEN NULL
            WHEN typeof(c.payload) = 'blob' THEN 'column payload holds '
                || upper(typeof(c.payload)) || ' ' || substr(quote(c.payload), 1, 64) || ', not JSON text'
            WHEN typeof(c.queue) = 'blob' OR c.queue = '' THEN 'column queue holds '
                || upper(typeof(c.queue)) || ' ' || substr(quote(c.queue), 1, 64) || ', not a queue name'
            WHEN typeof(c.job_type) = 'blob' OR c.job_type = '' THEN 'column job_type holds '
                || upper(typeof(c.job_type)) || ' ' || substr(quote(c.job_type), 1, 64) || ', not a job type'
            WHEN typeof(c.priority) <> 'integer' THEN 'column priority holds '
                || upper(typeof(c.priority)) || ' ' || substr(quote(c.priority), 1, 64) || ', not an integer'
            WHEN typeof(c.attempts) <> 'integer' OR c.attempts < 0 THEN 'column attempts holds '
                || upper(typeof(c.attempts)) || ' ' || substr(quote(c.attempts), 1, 64)
                || ', not an integer of at least 0'
            WHEN typeof(c.max_attempts) <> 'integer' OR c.max_attempts < 1 THEN 'column max_attempts holds '
                || upper(typeof(c.max_attempts)) || ' ' || substr(quote(c.max_attempts), 1, 64)
                || ', not an integer of at least 1'
            WHEN typeof(c.created_at) <> 'integer' OR typeof(c.updated_at) <> 'integer' THEN
                'columns created_at and updated_at hold ' || upper(typeof(c.created_at)) || ' '
                || substr(quote(c.created_at), 1, 64) || ' and ' || upper(typeof(c.updated_at)) || ' '
                || substr(quote(c.updated_at), 1, 64) || ', not integer milliseconds'
            WHEN typeof(c.run_at) <> 'integer' THEN 'column run_at holds '
                || upper(typeof(c.run_at)) || ' ' || substr(quote(c.run_at), 1, 64)
                || ', not integer milliseconds since 1970'
            WHEN c.run_at < c.created_at / 100 THEN 'column run_at holds ' || c.run_at
                || ', which looks like seconds, not milliseconds since 1970'
            WHEN c.run_at >= 100000000000000 THEN 'column run_at holds ' || c.run_at
                || ', past the year 5000: microseconds or nanoseconds, not milliseconds'
            WHEN c.timeout_ms IS NOT NULL AND (typeof(c.timeout_ms) <> 'integer' OR c.timeout_ms < 1)
                THEN 'column timeout_ms holds ' || upper(typeof(c.timeout_ms)) || ' '
                || substr(quote(c.timeout_ms), 1, 64) || ', not NULL or a positive integer'
            WHEN typeof(c.idempotency_key) = 'blob' THEN
                'column idempotency_key holds ' || upper(typeof(c.idempotency_key)) || ' '
                || substr(quote(c.idempotency_key), 1, 64) || ', not NULL or text'
            WHEN typeof(c.group_key) = 'blob' THEN
                'column group_key holds ' || upper(typeof(c.group_key)) || ' '
                || substr(quote(c.group_key), 1, 64) || ', not NULL or text'
        END AS problem,
        CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS now_ms
    FROM (
        SELECT id, queue, job_type, payload, status, priority, attempts, max_attempts,
            CASE WHEN typeof(run_at) = 'real' THEN CAST(run_at AS INTEGER) ELSE run_at END AS run_at,
            CASE WHEN typeof(created_at) = 'real' THEN CAST(created_at AS INTEGER) ELSE created_at END
                AS created_at,
            CASE WHEN typeof(updated_at) = 'real' THEN CAST(updated_at AS INTEGER) ELSE updated_at END
                AS updated_at,
            CASE WHEN typeof(started_at) = 'real' THEN CAST(started_at AS INTEGER) ELSE started_at END
                AS started_at,
            CASE WHEN typeof(finished_at) = 'real' THEN CAST(finished_at AS INTEGER) ELSE finished_at END
                AS finished_at,
            locked_by,
            CASE WHEN typeof(locked_until) = 'real' THEN CAST(locked_until AS INTEGER) ELSE locked_until END
                AS locked_until,
            last_error, last_status_code, idempotency_key, group_key,
            CASE WHEN typeof(timeout_ms) = 'real' THEN CAST(timeout_ms AS INTEGER) ELSE timeout_ms END
                AS timeout_ms,
            result, progress, requeued_by, requeued_at, requeue_reason, requeued_as
        FROM jobs_before_v4
    ) AS c
);

-- Ids are never reused (AUTOINCREMENT): carry the old sequence over, which may be past the
-- largest id left (the newest jobs may have been pruned).
INSERT INTO sqlite_sequence (name, seq)
    SELECT 'jobs', 0 WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'jobs');
UPDATE sqlite_sequence
    SET seq = MAX(seq, COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'jobs_before_v4'), 0))
    WHERE name = 'jobs';

DROP TABLE jobs_before_v4;

-- The indexes of migration 1, unchanged.
CREATE INDEX jobs_due_idx ON jobs (queue, priority DESC, run_at, id)
    WHERE status IN ('queued', 'failed');

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('queued', 'running', 'failed', 'succeeded');

CREATE INDEX jobs_group_key_idx ON jobs (group_key, status)
    WHERE group_key IS NOT NULL;

CREATE INDEX jobs_running_lease_idx ON jobs (locked_until)
    WHERE status = 'running';

CREATE INDEX jobs_status_updated_idx ON jobs (status, updated_at);
