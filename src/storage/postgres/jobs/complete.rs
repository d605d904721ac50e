//! [`CompleteStore`] on PostgreSQL: every write fenced by a lease is one `UPDATE` whose
//! `WHERE` is the lease, so a late write of a lost attempt matches no row whatever other
//! processes do; successes go in one statement for the whole batch. The finished-job and
//! attempt counts are kept by the schema's triggers.

use std::collections::HashSet;

use super::super::sql::{query, IntRow};
use super::super::PgTx;
use crate::error::Result;
use crate::fingerprint::fingerprint as error_fingerprint;
use crate::job::clamp_run_at;
use crate::storage::jobs::{AfterFailure, AttemptRow, CompleteStore, Lease, Success};

/// The fence of every lease-fenced write: `$1` the job, `$2` the worker, `$3` the attempt.
const FENCE: &str = "id = $1 AND status = 'running' AND locked_by = $2 AND attempts = $3";

impl CompleteStore for PgTx<'_> {
    /// A lease already ending later is kept; a running job without one (written by another
    /// program) keeps none, as on SQLite, so the reaper still takes it.
    fn extend_lease(
        &self,
        lease: Lease<'_>,
        until: i64,
        progress: Option<&str>,
        now: i64,
    ) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET locked_until = CASE WHEN locked_until IS NULL THEN NULL
                                                     ELSE GREATEST(locked_until, $4) END,
                        progress = COALESCE($5, progress), updated_at = $6
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .int(until)
            .opt_text(progress)
            .int(now),
        )?;
        Ok(n == 1)
    }

    /// One `UPDATE … FROM unnest(…)` for the whole batch, each row fenced by its own lease.
    fn succeed(&self, jobs: &[Success<'_>], now: i64) -> Result<Vec<bool>> {
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = jobs.iter().map(|s| s.lease.job_id).collect();
        let attempts: Vec<i64> = jobs.iter().map(|s| s.lease.attempt).collect();
        let workers: Vec<String> = jobs.iter().map(|s| s.lease.worker_id.to_string()).collect();
        let results: Vec<Option<String>> =
            jobs.iter().map(|s| s.result.map(str::to_string)).collect();
        let progress: Vec<Option<String>> = jobs
            .iter()
            .map(|s| s.progress.map(str::to_string))
            .collect();
        let written = self.rows::<IntRow>(
            query(
                "UPDATE jobs SET status = 'succeeded', finished_at = $1, updated_at = $1,
                        locked_by = NULL, locked_until = NULL, result = done.result,
                        progress = COALESCE(done.progress, jobs.progress)
                 FROM unnest($2, $3, $4, $5, $6) AS done(id, attempt, worker, result, progress)
                 WHERE jobs.id = done.id AND jobs.status = 'running'
                   AND jobs.locked_by = done.worker AND jobs.attempts = done.attempt
                 RETURNING jobs.id AS v",
            )
            .int(now)
            .ints(&ids)
            .ints(&attempts)
            .texts(&workers)
            .opt_texts(&results)
            .opt_texts(&progress),
        )?;
        let written: HashSet<i64> = written.into_iter().map(|r| r.v).collect();
        Ok(ids.iter().map(|id| written.contains(id)).collect())
    }

    fn fail(
        &self,
        lease: Lease<'_>,
        after: AfterFailure,
        error: &str,
        status_code: Option<i64>,
        now: i64,
    ) -> Result<bool> {
        // $4 is the next run time, or NULL when the job is dead.
        let retry_at = match after {
            AfterFailure::RetryAt(run_at) => Some(clamp_run_at(run_at)),
            AfterFailure::Dead => None,
        };
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = CASE WHEN $4::bigint IS NULL THEN 'dead' ELSE 'failed' END,
                        run_at = COALESCE($4, run_at),
                        finished_at = CASE WHEN $4::bigint IS NULL THEN $7 ELSE finished_at END,
                        last_error = $5, error_group = $8, last_status_code = $6, updated_at = $7,
                        locked_by = NULL, locked_until = NULL
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .opt_int(retry_at)
            .text(error)
            .opt_int(status_code)
            .int(now)
            .text(&error_fingerprint(error)),
        )?;
        Ok(n == 1)
    }

    fn put_back(&self, lease: Lease<'_>, run_at: Option<i64>, now: i64) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = 'queued', attempts = attempts - 1,
                        run_at = COALESCE($4, run_at),
                        updated_at = $5, locked_by = NULL, locked_until = NULL
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .opt_int(run_at.map(clamp_run_at))
            .int(now),
        )?;
        Ok(n == 1)
    }

    fn cancel_running(&self, lease: Lease<'_>, reason: &str, now: i64) -> Result<bool> {
        let n = self.execute(
            query(&format!(
                "UPDATE jobs SET status = 'cancelled', finished_at = $4, updated_at = $4,
                        last_error = $5, error_group = $6, locked_by = NULL, locked_until = NULL,
                        cancelled_by = 'handler', cancel_reason = $5
                 WHERE {FENCE}"
            ))
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .int(now)
            .text(reason)
            .text(&error_fingerprint(reason)),
        )?;
        Ok(n == 1)
    }

    fn insert_attempt(&self, row: &AttemptRow<'_>) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                           outcome, error, status_code, duration_ms, error_group)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
            )
            .int(row.job_id)
            .int(row.attempt)
            .text(row.worker)
            .int(row.started_at)
            .int(row.finished_at)
            .text(row.outcome.as_str())
            .opt_text(row.error)
            .opt_int(row.status_code)
            .int(row.finished_at.saturating_sub(row.started_at).max(0))
            .opt_text(row.error.map(error_fingerprint).as_deref()),
        )?;
        Ok(())
    }
}
