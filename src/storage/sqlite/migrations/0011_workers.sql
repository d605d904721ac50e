-- Migration 11: the workers registry. Each running worker keeps a row here (written at
-- start and on its reap schedule, marked when it stops), so people and other programs see
-- who is working: `litejobs workers`, the dashboard's workers page, and `stats` naming the
-- job types that wait while no live worker serves them.
-- Frozen once released; schema.sql holds the same objects.

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
