//! [`DeadLetterStore`] on PostgreSQL: dead jobs waiting for a person, requeue (one, or by
//! type and error text, all or nothing), discard. A requeue locks the dead job's row first,
//! so two processes requeueing the same job make one new job: the second sees the first's
//! mark and is refused.

use super::admin::{invalid_state, lock_status, returning_unless_key_held};
use super::reads::{jobs_where, refuse_unusable, Clause};
use super::sql::{query, IntRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::job::Discarded;
use crate::job::JobRecord;
use crate::storage::dead_letter::*;
use crate::storage::reads::JobFilter;

/// The `WHERE` of dead jobs that nobody has requeued yet, narrowed by a filter's type,
/// queue, search text and page.
fn awaiting_dead_clause(filter: &JobFilter) -> Clause {
    let mut clause = Clause::new("status = 'dead' AND requeued_as IS NULL");
    clause.narrow(filter);
    clause
}

impl DeadLetterStore for PgTx<'_> {
    fn requeue_dead(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<i64> {
        let (status, requeued_as) = lock_status(self, id)?;
        if status != "dead" {
            return Err(invalid_state(format!(
                "job {id} is {status}, not dead; only dead jobs can be requeued"
            )));
        }
        if let Some(new_id) = requeued_as {
            return Err(invalid_state(format!(
                "job {id} was already requeued as job {new_id}"
            )));
        }
        refuse_unusable(self, id, "requeued")?;
        let inserted = returning_unless_key_held(
            self,
            "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at,
                               created_at, updated_at, timeout_ms, idempotency_key, group_key)
             SELECT queue, job_type, payload, priority, max_attempts, $1, $1, $1, timeout_ms,
                    idempotency_key, group_key
             FROM jobs WHERE id = $2
             RETURNING id AS v",
            now,
            id,
        )?
        .ok_or_else(|| {
            invalid_state(format!(
                "job {id} cannot be requeued: its idempotency key is held by another live or \
                 succeeded job"
            ))
        })?;
        let new_id = inserted.first().copied().ok_or_else(|| {
            Error::new(
                ErrorKind::Database,
                format!("requeue of job {id} inserted no job"),
            )
        })?;
        self.execute(
            query(
                "UPDATE jobs SET requeued_by = $1, requeued_at = $2, requeue_reason = $3,
                                 requeued_as = $4, updated_at = $2
                 WHERE id = $5",
            )
            .text(by)
            .int(now)
            .text(reason)
            .int(new_id)
            .int(id),
        )?;
        Ok(new_id)
    }

    /// Deletes the dead job; its attempts go with it (the foreign key's cascade) and the
    /// counts follow by the schema's triggers. Ids come from a sequence and are never
    /// reused, so the newest job is deleted like any other.
    fn discard_dead(&self, id: i64, _now: i64) -> Result<Discarded> {
        let (status, _) = lock_status(self, id)?;
        if status != "dead" {
            return Err(invalid_state(format!(
                "job {id} is {status}, not dead; only dead jobs can be discarded"
            )));
        }
        self.execute(query("DELETE FROM jobs WHERE id = $1 AND status = 'dead'").int(id))?;
        Ok(Discarded::Deleted)
    }

    fn dead_awaiting(&self, filter: &JobFilter) -> Result<Vec<JobRecord>> {
        jobs_where(self, &awaiting_dead_clause(filter), filter.limit)
    }

    fn dead_ids_matching(&self, filter: &JobFilter) -> Result<Vec<i64>> {
        // Locked in id order: a row another process requeues meanwhile is waited for, then
        // no longer matches and is left out.
        Ok(self
            .rows::<IntRow>(
                awaiting_dead_clause(filter)
                    .query("SELECT id AS v FROM jobs WHERE ", " ORDER BY id FOR UPDATE"),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect())
    }
}
