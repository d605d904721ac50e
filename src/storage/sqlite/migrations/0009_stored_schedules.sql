-- Migration 9: periodic schedules kept in the database (`litejobs schedule add`, or a row a
-- program inserts), run by every worker that runs stored schedules (`litejobs work` does).
-- Frozen once released; schema.sql holds the same objects.

-- The job a stored schedule enqueues at each slot. A NULL job_type marks a schedule a
-- worker's code defines (`WorkerBuilder::periodic`), whose job is given there.
ALTER TABLE periodic_schedules ADD COLUMN job_type TEXT;
-- The job's payload (JSON text), queue, priority and attempts.
ALTER TABLE periodic_schedules ADD COLUMN payload TEXT NOT NULL DEFAULT '{}';
ALTER TABLE periodic_schedules ADD COLUMN queue TEXT NOT NULL DEFAULT 'default';
ALTER TABLE periodic_schedules ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE periodic_schedules ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 6;
