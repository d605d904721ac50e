-- Migration 9: workers are told of every job a write leaves waiting, not only of inserts,
-- and of a queue's pause or resume. Frozen once released; schema.pg.sql holds the same
-- objects.
--
-- An idle worker sleeps until a notification on litejobs_jobs; with no job waiting at all it
-- polls only every few seconds. So an update that leaves a job queued or failed (a retry, a
-- job given back at a worker's shutdown, a reaped lease, a plain-SQL change of run_at)
-- notifies as an insert does, and so does a write to queues. The payload is the schema's name
-- (it was empty): workers of other schemas in the same database pass it over.

CREATE OR REPLACE FUNCTION jobs_count_changes() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    IF TG_OP = 'INSERT' OR TG_OP = 'UPDATE' THEN
        INSERT INTO job_counts (queue, job_type, status, shard, n)
        SELECT queue, job_type, status, pg_backend_pid() % 64, COUNT(*) FROM new_rows
        WHERE status IN ('succeeded', 'dead', 'cancelled')
        GROUP BY queue, job_type, status
        ON CONFLICT (queue, job_type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n;
    END IF;
    IF TG_OP = 'DELETE' OR TG_OP = 'UPDATE' THEN
        INSERT INTO job_counts (queue, job_type, status, shard, n)
        SELECT queue, job_type, status, pg_backend_pid() % 64, -COUNT(*) FROM old_rows
        WHERE status IN ('succeeded', 'dead', 'cancelled')
        GROUP BY queue, job_type, status
        ON CONFLICT (queue, job_type, status, shard) DO UPDATE SET n = job_counts.n + excluded.n;
    END IF;
    -- Workers sleep until told: of new jobs, and of jobs a write leaves waiting (a retry, a
    -- job given back, a reaped lease, a plain-SQL change of run_at). The payload names this
    -- schema: workers of other schemas in the database pass it over. (Nested: a DELETE has
    -- no new_rows to plan a query on.)
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('litejobs_jobs', current_schema());
    ELSIF TG_OP = 'UPDATE' THEN
        IF EXISTS (SELECT 1 FROM new_rows WHERE status IN ('queued', 'failed')) THEN
            PERFORM pg_notify('litejobs_jobs', current_schema());
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

-- A paused queue's jobs are not claimed; its resume tells the workers (migration 9).
CREATE FUNCTION queues_notify() RETURNS trigger LANGUAGE plpgsql
    SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM pg_notify('litejobs_jobs', current_schema());
    RETURN NULL;
END;
$$;

CREATE TRIGGER queues_changed AFTER INSERT OR UPDATE ON queues
    FOR EACH STATEMENT EXECUTE FUNCTION queues_notify();
