-- litejobs schema, version 12: the contract for programs in any language.
--
-- Apply it to an empty file with `sqlite3 app.db < schema.sql` (or let `litejobs --db app.db
-- init` make the file: no sqlite3 needed); litejobs then opens the file as current. Its last
-- statement, `PRAGMA journal_mode = WAL` (sqlite3 prints "wal"), puts the file in the WAL mode
-- litejobs needs, so readers and the writer do not block each other; the mode is stored in
-- the file and stays. A tool that runs this file inside one transaction cannot change the
-- mode (SQLite keeps it as it was, without an error): run that PRAGMA once on its own, or
-- `litejobs --db app.db init`, which switches it. litejobs itself creates the same schema
-- through its migrations, and a test proves the two agree.
--
-- Times are integers: milliseconds since 1970-01-01 UTC. Every column but `job_type` and
-- `payload` has a default, so the smallest valid job is
--
--     INSERT INTO jobs (job_type, payload) VALUES ('deliver_webhook', '{"event_id": 7}');
--
-- The defaults and the CHECK rules use only functions that SQLite 3.31 and older understand,
-- so old system SQLite (Python, PHP, Go) can insert.
--
-- A job that waits for others: insert it and its job_deps rows in one transaction (each row:
-- job_id waits for depends_on; any_outcome = 1 runs it however that job ends), e.g. for job 41
--
--     INSERT INTO jobs (job_type, payload) VALUES ('ship_order', '{"order_id": 1042}');
--     INSERT INTO job_deps (job_id, depends_on) VALUES (last_insert_rowid(), 41);
--
-- The job_deps triggers (at the end of this file) hold it until job 41 has succeeded
-- (waiting_for, run_at 99999999999999 and held_run_at: leave them to the triggers), settle the
-- row at once when job 41 has already ended (one that ended dead or cancelled cancels the
-- job), and refuse a wait on a job that does not exist ("job_deps: the job waited for
-- (depends_on) does not exist"): roll back then. Workflows and batches are rows of
-- `workflows` that jobs name in workflow_id (with their step name); docs/schema.md shows all
-- of it.
-- Statuses: queued, running, succeeded, failed (an attempt failed, the next one is
-- scheduled at run_at), dead (attempts spent or a permanent error), cancelled.
--
-- Rows are checked at the door. A wrongly typed insert fails at once in the inserting program
-- with "CHECK constraint failed: RULE", where RULE is one of (each applies to live rows:
-- queued, running, failed):
--   jobs_queue_text             queue is non-empty text
--   jobs_job_type_text          job_type is non-empty text
--   jobs_payload_text           payload is JSON text, not a BLOB: bind a string, not bytes
--                               (Python's bytes and Go's []byte arrive as a BLOB)
--   jobs_priority_integer       priority is an integer
--   jobs_attempts_integer       attempts is an integer >= 0 (leave it to its default)
--   jobs_max_attempts_positive  max_attempts is an integer >= 1
--   jobs_run_at_ms              run_at is integer milliseconds since 1970: not text such as
--                               '2020-01-01 00:00:00', not a fraction (round it: in Python
--                               int(time.time() * 1000)), not seconds (a value below
--                               created_at / 100, e.g. 1767225600), not micro- or nanoseconds
--                               (100000000000000 or more). Leave it out to run now.
--   jobs_times_ms               created_at and updated_at are integer milliseconds
--   jobs_timeout_ms_positive    timeout_ms is NULL or an integer > 0
--   jobs_idempotency_key_text   idempotency_key is NULL or text, not a BLOB
--   jobs_group_key_text         group_key is NULL or text, not a BLOB
--   jobs_expires_at_ms          expires_at is NULL or integer milliseconds, as run_at
--   jobs_status_valid           status is one of the six words above
-- An integer may also arrive as text ('5', as PHP's PDO binds every value) or as a whole
-- REAL (5.0): SQLite stores it as an integer. The rules are written so that they mean the
-- same in SQLite 3.31, which checks a value before converting it to the column's type, and
-- in later versions, which check it after.
-- What SQLite 3.31 cannot check is checked when a worker claims the row: a payload that is not
-- valid UTF-8 or not valid JSON, or larger than the worker's payload limit, makes the job dead
-- without running, with an error naming the job, the column and what was wrong; every other
-- job keeps flowing. Finished rows (succeeded, dead, cancelled) are exempt from the rules above,
-- so rows an older version let in keep their raw values for a person to inspect.

CREATE TABLE jobs (
    -- Row id, never reused, so a dead job's requeued_as and log lines stay valid after
    -- pruning: a new row gets one more than the largest id, and the newest row is never
    -- deleted (jobs_newest_kept below). Leave it out when inserting.
    id INTEGER PRIMARY KEY,
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
    -- Set when the job was cancelled: who (the name given to `cancel`, `handler` when its
    -- handler returned a cancel, `deadline` when it expired) and why.
    cancelled_by TEXT,
    cancel_reason TEXT,
    -- The job's deadline (ms), NULL for none: a job not started by then never starts; it
    -- ends cancelled, with cancelled_by 'deadline'. A retry that would fall after it ends the
    -- job the same way. An attempt already running is not cut short (its timeout does that).
    expires_at INTEGER CONSTRAINT jobs_expires_at_ms CHECK (expires_at IS NULL
        OR ((typeof(expires_at) = 'integer' OR (typeof(expires_at) = 'real' AND expires_at = CAST(expires_at AS INTEGER))
            OR (typeof(expires_at) = 'text' AND CAST(CAST(expires_at AS INTEGER) AS TEXT) = CAST(expires_at AS TEXT)))
            AND CAST(expires_at AS INTEGER) >= CAST(created_at AS INTEGER) / 100
            AND CAST(expires_at AS INTEGER) < 100000000000000)
        OR status = 'succeeded' OR status = 'dead' OR status = 'cancelled'),
    -- The workflow or batch the job belongs to (workflows.id), and its step name there.
    workflow_id INTEGER,
    step TEXT,
    -- How many of the job's dependencies have not ended yet (plus one while its batch is
    -- open, for a batch's callbacks). While it is above 0 the job is held: its status stays
    -- 'queued', its run_at is 99999999999999 (so it never reads as due or overdue) and
    -- held_run_at keeps the run_at it had; the last dependency to succeed puts that back.
    -- Leave both to the job_deps triggers.
    waiting_for INTEGER NOT NULL DEFAULT 0,
    held_run_at INTEGER,
    -- The fingerprint of last_error (migration 10): its line that matters with numbers, ids
    -- and quoted values blanked. Error groups go by it; litejobs writes it with each error.
    -- A program that writes last_error itself sets it to NULL in the same statement (or to
    -- a key of its own): the row then groups by its whole text.
    error_group TEXT,
    -- The rules listed at the top. Written with ORs: measured to cost almost nothing, where
    -- an IN list halved insert speed; all of them together cost 5-10 % of a bare insert.
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

-- The claim reads due rows of one queue that wait for no other job (waiting_for = 0) in
-- (priority DESC, run_at, id) order, so held jobs are never passed over; the index holds only
-- waiting rows, so finished jobs never slow it down.
-- Its last two columns let the live jobs be counted by type and status from the index alone.
CREATE INDEX jobs_due_idx ON jobs (queue, waiting_for, priority DESC, run_at, id, job_type, status)
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

-- Finished jobs by status and finish time: health and activity windows, retention, listings
-- of dead and cancelled jobs. Only rows with a finish time, so live jobs never touch it.
CREATE INDEX jobs_finished_idx ON jobs (status, finished_at)
    WHERE finished_at IS NOT NULL;

-- Error groups (the most common last errors of failed and dead jobs, by error_group, or by
-- the whole text where a row has none) read this index alone, and the newest job of a group
-- from its second column. It holds only jobs that failed; `last_error IS NOT NULL` first, so
-- the check stops there for the succeeding majority.
CREATE INDEX jobs_errors_idx ON jobs (COALESCE(error_group, last_error), updated_at, status, job_type)
    WHERE last_error IS NOT NULL AND status IN ('failed', 'dead') AND requeued_as IS NULL;

-- Requeued dead jobs (few): dead jobs awaiting a person are the kept dead count less these.
CREATE INDEX jobs_requeued_idx ON jobs (requeued_as) WHERE requeued_as IS NOT NULL;

-- Waiting jobs with a deadline, for the sweep that cancels those past it. Jobs without a
-- deadline never enter it.
CREATE INDEX jobs_expiring_idx ON jobs (expires_at)
    WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed');

-- Counts of finished jobs by queue, type and status (stats read them instead of counting
-- every finished row). litejobs keeps them as jobs finish; the triggers keep them for any
-- other program that inserts, changes or deletes finished rows. Never write to it by hand.
CREATE TABLE job_counts (
    queue TEXT NOT NULL,
    job_type TEXT NOT NULL,
    -- succeeded, dead or cancelled.
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, job_type, status)
) WITHOUT ROWID;

-- litejobs' own connections run with triggers off (SQLITE_DBCONFIG_ENABLE_TRIGGER) and keep
-- the counts themselves, in batches; these triggers keep them for every other program that
-- inserts, changes or deletes finished rows by plain SQL.
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
    -- The error's fingerprint, as jobs.error_group (migration 10; laid out as its ALTER TABLE
    -- leaves the table's text).
    , error_group TEXT);

CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, attempt);

-- When an error was first seen (error groups): attempts with an error only.
CREATE INDEX job_attempts_error_idx ON job_attempts (COALESCE(error_group, error), finished_at)
    WHERE error IS NOT NULL;

-- Attempts in a time window by outcome (health, activity).
CREATE INDEX job_attempts_finished_idx ON job_attempts (finished_at, outcome);

-- Attempt outcomes by job type (the metrics' litejobs_attempts), kept like job_counts so the
-- metrics read a few rows instead of joining the whole history to the jobs. litejobs writes
-- them in the transaction that adds or deletes attempts; the triggers below do the same for
-- other programs. An attempt counts under its job's type, while its job exists.
CREATE TABLE attempt_counts (
    job_type TEXT NOT NULL,
    -- An attempt outcome (see job_attempts.outcome).
    outcome TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (job_type, outcome)
) WITHOUT ROWID;

CREATE TRIGGER job_attempts_counted_insert AFTER INSERT ON job_attempts
BEGIN
    INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT job_type, NEW.outcome, 1 FROM jobs WHERE id = NEW.job_id
    ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + 1;
END;

-- When the job is already gone (a cascade from deleting it), jobs_attempts_uncounted below
-- has taken its attempts off, and the type lookup finds nothing to take off twice.
CREATE TRIGGER job_attempts_counted_delete AFTER DELETE ON job_attempts
BEGIN
    UPDATE attempt_counts SET n = n - 1
    WHERE outcome = OLD.outcome AND job_type = (SELECT job_type FROM jobs WHERE id = OLD.job_id);
END;

CREATE TRIGGER job_attempts_counted_update AFTER UPDATE OF outcome, job_id ON job_attempts
BEGIN
    UPDATE attempt_counts SET n = n - 1
    WHERE outcome = OLD.outcome AND job_type = (SELECT job_type FROM jobs WHERE id = OLD.job_id);
    INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT job_type, NEW.outcome, 1 FROM jobs WHERE id = NEW.job_id
    ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + 1;
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

-- Keeps job ids from being reused (in place of AUTOINCREMENT, which wrote a sequence row on
-- every insert): a delete of the newest row is skipped, the rest of the statement goes on. So
-- `DELETE FROM jobs` leaves the newest job; litejobs' retention removes it once newer jobs
-- exist. (This trigger and the uncounting above are the only ones with a WHEN on the id.)
CREATE TRIGGER jobs_newest_kept BEFORE DELETE ON jobs
    WHEN OLD.id >= (SELECT MAX(id) FROM jobs)
BEGIN
    SELECT RAISE(IGNORE);
END;

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

-- ---------------------------------------------------------------------------------------
-- Webhooks: endpoints, rate limits and circuit breakers (migration 2)
-- ---------------------------------------------------------------------------------------

-- Webhook endpoints: where deliveries go and the secret they are signed with. Secrets
-- live here, never in job payloads or dead-letter rows; a delivery job names its endpoint by id.
CREATE TABLE webhook_endpoints (
    -- Row id, never reused (AUTOINCREMENT): delivery payloads refer to it as endpoint_id.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    -- The target, an http:// or https:// URL. Required.
    url TEXT NOT NULL,
    -- Signing secret, Standard Webhooks form: 'whsec_' + base64 of 24 to 64 random bytes. Required.
    secret TEXT NOT NULL,
    -- While a secret rotates: the old one, also signed with until previous_secret_expires_at (ms).
    previous_secret TEXT,
    previous_secret_expires_at INTEGER,
    -- 1 delivers; 0 makes its deliveries dead at once (e.g. after a 410 Gone), with the reason.
    enabled INTEGER NOT NULL DEFAULT 1,
    disabled_reason TEXT,
    -- At most rate_limit requests per rate_period_ms, spaced evenly; NULL means no limit.
    rate_limit INTEGER,
    rate_period_ms INTEGER NOT NULL DEFAULT 1000,
    -- Free text for people, e.g. 'CRM production'.
    description TEXT NOT NULL DEFAULT '',
    -- When the row was inserted and last changed (ms).
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    CONSTRAINT webhook_endpoints_enabled_valid CHECK (enabled = 0 OR enabled = 1),
    CONSTRAINT webhook_endpoints_rate_valid CHECK ((rate_limit IS NULL OR rate_limit > 0) AND rate_period_ms > 0)
);

-- Rate limits by key, shared by every process on the file. One row per key, e.g.
-- 'webhook-endpoint:3'; the limit itself (n per period) is given by the caller at each check.
CREATE TABLE rate_limits (
    key TEXT PRIMARY KEY NOT NULL,
    -- When the next request may go without waiting (ms); each admitted request moves it on
    -- by period / n (the generic cell rate algorithm).
    next_at INTEGER NOT NULL DEFAULT 0,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;

-- Circuit breakers by key, shared by every process on the file. No row means closed.
CREATE TABLE circuit_breakers (
    key TEXT PRIMARY KEY NOT NULL,
    -- closed (calls go), open (calls wait until open_until), half_open (one probe call is
    -- out until open_until; its success closes the breaker, its failure opens it again).
    state TEXT NOT NULL DEFAULT 'closed',
    -- Failures in a row; a success resets it.
    failures INTEGER NOT NULL DEFAULT 0,
    -- open: when the cool-down ends (ms); half_open: when the probe's turn lapses (ms).
    open_until INTEGER,
    -- When it last opened (ms), and the latest failure's message.
    opened_at INTEGER,
    last_error TEXT,
    updated_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    CONSTRAINT circuit_breakers_state_valid CHECK (state = 'closed' OR state = 'open' OR state = 'half_open')
) WITHOUT ROWID;

-- ---------------------------------------------------------------------------------------
-- Reports and periodic jobs (migration 3)
-- ---------------------------------------------------------------------------------------

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
    -- The job a schedule kept here (migration 9: `litejobs schedule add`, or your own insert)
    -- enqueues at each slot. A NULL job_type marks a schedule a worker's code defines
    -- (`WorkerBuilder::periodic`), whose job is given there. (Laid out as migration 9's
    -- ALTER TABLE leaves the table's text, which a test compares with this file's.)
    , job_type TEXT,
    -- The job's payload (JSON text), queue, priority and attempts.
    payload TEXT NOT NULL DEFAULT '{}',
    queue TEXT NOT NULL DEFAULT 'default',
    priority INTEGER NOT NULL DEFAULT 0,
    max_attempts INTEGER NOT NULL DEFAULT 6) WITHOUT ROWID;

-- ---------------------------------------------------------------------------------------
-- Encrypted payloads (migration 7)
-- ---------------------------------------------------------------------------------------

-- Job types whose payloads every litejobs enqueuer encrypts (`litejobs keys encrypt-type`).
CREATE TABLE encrypted_types (
    job_type TEXT PRIMARY KEY NOT NULL,
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER))
) WITHOUT ROWID;

-- ---------------------------------------------------------------------------------------
-- Workflows, batches and dependencies (migration 8)
-- ---------------------------------------------------------------------------------------

-- The jobs of a workflow or batch, by step name.
CREATE INDEX jobs_workflow_idx ON jobs (workflow_id, step) WHERE workflow_id IS NOT NULL;

-- Workflows (steps that wait for each other) and batches (jobs with callbacks that run when
-- all of them have ended). Their jobs name them in jobs.workflow_id.
CREATE TABLE workflows (
    id INTEGER PRIMARY KEY,
    -- 'workflow' or 'batch'.
    kind TEXT NOT NULL DEFAULT 'workflow',
    -- A name for people, e.g. 'purchase 1042'.
    name TEXT NOT NULL DEFAULT '',
    -- A batch takes jobs while open (1); closing it lets its callbacks run once every job in
    -- it has ended. Always 0 for a workflow.
    open INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL DEFAULT (CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)),
    -- When the batch was closed (ms).
    closed_at INTEGER,
    CONSTRAINT workflows_kind_valid CHECK (kind = 'workflow' OR kind = 'batch')
);

-- The latest workflows first.
CREATE INDEX workflows_created_idx ON workflows (created_at);

-- Dependencies: job_id waits for depends_on. Insert them in the transaction that inserts the
-- waiting job (see the top of schema.sql); the triggers below hold or release it.
CREATE TABLE job_deps (
    -- The waiting job (the dependant).
    job_id INTEGER NOT NULL,
    -- The job it waits for (the dependency).
    depends_on INTEGER NOT NULL,
    -- 1: the dependant runs whatever the dependency's outcome (a clean-up step); 0: a
    -- dependency that ends dead or cancelled cancels the dependant.
    any_outcome INTEGER NOT NULL DEFAULT 0,
    -- pending, then done (the dependency succeeded, or ended at all for any_outcome) or
    -- failed (it ended dead or cancelled, and the dependant was cancelled).
    state TEXT NOT NULL DEFAULT 'pending',
    PRIMARY KEY (job_id, depends_on),
    CONSTRAINT job_deps_state_valid CHECK (state = 'pending' OR state = 'done' OR state = 'failed'),
    CONSTRAINT job_deps_not_itself CHECK (job_id <> depends_on)
) WITHOUT ROWID;

-- The waits on a job, by their state: a batch of jobs that just ended finds the pending
-- waits on them here (by id range: most jobs have none, and that look reads no job row), a
-- requeued job the failed waits it stands in for, and a sweep the pending waits whose job
-- ended without settling them (a status another program changed by hand).
CREATE INDEX job_deps_waits_idx ON job_deps (state, depends_on);

-- litejobs' own connections run with triggers off and do the same in code; these triggers
-- do it for every other program that inserts dependencies by plain SQL: a dependency that
-- does not exist is refused, one that has already ended settles the new row at once, and a
-- dependant with a dependency still to end is held.
CREATE TRIGGER job_deps_checked BEFORE INSERT ON job_deps
BEGIN
    SELECT RAISE(ABORT, 'job_deps: the waiting job (job_id) does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = NEW.job_id);
    SELECT RAISE(ABORT, 'job_deps: the job waited for (depends_on) does not exist')
    WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = NEW.depends_on);
    SELECT RAISE(ABORT, 'job_deps: only a queued job can wait for another')
    WHERE (SELECT status FROM jobs WHERE id = NEW.job_id) <> 'queued';
END;

CREATE TRIGGER job_deps_inserted AFTER INSERT ON job_deps WHEN NEW.state = 'pending'
BEGIN
    UPDATE job_deps SET state = CASE
            WHEN NEW.any_outcome = 1 OR (SELECT status FROM jobs WHERE id = NEW.depends_on) = 'succeeded'
            THEN 'done' ELSE 'failed' END
    WHERE job_id = NEW.job_id AND depends_on = NEW.depends_on
      AND (SELECT status FROM jobs WHERE id = NEW.depends_on) IN ('succeeded', 'dead', 'cancelled');
    UPDATE jobs SET waiting_for = waiting_for + 1,
                    held_run_at = CASE WHEN waiting_for = 0 THEN run_at ELSE held_run_at END,
                    run_at = 99999999999999
    WHERE id = NEW.job_id AND status = 'queued'
      AND (SELECT state FROM job_deps WHERE job_id = NEW.job_id AND depends_on = NEW.depends_on) = 'pending';
    UPDATE jobs SET status = 'cancelled', cancelled_by = 'dependency',
                    cancel_reason = 'dependency job ' || NEW.depends_on || ' ended '
                        || (SELECT status FROM jobs WHERE id = NEW.depends_on),
                    finished_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
                    updated_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
                    run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
    WHERE id = NEW.job_id AND status = 'queued'
      AND (SELECT state FROM job_deps WHERE job_id = NEW.job_id AND depends_on = NEW.depends_on) = 'failed';
END;

-- ---------------------------------------------------------------------------------------
-- The workers registry (migration 11)
-- ---------------------------------------------------------------------------------------

-- Who is working: each running worker keeps its row here (litejobs writes it; read it as
-- you like). A row whose alive_until has passed without stopped_at is a worker that died.
CREATE TABLE workers (
    -- The worker's id, as jobs.locked_by holds it while it runs a job (host:pid:random).
    id TEXT PRIMARY KEY NOT NULL,
    host TEXT NOT NULL DEFAULT '',
    pid INTEGER NOT NULL DEFAULT 0,
    -- The litejobs version it runs.
    version TEXT NOT NULL DEFAULT '',
    -- The queues it works with their handler threads, as a JSON object: {"default": 4}.
    queues TEXT NOT NULL DEFAULT '{}',
    -- The job types it serves, as a JSON array.
    job_types TEXT NOT NULL DEFAULT '[]',
    started_at INTEGER NOT NULL,
    -- Its latest sign of life (ms), and until when it counts as alive without another: a
    -- worker that dies leaves its row, which reads as gone after that time.
    heartbeat_at INTEGER NOT NULL,
    alive_until INTEGER NOT NULL,
    -- When it stopped cleanly (ms); NULL while it runs, or when it died.
    stopped_at INTEGER
) WITHOUT ROWID;

-- ---------------------------------------------------------------------------------------
-- Per-attempt logs (migration 12)
-- ---------------------------------------------------------------------------------------

-- What a job said while it ran, one row per attempt that said something (litejobs writes it
-- with the attempt's outcome; it goes with its job).
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

PRAGMA user_version = 12;

-- Last, after the writes: inside a caller's transaction it is then a no-op rather than the
-- error it is as a transaction's first statement (see the top of this file).
PRAGMA journal_mode = WAL;
