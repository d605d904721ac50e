//! [`ExpireStore`] on SQLite: the sweep reads the waiting jobs past their deadline from
//! `jobs_expiring_idx` and cancels them one statement each (the write transaction keeps
//! them as read); the finished-job counts are kept in code, as every litejobs write keeps them.

use rusqlite::{params, OptionalExtension};

use crate::error::Result;
use crate::fingerprint::fingerprint as error_fingerprint;
use crate::job::{not_started_reason, EXPIRED_BY};
use crate::storage::jobs::{ExpireStore, Expired, ExpiredAttempt, HeldRows};
use crate::storage::sqlite::{lenient, SqliteTx};

impl ExpireStore for SqliteTx<'_> {
    /// Rows another program wrote are read leniently: a queue or type that is not text is
    /// shown as its value, never a failure of the sweep.
    /// SQLite's one writer holds no row another is writing: `_held` changes nothing.
    fn cancel_expired(&self, now: i64, limit: usize, _held: HeldRows) -> Result<Vec<Expired>> {
        // The terms of jobs_expiring_idx's WHERE, as written there, so SQLite uses it.
        let mut stmt = self.conn.prepare_cached(
            "SELECT id, queue, job_type, attempts, expires_at FROM jobs
             WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed') AND expires_at <= ?1
             ORDER BY expires_at LIMIT ?2",
        )?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let found = stmt
            .query_map(params![now, limit], |row| {
                let mut ignored = Vec::new();
                let p = &mut ignored;
                let (attempts, deadline) = (
                    lenient::int(row, 3, "attempts", p)?,
                    lenient::int(row, 4, "expires_at", p)?,
                );
                Ok(Expired {
                    id: row.get(0)?,
                    queue: lenient::text(row, 1, "queue", p)?,
                    job_type: lenient::text(row, 2, "job_type", p)?,
                    attempts,
                    reason: not_started_reason(deadline, attempts),
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        for job in &found {
            self.end_expired(job.id, &job.reason, now)?;
        }
        Ok(found)
    }

    fn expire_key_holder(&self, key: &str, now: i64) -> Result<bool> {
        let holder = self
            .conn
            .prepare_cached(
                "SELECT id, attempts, expires_at FROM jobs
                 WHERE idempotency_key = ?1 AND status IN ('queued', 'failed')
                   AND expires_at IS NOT NULL AND expires_at <= ?2",
            )?
            .query_row(params![key, now], |row| {
                let mut ignored = Vec::new();
                let p = &mut ignored;
                Ok((
                    row.get::<_, i64>(0)?,
                    lenient::int(row, 1, "attempts", p)?,
                    lenient::int(row, 2, "expires_at", p)?,
                ))
            })
            .optional()?;
        let Some((id, attempts, deadline)) = holder else {
            return Ok(false);
        };
        self.end_expired(id, &not_started_reason(deadline, attempts), now)
    }

    fn expire_running(&self, attempt: &ExpiredAttempt<'_>, now: i64) -> Result<bool> {
        let lease = attempt.lease;
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = ?1, cancel_reason = ?2,
                        last_error = COALESCE(?3, last_error),
                        error_group = CASE WHEN ?3 IS NULL THEN error_group ELSE ?9 END,
                        last_status_code = CASE WHEN ?3 IS NULL THEN last_status_code ELSE ?4 END,
                        finished_at = ?5, updated_at = ?5, locked_by = NULL, locked_until = NULL
                 WHERE id = ?6 AND status = 'running' AND locked_by = ?7 AND attempts = ?8",
            )?
            .execute(params![
                EXPIRED_BY,
                attempt.reason,
                attempt.error,
                attempt.status_code,
                now,
                lease.job_id,
                lease.worker_id,
                lease.attempt,
                attempt.error.map(error_fingerprint)
            ])?;
        if n == 1 {
            self.count_row(lease.job_id, 1)?;
        }
        Ok(n == 1)
    }
}

impl SqliteTx<'_> {
    /// Ends waiting job `id` `cancelled` by its deadline with `reason`, counted as finished;
    /// false when it no longer waits.
    fn end_expired(&self, id: i64, reason: &str, now: i64) -> Result<bool> {
        let n = self
            .conn
            .prepare_cached(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = ?1, cancel_reason = ?2,
                        finished_at = ?3, updated_at = ?3, locked_by = NULL, locked_until = NULL,
                        run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
                 WHERE id = ?4 AND status IN ('queued', 'failed')",
            )?
            .execute(params![EXPIRED_BY, reason, now, id])?;
        if n == 1 {
            self.count_row(id, 1)?;
        }
        Ok(n == 1)
    }
}
