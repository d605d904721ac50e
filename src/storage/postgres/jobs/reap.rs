//! [`ReapStore`] on PostgreSQL: one statement locks the expired rows, moves them on and
//! writes their `lost` attempts.

use super::super::sql::{query, IntRow};
use super::super::PgTx;
use super::BIGINT_MAX;
use crate::error::Result;
use crate::storage::jobs::ReapStore;

impl ReapStore for PgTx<'_> {
    /// One statement: the expired rows are locked `FOR UPDATE SKIP LOCKED` (and their lease
    /// checked again on the locked version), moved on, and given their `lost` attempts
    /// from the locked values. A reaper in another process passes over the rows this one
    /// holds, and finds them no longer expired once it commits: no attempt is written twice.
    fn reap_expired(&self, now: i64) -> Result<usize> {
        let reaped = self.rows::<IntRow>(
            query(&format!(
                "WITH expired AS (
                    SELECT id, locked_by, started_at, attempts FROM jobs
                    WHERE status = 'running' AND (locked_until < $1 OR locked_until IS NULL)
                    FOR UPDATE SKIP LOCKED),
                 reaped AS (
                    UPDATE jobs SET
                        status = CASE WHEN jobs.attempts >= jobs.max_attempts THEN 'dead'
                                      ELSE 'failed' END,
                        run_at = CASE WHEN jobs.attempts >= jobs.max_attempts THEN jobs.run_at
                                      ELSE $1 END,
                        finished_at = CASE WHEN jobs.attempts >= jobs.max_attempts THEN $1
                                           ELSE jobs.finished_at END,
                        updated_at = $1,
                        last_error = CASE WHEN jobs.attempts >= jobs.max_attempts THEN
                                'the worker died or hung while running attempt ' || jobs.attempts
                                || ' of ' || jobs.max_attempts
                                || ' (lease expired); attempts spent'
                            ELSE 'the worker died or hung while running attempt '
                                || jobs.attempts || ' (lease expired)' END,
                        error_group = CASE WHEN jobs.attempts >= jobs.max_attempts THEN
                                'the worker died or hung while running attempt # of # (lease expired); attempts spent'
                            ELSE 'the worker died or hung while running attempt # (lease expired)' END,
                        locked_by = NULL, locked_until = NULL
                    FROM expired
                    WHERE jobs.id = expired.id AND jobs.status = 'running'
                      AND (jobs.locked_until < $1 OR jobs.locked_until IS NULL)
                    RETURNING jobs.id, expired.locked_by, expired.started_at, expired.attempts)
                 INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                           outcome, error, error_group, duration_ms)
                 SELECT id, attempts, locked_by, started_at, $1, 'lost',
                        'lease expired: the worker ' || COALESCE(locked_by, '?')
                            || ' died or hung while running attempt ' || attempts,
                        'lease expired: the worker … died or hung while running attempt #',
                        GREATEST(LEAST($1::numeric - COALESCE(started_at, $1), {BIGINT_MAX}),
                                 -{BIGINT_MAX})::bigint
                 FROM reaped
                 RETURNING job_id AS v"
            ))
            .int(now),
        )?;
        Ok(reaped.len())
    }
}
