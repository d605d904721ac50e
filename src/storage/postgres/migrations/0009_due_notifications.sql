-- Migration 9: workers are told of every job a write leaves waiting, not only of inserts,
-- and of a queue's pause or resume. Frozen once released; schema.pg.sql holds the same
-- objects.
--
-- An idle worker sleeps until a notification on litejobs_jobs; with no job waiting at all it
-- polls only every few seconds. So an update that leaves a job queued or failed (a retry, a
-- job given back at a worker's shutdown, a reaped lease, a plain-SQL change of run_at)
-- notifies as an insert does, and so does a write to queues. The payload is the schema's name
-- (it was empty): workers of other schemas in the same database pass it over. Inserts no
-- longer go through the statement trigger over their rows (only the notification is left
-- of it, and finished jobs inserted are counted by a row trigger).

DROP TRIGGER jobs_counted_insert ON jobs;

CREATE OR REPLACE FUNCTION jobs_count_changes() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        INSERT INTO job_counts (queue, job_type, status, shard, n)
        SELECT queue, job_type, status, pg_backend_pid() % 64, COUNT(*) FROM new_rows
        WHERE status IN ('succeeded', 'dead', 'cancelled')
        GROUP BY queue, job_type, status
        ON CONFLICT (queue, job_type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n;
    END IF;
    INSERT INTO job_counts (queue, job_type, status, shard, n)
    SELECT queue, job_type, status, pg_backend_pid() % 64, -COUNT(*) FROM old_rows
    WHERE status IN ('succeeded', 'dead', 'cancelled')
    GROUP BY queue, job_type, status
    ON CONFLICT (queue, job_type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n;
    -- Workers sleep until told: of jobs an update leaves waiting (a retry, a job given back, a
    -- reaped lease, a plain-SQL change of run_at), as of new ones. The payload names this
    -- schema: workers of other schemas in the database pass it over. (Nested: a DELETE has
    -- no new_rows to plan a query on.)
    IF TG_OP = 'UPDATE' THEN
        IF EXISTS (SELECT 1 FROM new_rows WHERE status IN ('queued', 'failed')) THEN
            PERFORM pg_notify('litejobs_jobs', current_schema());
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- An inserted job is counted only when it goes in finished (an import; litejobs never
-- inserts one), by a row trigger whose condition the server checks without a call: a
-- statement trigger over the inserted rows copied every one of them first.
CREATE FUNCTION jobs_count_inserted() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO job_counts (queue, job_type, status, shard, n)
    VALUES (NEW.queue, NEW.job_type, NEW.status, pg_backend_pid() % 64, 1)
    ON CONFLICT (queue, job_type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n;
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_counted_insert AFTER INSERT ON jobs
    FOR EACH ROW WHEN (NEW.status IN ('succeeded', 'dead', 'cancelled'))
    EXECUTE FUNCTION jobs_count_inserted();

-- Workers sleep until told of new jobs: one notification per inserting statement, whose
-- payload names this schema (and per write to queues, below).
CREATE FUNCTION notify_workers() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify('litejobs_jobs', current_schema());
    RETURN NULL;
END;
$$;

CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION notify_workers();

-- A paused queue's jobs are not claimed; its resume tells the workers (migration 9).
CREATE TRIGGER queues_changed AFTER INSERT OR UPDATE ON queues
    FOR EACH STATEMENT EXECUTE FUNCTION notify_workers();
