-- Migration 8: jobs that wait for other jobs (dependencies), workflows and batches. Frozen
-- once released; schema.sql holds the same objects.
--
-- Columns are added in place, so a big file migrates without copying its rows.

-- The workflow or batch the job belongs to (workflows.id), and its step name there.
ALTER TABLE jobs ADD COLUMN workflow_id INTEGER;
ALTER TABLE jobs ADD COLUMN step TEXT;
-- How many of the job's dependencies have not ended yet (plus one while its batch is open,
-- for a batch's callbacks). While it is above 0 the job is held: its status stays 'queued',
-- its run_at is 99999999999999 (so it never reads as due or overdue) and held_run_at keeps
-- the run_at it had; the last dependency to succeed puts that back.
ALTER TABLE jobs ADD COLUMN waiting_for INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN held_run_at INTEGER;

-- The claim's index gains waiting_for after the queue: a claim reads the jobs waiting for
-- nothing (waiting_for = 0) in claim order, and never passes over held jobs, however many.
DROP INDEX jobs_due_idx;
CREATE INDEX jobs_due_idx ON jobs (queue, waiting_for, priority DESC, run_at, id, job_type, status)
    WHERE status IN ('queued', 'failed');

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
