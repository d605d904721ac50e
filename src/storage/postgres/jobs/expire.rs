//! [`ExpireStore`] on PostgreSQL: the sweep locks the waiting jobs past their deadline
//! (a worker's `FOR UPDATE SKIP LOCKED`: rows another process is sweeping or claiming are
//! passed over; `Queue::cancel_expired` waits for them) and cancels them in one statement;
//! the finished-job counts are kept by the triggers.

use diesel::sql_types::{BigInt, Text};
use diesel::QueryableByName;

use super::super::sql::{query, IntRow};
use super::super::PgTx;
use crate::error::Result;
use crate::fingerprint::fingerprint as error_fingerprint;
use crate::job::{not_started_reason, EXPIRED_BY};
use crate::storage::jobs::{ExpireStore, Expired, ExpiredAttempt, HeldRows};

/// A waiting job past its deadline, as the sweep found and locked it.
#[derive(QueryableByName, Debug)]
struct ExpiringRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    expires_at: i64,
}

impl ExpireStore for PgTx<'_> {
    fn cancel_expired(&self, now: i64, limit: usize, held: HeldRows) -> Result<Vec<Expired>> {
        // A waiting sweep locks in id order, the order every other statement that waits
        // for job rows takes them in (the triggers, workflow cancels), so it never closes a
        // cycle with one; a row waited for is read again after the other transaction and
        // left out when it no longer waits. A worker's sweep waits for nothing.
        let (order, lock) = match held {
            HeldRows::Skip => ("expires_at", "FOR UPDATE SKIP LOCKED"),
            HeldRows::Wait => ("id", "FOR UPDATE"),
        };
        let found = self.rows::<ExpiringRow>(
            query(&format!(
                "SELECT id, queue, job_type, attempts, expires_at FROM jobs
                 WHERE expires_at IS NOT NULL AND status IN ('queued', 'failed')
                   AND expires_at <= $1
                 ORDER BY {order} LIMIT $2
                 {lock}"
            ))
            .int(now)
            .int(i64::try_from(limit).unwrap_or(i64::MAX)),
        )?;
        if found.is_empty() {
            return Ok(Vec::new());
        }
        let expired: Vec<Expired> = found
            .into_iter()
            .map(|row| Expired {
                reason: not_started_reason(row.expires_at, row.attempts),
                id: row.id,
                queue: row.queue,
                job_type: row.job_type,
                attempts: row.attempts,
            })
            .collect();
        let ids: Vec<i64> = expired.iter().map(|e| e.id).collect();
        let reasons: Vec<String> = expired.iter().map(|e| e.reason.clone()).collect();
        // The rows are locked by this transaction: each is still waiting and past its
        // deadline, as read.
        let cancelled = self.rows::<IntRow>(
            query(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = $1,
                        cancel_reason = done.reason, finished_at = $2, updated_at = $2,
                        locked_by = NULL, locked_until = NULL,
                        run_at = COALESCE(jobs.held_run_at, jobs.run_at), held_run_at = NULL
                 FROM unnest($3, $4) AS done(id, reason)
                 WHERE jobs.id = done.id AND jobs.status IN ('queued', 'failed')
                 RETURNING jobs.id AS v",
            )
            .text(EXPIRED_BY)
            .int(now)
            .ints(&ids)
            .texts(&reasons),
        )?;
        let cancelled: std::collections::HashSet<i64> =
            cancelled.into_iter().map(|r| r.v).collect();
        Ok(expired
            .into_iter()
            .filter(|e| cancelled.contains(&e.id))
            .collect())
    }

    fn expire_key_holder(&self, key: &str, now: i64) -> Result<bool> {
        let holder = self.row::<ExpiringRow>(
            query(
                "SELECT id, queue, job_type, attempts, expires_at FROM jobs
                 WHERE idempotency_key = $1 AND status IN ('queued', 'failed')
                   AND expires_at IS NOT NULL AND expires_at <= $2",
            )
            .text(key)
            .int(now),
        )?;
        let Some(holder) = holder else {
            return Ok(false);
        };
        // By id, still waiting and still past its deadline: a claim that took it meanwhile
        // wins, and the key stays held.
        let ended = self.row::<IntRow>(
            query(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = $1, cancel_reason = $2,
                        finished_at = $3, updated_at = $3, locked_by = NULL, locked_until = NULL,
                        run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
                 WHERE id = $4 AND status IN ('queued', 'failed') AND expires_at <= $3
                 RETURNING id AS v",
            )
            .text(EXPIRED_BY)
            .text(&not_started_reason(holder.expires_at, holder.attempts))
            .int(now)
            .int(holder.id),
        )?;
        Ok(ended.is_some())
    }

    fn expire_running(&self, attempt: &ExpiredAttempt<'_>, now: i64) -> Result<bool> {
        let lease = attempt.lease;
        let n = self.execute(
            query(
                "UPDATE jobs SET status = 'cancelled', cancelled_by = $4, cancel_reason = $5,
                        last_error = COALESCE($6, last_error),
                        error_group = CASE WHEN $6::text IS NULL THEN error_group ELSE $9 END,
                        last_status_code = CASE WHEN $6::text IS NULL THEN last_status_code
                                                ELSE $7 END,
                        finished_at = $8, updated_at = $8, locked_by = NULL, locked_until = NULL
                 WHERE id = $1 AND status = 'running' AND locked_by = $2 AND attempts = $3",
            )
            .int(lease.job_id)
            .text(lease.worker_id)
            .int(lease.attempt)
            .text(EXPIRED_BY)
            .text(attempt.reason)
            .opt_text(attempt.error)
            .opt_int(attempt.status_code)
            .int(now)
            .opt_text(attempt.error.map(error_fingerprint).as_deref()),
        )?;
        Ok(n == 1)
    }
}
