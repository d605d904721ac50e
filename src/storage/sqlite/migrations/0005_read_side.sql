-- Migration 5: what the read side (stats, metrics, check, the dashboard) needs to answer in
-- milliseconds at a million rows without slowing enqueue or claim. Frozen once released;
-- schema.sql holds the same objects.
--
-- The (status, updated_at) index held every row, so every enqueue added an entry and every
-- claim and completion moved one: measured, it cost a fifth of batched-insert speed and a
-- third of claim-and-complete speed. What it served (jobs finished in a time window for
-- health, activity and metrics; retention; dead and cancelled listings) reads finished rows
-- by status and finish time, so a partial index over rows with a finish time does the same
-- work and costs one entry per job, written once, when it finishes. (`finished_at IS NOT
-- NULL` rather than a status list: a partial index's IN list is evaluated on every insert
-- and update, and measured slower than the full index it replaced.)

DROP INDEX jobs_status_updated_idx;

CREATE INDEX jobs_finished_idx ON jobs (status, finished_at)
    WHERE finished_at IS NOT NULL;

-- Error groups (the most common last errors of failed and dead jobs) read this index alone
-- instead of every row. It holds only jobs that failed; `last_error IS NOT NULL` comes first
-- so the check stops there for the succeeding majority.
CREATE INDEX jobs_errors_idx ON jobs (last_error, status, job_type, updated_at)
    WHERE last_error IS NOT NULL AND status IN ('failed', 'dead') AND requeued_as IS NULL;

-- Requeued dead jobs (few): dead jobs awaiting a person are the kept dead count less these.
CREATE INDEX jobs_requeued_idx ON jobs (requeued_as) WHERE requeued_as IS NOT NULL;

-- When an error was first seen: one probe per error group. Attempts without an error
-- (first-try successes write none at all) stay out of it.
CREATE INDEX job_attempts_error_idx ON job_attempts (error, finished_at)
    WHERE error IS NOT NULL;

-- Failed attempts in a time window (health, activity): a range of this index instead of
-- every attempt in the history.
CREATE INDEX job_attempts_finished_idx ON job_attempts (finished_at, outcome);

-- Counts of finished jobs, kept as they finish, so stats, metrics and the dashboard read a
-- few rows instead of counting every finished job (a million rows took half a second).
-- litejobs adds to them in the transaction that finishes the jobs, one row per queue, type
-- and status per batch, and takes off what it deletes; the triggers below do the same for
-- other programs. Live jobs are counted from the due index, which also carries their type
-- and status for that.
CREATE TABLE job_counts (
    queue TEXT NOT NULL,
    job_type TEXT NOT NULL,
    -- succeeded, dead or cancelled.
    status TEXT NOT NULL,
    n INTEGER NOT NULL,
    PRIMARY KEY (queue, job_type, status)
) WITHOUT ROWID;

INSERT INTO job_counts (queue, job_type, status, n)
    SELECT queue, job_type, status, COUNT(*) FROM jobs
    WHERE status = 'succeeded' OR status = 'dead' OR status = 'cancelled'
    GROUP BY queue, job_type, status;

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

INSERT INTO attempt_counts (job_type, outcome, n)
    SELECT j.job_type, a.outcome, COUNT(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
    GROUP BY j.job_type, a.outcome;

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

DROP INDEX jobs_due_idx;

CREATE INDEX jobs_due_idx ON jobs (queue, priority DESC, run_at, id, job_type, status)
    WHERE status IN ('queued', 'failed');
