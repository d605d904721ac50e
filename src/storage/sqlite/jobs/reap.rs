//! [`ReapStore`] on SQLite: running jobs whose lease expired get a `lost` attempt, then are
//! due again or dead, in statements over every expired row at once (the write transaction
//! keeps the rows as the statements found them).

use crate::error::Result;
use crate::storage::jobs::ReapStore;
use crate::storage::sqlite::SqliteTx;

impl ReapStore for SqliteTx<'_> {
    fn reap_expired(&self, now: i64) -> Result<usize> {
        // Counts first (litejobs' connections keep them in code), from the rows about to change.
        self.conn
            .prepare_cached(
                "INSERT INTO attempt_counts (job_type, outcome, n)
             SELECT job_type, 'lost', COUNT(*) FROM jobs
             WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
             GROUP BY job_type
             ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n",
            )?
            .execute([now])?;
        self.conn.prepare_cached(
            "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                       error, error_group, duration_ms)
             SELECT id, attempts, locked_by, started_at, ?1, 'lost',
                    'lease expired: the worker ' || COALESCE(locked_by, '?') ||
                    ' died or hung while running attempt ' || attempts,
                    -- Its group: the worker's name (host, pid) set aside too.
                    'lease expired: the worker … died or hung while running attempt #',
                    ?1 - COALESCE(started_at, ?1)
             FROM jobs WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)",
        )?
        .execute([now])?;
        self.count_jobs_where(
            "'dead'",
            1,
            "status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
             AND attempts >= max_attempts",
            &now,
        )?;
        let dead = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'dead', finished_at = ?1, updated_at = ?1,
                        last_error = 'the worker died or hung while running attempt ' || attempts ||
                                     ' of ' || max_attempts || ' (lease expired); attempts spent',
                        -- The error's fingerprint (the reaper's unit test checks it).
                        error_group = 'the worker died or hung while running attempt # of # (lease expired); attempts spent',
                        locked_by = NULL, locked_until = NULL
                 WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)
                   AND attempts >= max_attempts",
            )?
            .execute([now])?;
        let retried = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'failed', run_at = ?1, updated_at = ?1,
                        last_error = 'the worker died or hung while running attempt ' || attempts ||
                                     ' (lease expired)',
                        error_group = 'the worker died or hung while running attempt # (lease expired)',
                        locked_by = NULL, locked_until = NULL
                 WHERE status = 'running' AND (locked_until < ?1 OR locked_until IS NULL)",
            )?
            .execute([now])?;
        Ok(dead + retried)
    }
}
