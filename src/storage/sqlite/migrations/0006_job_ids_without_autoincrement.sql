-- Migration 6: job ids without AUTOINCREMENT. Frozen once released; schema.sql holds the
-- same objects.
--
-- AUTOINCREMENT wrote its sequence row (one more page) on every insert statement: measured,
-- a quarter of a single-job enqueue. Ids stay never reused by a cheaper rule: SQLite gives a
-- new row one more than the largest id in the table, and the newest row is never deleted
-- (litejobs' own deletes skip it; for other programs, jobs_newest_kept below ignores such a
-- delete). The table is rebuilt, as SQLite cannot drop AUTOINCREMENT in place.

ALTER TABLE jobs RENAME TO jobs_before_v6;

CREATE TABLE jobs (
    id INTEGER PRIMARY KEY,
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
    created_at, updated_at, started_at, finished_at, locked_by, locked_until, last_error,
    last_status_code, idempotency_key, group_key, timeout_ms, result, progress, requeued_by,
    requeued_at, requeue_reason, requeued_as)
SELECT id, queue, job_type, payload, status, priority, attempts, max_attempts, run_at,
    created_at, updated_at, started_at, finished_at, locked_by, locked_until, last_error,
    last_status_code, idempotency_key, group_key, timeout_ms, result, progress, requeued_by,
    requeued_at, requeue_reason, requeued_as
FROM jobs_before_v6;

-- The old sequence may be past the largest id left (the newest jobs were pruned): a finished
-- placeholder row holds that id, so no id handed out before is handed out again. It is an
-- ordinary cancelled job that says what it is; retention removes it once newer jobs exist.
INSERT INTO jobs (id, queue, job_type, payload, status, run_at, created_at, updated_at,
                  finished_at, last_error)
SELECT s.seq, 'default', 'litejobs.id_placeholder', '{}', 'cancelled', t.now_ms, t.now_ms,
       t.now_ms, t.now_ms,
       'placeholder holding job id ' || s.seq || ', the largest id handed out before the '
       || 'upgrade to schema version 6, so that ids are never reused'
FROM sqlite_sequence s,
     (SELECT CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER) AS now_ms) t
WHERE s.name = 'jobs_before_v6' AND s.seq > COALESCE((SELECT MAX(id) FROM jobs), 0);

INSERT INTO job_counts (queue, job_type, status, n)
SELECT queue, job_type, status, 1 FROM jobs WHERE job_type = 'litejobs.id_placeholder'
ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + 1;

-- Its indexes and triggers go with it.
DROP TABLE jobs_before_v6;

CREATE INDEX jobs_due_idx ON jobs (queue, priority DESC, run_at, id, job_type, status)
    WHERE status IN ('queued', 'failed');

CREATE UNIQUE INDEX jobs_idempotency_key_idx ON jobs (idempotency_key)
    WHERE idempotency_key IS NOT NULL AND status IN ('queued', 'running', 'failed', 'succeeded');

CREATE INDEX jobs_group_key_idx ON jobs (group_key, status)
    WHERE group_key IS NOT NULL;

CREATE INDEX jobs_running_lease_idx ON jobs (locked_until)
    WHERE status = 'running';

CREATE INDEX jobs_finished_idx ON jobs (status, finished_at)
    WHERE finished_at IS NOT NULL;

CREATE INDEX jobs_errors_idx ON jobs (last_error, status, job_type, updated_at)
    WHERE last_error IS NOT NULL AND status IN ('failed', 'dead') AND requeued_as IS NULL;

CREATE INDEX jobs_requeued_idx ON jobs (requeued_as) WHERE requeued_as IS NOT NULL;

CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs
    WHEN NEW.status = 'succeeded' OR NEW.status = 'dead' OR NEW.status = 'cancelled'
BEGIN
    INSERT INTO job_counts (queue, job_type, status, n)
    VALUES (NEW.queue, NEW.job_type, NEW.status, 1)
    ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_counted_update AFTER UPDATE OF status, queue, job_type ON jobs
    WHEN OLD.status = 'succeeded' OR OLD.status = 'dead' OR OLD.status = 'cancelled'
      OR NEW.status = 'succeeded' OR NEW.status = 'dead' OR NEW.status = 'cancelled'
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE (OLD.status = 'succeeded' OR OLD.status = 'dead' OR OLD.status = 'cancelled')
      AND queue = OLD.queue AND job_type = OLD.job_type AND status = OLD.status;
    INSERT INTO job_counts (queue, job_type, status, n)
    SELECT NEW.queue, NEW.job_type, NEW.status, 1
    WHERE NEW.status = 'succeeded' OR NEW.status = 'dead' OR NEW.status = 'cancelled'
    ON CONFLICT (queue, job_type, status) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_counted_delete AFTER DELETE ON jobs
    WHEN OLD.status = 'succeeded' OR OLD.status = 'dead' OR OLD.status = 'cancelled'
BEGIN
    UPDATE job_counts SET n = n - 1
    WHERE queue = OLD.queue AND job_type = OLD.job_type AND status = OLD.status;
END;

CREATE TRIGGER jobs_attempts_uncounted BEFORE DELETE ON jobs
    WHEN OLD.id < (SELECT MAX(id) FROM jobs)
BEGIN
    INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT OLD.job_type, outcome, -COUNT(*) FROM job_attempts WHERE job_id = OLD.id
    GROUP BY outcome
    ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n;
END;

CREATE TRIGGER jobs_attempts_retyped AFTER UPDATE OF job_type ON jobs
    WHEN OLD.job_type IS NOT NEW.job_type
BEGIN
    INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT OLD.job_type, outcome, -COUNT(*) FROM job_attempts WHERE job_id = OLD.id
    GROUP BY outcome
    ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n;
    INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT NEW.job_type, outcome, COUNT(*) FROM job_attempts WHERE job_id = NEW.id
    GROUP BY outcome
    ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n;
END;

-- Keeps ids from being reused when another program deletes jobs: a delete of the newest row
-- is skipped (the rest of the statement goes on). litejobs' own deletes skip it themselves.
CREATE TRIGGER jobs_newest_kept BEFORE DELETE ON jobs
    WHEN OLD.id >= (SELECT MAX(id) FROM jobs)
BEGIN
    SELECT RAISE(IGNORE);
END;
