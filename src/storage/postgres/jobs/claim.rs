//! [`ClaimStore`] on PostgreSQL: one statement locks the due rows `FOR UPDATE SKIP LOCKED`
//! (rows another process is claiming are passed over) and moves them to `running`.

use diesel::result::{DatabaseErrorKind, Error as DieselError};

use super::super::sql::{query, BoolRow, IntRow};
use super::super::PgTx;
use super::row_rules::ClaimRow;
use super::BIGINT_MAX;
use crate::error::Result;
use crate::storage::jobs::claim::{claim_order_key, claim_order_sql};
use crate::storage::jobs::{ClaimRequest, ClaimStore, Claimed, ClaimedRow, Waiting};

/// How often a claim runs before it leaves group-keyed jobs for the next round (see
/// [`ClaimStore::claim`]).
const CLAIM_TRIES: usize = 3;

impl ClaimStore for PgTx<'_> {
    /// Claims in one statement: the due rows are locked `FOR UPDATE SKIP LOCKED` (rows
    /// another process is claiming are passed over) in a CTE limited to `req.limit`, and
    /// only those are updated. At most one job per group key is taken, and none of a key
    /// with a running job; should another process claim a job of the same key at the same
    /// moment (each seeing the other's job as still waiting), the unique index refuses the
    /// second running job: that statement alone is undone (a savepoint) and the claim runs
    /// again, seeing the other claim; the last try leaves group-keyed jobs for the next
    /// round, so a round never fails on the race.
    fn claim(&self, req: &ClaimRequest<'_>, now: i64) -> Result<Claimed> {
        if req.limit == 0 || req.job_types.is_empty() {
            return Ok(Claimed::default());
        }
        let mut tries = 0;
        let mut rows = loop {
            tries += 1;
            let keyed = tries < CLAIM_TRIES;
            match self.claim_rows(req, now, keyed) {
                Ok(rows) => break rows,
                Err(e) if keyed && lost_a_group_key_race(&e) => {
                    log::debug!(
                        "litejobs: a claim on queue {:?} met another process's claim of the \
                         same group key ({e}); claiming again",
                        req.queue
                    );
                }
                Err(e) => return Err(e.into()),
            }
        };
        // RETURNING gives no order; hand jobs out in claim order.
        rows.sort_by_key(|row| claim_order_key(row.priority, row.run_at, row.id));
        let rows: Vec<ClaimedRow> = rows
            .iter()
            .map(|row| row.checked(req.max_payload_bytes))
            .collect();
        Ok(Claimed {
            rows,
            refused: Vec::new(),
        })
    }

    fn any_due(
        &self,
        queue: &str,
        job_types: &[String],
        now: i64,
        above: Option<i64>,
    ) -> Result<bool> {
        if job_types.is_empty() {
            return Ok(false);
        }
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND waiting_for = 0{}
                              AND status IN ('queued', 'failed') AND run_at <= $2
                              AND (expires_at IS NULL OR expires_at > $2)
                              AND job_type = ANY($3))
                    AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused = 1)
                    AS v",
            if above.is_some() {
                " AND priority > $4"
            } else {
                ""
            }
        );
        let mut q = query(&sql).text(queue).int(now).texts(job_types);
        if let Some(above) = above {
            q = q.int(above);
        }
        let due = self.row::<BoolRow>(q)?;
        Ok(due.is_some_and(|row| row.v))
    }

    fn waiting(&self, queue: &str, job_types: &[String], now: i64) -> Result<Waiting> {
        if job_types.is_empty() {
            return Ok(Waiting::Nothing);
        }
        let code = self.row::<IntRow>(
            query(
                "SELECT CASE
                     WHEN EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused = 1) THEN 0
                     WHEN EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND waiting_for = 0
                                    AND status IN ('queued', 'failed') AND run_at <= $2
                                    AND (expires_at IS NULL OR expires_at > $2)
                                    AND job_type = ANY($3)) THEN 2
                     WHEN EXISTS (SELECT 1 FROM jobs WHERE queue = $1 AND waiting_for = 0
                                    AND status IN ('queued', 'failed') AND job_type = ANY($3))
                          THEN 1
                     ELSE 0 END::bigint AS v",
            )
            .text(queue)
            .int(now)
            .texts(job_types),
        )?;
        Ok(Waiting::from_code(code.map_or(0, |row| row.v)))
    }
}

impl PgTx<'_> {
    /// One run of the claim (see [`ClaimStore::claim`]); `keyed` false leaves jobs with a
    /// group key alone.
    fn claim_rows(
        &self,
        req: &ClaimRequest<'_>,
        now: i64,
        keyed: bool,
    ) -> std::result::Result<Vec<ClaimRow>, DieselError> {
        // The lease is the job's timeout (its own, else its type's) plus the grace, capped
        // at the largest bigint rather than failing the claim on an absurd timeout. A row at
        // the largest attempt count keeps it, and one below zero (its rule dropped) gets
        // attempt 1, as the claimed-row rules count them: the fence then holds and the
        // claim's defect makes the job dead. `RETURNING` gives the attempts as they were
        // before this claim, for those rules.
        let sql = format!(
            "WITH picked AS (
                SELECT j.id, j.attempts FROM jobs j
                WHERE j.queue = $1 AND j.waiting_for = 0{above} AND j.status IN ('queued', 'failed')
                  AND j.run_at <= $2
                  AND (j.expires_at IS NULL OR j.expires_at > $2)
                  AND j.job_type = ANY($3)
                  AND NOT EXISTS (SELECT 1 FROM queues WHERE name = $1 AND paused = 1)
                  AND (j.group_key IS NULL OR ($4 AND
                       NOT EXISTS (SELECT 1 FROM jobs r
                                   WHERE r.group_key = j.group_key AND r.status = 'running')
                       AND j.id = (SELECT g.id FROM jobs g
                                   WHERE g.group_key = j.group_key
                                     AND g.status IN ('queued', 'failed') AND g.run_at <= $2
                                     AND g.waiting_for = 0
                                     AND (g.expires_at IS NULL OR g.expires_at > $2)
                                   ORDER BY {group_order} LIMIT 1)))
                ORDER BY {order}
                LIMIT $5
                FOR UPDATE OF j SKIP LOCKED)
             UPDATE jobs SET status = 'running',
                    attempts = CASE WHEN jobs.attempts < 0 THEN 1
                                    WHEN jobs.attempts < {BIGINT_MAX} THEN jobs.attempts + 1
                                    ELSE jobs.attempts END,
                    locked_by = $6,
                    locked_until = LEAST($2::numeric + COALESCE(jobs.timeout_ms,
                                       ($7::bigint[])[array_position($3, jobs.job_type)], $8)
                                   + $9, {BIGINT_MAX})::bigint,
                    started_at = $2, updated_at = $2
             FROM picked WHERE jobs.id = picked.id
             RETURNING jobs.id, jobs.queue, jobs.job_type, jobs.payload, jobs.priority,
                       jobs.run_at, picked.attempts, jobs.max_attempts, jobs.timeout_ms,
                       jobs.locked_until, jobs.idempotency_key, jobs.group_key, jobs.created_at,
                       jobs.expires_at",
            group_order = claim_order_sql("g"),
            order = claim_order_sql("j"),
            above = if req.above_priority.is_some() {
                " AND j.priority > $10"
            } else {
                ""
            },
        );
        let q = query(&sql)
            .text(req.queue)
            .int(now)
            .texts(req.job_types)
            .bool(keyed)
            .int(i64::try_from(req.limit).unwrap_or(i64::MAX))
            .text(req.worker_id)
            .ints(req.type_timeouts_ms)
            .int(req.type_timeouts_ms.iter().copied().max().unwrap_or(0))
            .int(req.lease_grace_ms);
        let q = match req.above_priority {
            Some(above) => q.int(above),
            None => q,
        };
        self.rows_in_savepoint::<ClaimRow>(q)
    }
}

/// True when a claim failed only because another process claimed a job of the same group
/// key at the same time: the second running job of the key was refused by
/// `jobs_group_key_running_idx`, two claims waited for each other's index entries
/// (deadlock), or the wait for the other claim's commit ran past the lock timeout.
fn lost_a_group_key_race(e: &DieselError) -> bool {
    match e {
        DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info) => {
            info.constraint_name() == Some("jobs_group_key_running_idx")
        }
        DieselError::DatabaseError(_, info) => {
            let message = info.message();
            message.contains("deadlock detected") || message.contains("lock timeout")
        }
        _ => false,
    }
}
