//! [`AdminStore`] on PostgreSQL: cancel (one job or by type and text), retry now, pause and
//! resume a queue. Each action
//! locks the job's row (`FOR UPDATE`) before it looks at the status, so it cannot interleave
//! with another process's claim, requeue or retry of the same job.

use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::{QueryableByName, RunQueryDsl};

use super::reads::{column_contains, Clause};
use super::sql::{query, IntRow, TextRow};
use super::PgTx;
use crate::error::{Error, ErrorKind, Result};
use crate::storage::admin::*;
use crate::storage::encryption::MARKER_LITERAL;

#[derive(QueryableByName)]
struct StatusRow {
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = Nullable<BigInt>)]
    requeued_as: Option<i64>,
}

/// A job's status and `requeued_as`, its row locked for the rest of the transaction (a
/// concurrent change is waited for and then seen), or `NotFound`.
pub(super) fn lock_status(tx: &PgTx<'_>, id: i64) -> Result<(String, Option<i64>)> {
    tx.row::<StatusRow>(
        query("SELECT status, requeued_as FROM jobs WHERE id = $1 FOR UPDATE").int(id),
    )?
    .map(|r| (r.status, r.requeued_as))
    .ok_or_else(|| Error::not_found("job", id))
}

pub(super) fn invalid_state(message: String) -> Error {
    Error::new(ErrorKind::InvalidState, message)
}

/// Runs `sql` (an `UPDATE` or `INSERT` with `RETURNING id AS v`, parameters `$1 = a`,
/// `$2 = b`) and returns the ids; `None` when it would have given a job an idempotency key
/// another live or succeeded job holds. The transaction is then aborted: the caller must
/// fail it.
pub(super) fn returning_unless_key_held(
    tx: &PgTx<'_>,
    sql: &str,
    a: i64,
    b: i64,
) -> Result<Option<Vec<i64>>> {
    let mut conn = tx.conn.borrow_mut();
    let loaded = diesel::sql_query(sql)
        .bind::<BigInt, _>(a)
        .bind::<BigInt, _>(b)
        .load::<IntRow>(&mut **conn);
    match loaded {
        Ok(rows) => Ok(Some(rows.into_iter().map(|r| r.v).collect())),
        Err(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, info))
            if info.constraint_name() == Some("jobs_idempotency_key_idx") =>
        {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

#[derive(QueryableByName)]
struct TypeAttemptRow {
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
}

#[derive(QueryableByName)]
struct NoteRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Nullable<Text>)]
    cancelled_by: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    cancel_reason: Option<String>,
}

impl AdminStore for PgTx<'_> {
    fn cancel(&self, id: i64, by: &str, reason: &str, now: i64) -> Result<Cancelled> {
        let (status, _) = lock_status(self, id)?;
        check_cancellable(id, &status)?;
        let row = self
            .row::<TypeAttemptRow>(
                query("SELECT job_type, queue, attempts FROM jobs WHERE id = $1").int(id),
            )?
            .ok_or_else(|| Error::not_found("job", id))?;
        let running = status == "running";
        if running {
            // The running attempt's history row, as the completer would write it; its
            // worker's late outcome finds no lease and adds none. The counts follow by the
            // schema's triggers.
            self.execute(
                query(
                    "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at,
                                               outcome, error, status_code, duration_ms,
                                               error_group)
                     SELECT id, attempts, locked_by, started_at, $2, 'cancelled', $3, NULL,
                            GREATEST($2 - started_at, 0), $4
                     FROM jobs WHERE id = $1",
                )
                .int(id)
                .int(now)
                .text(&cancelled_text(Some(by), Some(reason)))
                .text(&crate::fingerprint::fingerprint(&cancelled_text(
                    Some(by),
                    Some(reason),
                ))),
            )?;
        }
        self.execute(
            query(
                "UPDATE jobs SET status = 'cancelled', finished_at = $1, updated_at = $1,
                        locked_by = NULL, locked_until = NULL,
                        cancelled_by = $2, cancel_reason = NULLIF($3, ''),
                        run_at = COALESCE(held_run_at, run_at), held_run_at = NULL
                 WHERE id = $4 AND status IN ('queued', 'failed', 'running')",
            )
            .int(now)
            .text(by)
            .text(reason)
            .int(id),
        )?;
        Ok(Cancelled {
            id,
            job_type: row.job_type,
            queue: row.queue,
            running_attempt: running.then_some(row.attempts),
        })
    }

    fn cancel_matching(
        &self,
        job_type: &str,
        search: Option<&str>,
        by: &str,
        reason: &str,
        now: i64,
    ) -> Result<Vec<Cancelled>> {
        let mut clause = Clause::new("status IN ('queued', 'failed', 'running')");
        clause.text(" AND job_type = ?", job_type);
        if let Some(search) = search {
            clause.text(" AND (", search);
            let n = clause.next_param() - 1;
            // An encrypted payload's stored text is its envelope: the search would match its
            // field names and, by chance, its base64, cancelling jobs that hold no such text.
            clause.sql.push_str(&format!(
                "{} OR (strpos(payload, {MARKER_LITERAL}) = 0 AND {}))",
                column_contains("last_error", n),
                column_contains("payload", n)
            ));
        }
        // Locked in id order: a job that finishes meanwhile is waited for, then no longer
        // matches and is left out.
        let ids: Vec<i64> = self
            .rows::<IntRow>(
                clause.query("SELECT id AS v FROM jobs WHERE ", " ORDER BY id FOR UPDATE"),
            )?
            .into_iter()
            .map(|r| r.v)
            .collect();
        crate::storage::admin::cancel_each(self, ids, by, reason, now)
    }

    fn cancelled_among(&self, ids: &[i64]) -> Result<Vec<CancelledNote>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .rows::<NoteRow>(
                query(
                    "SELECT id, cancelled_by, cancel_reason FROM jobs
                     WHERE id = ANY($1) AND status = 'cancelled'",
                )
                .ints(ids),
            )?
            .into_iter()
            .map(|r| CancelledNote {
                id: r.id,
                by: r.cancelled_by,
                reason: r.cancel_reason,
            })
            .collect())
    }

    fn retry_now(&self, id: i64, now: i64) -> Result<()> {
        let (status, requeued_as) = lock_status(self, id)?;
        let sql = match status.as_str() {
            "queued" | "failed" => {
                "UPDATE jobs SET run_at = $1, updated_at = $1 WHERE id = $2 RETURNING id AS v"
            }
            "dead" => {
                if let Some(new_id) = requeued_as {
                    return Err(invalid_state(format!(
                        "job {id} was already requeued as job {new_id}; retry that one instead"
                    )));
                }
                super::reads::refuse_unusable(self, id, "retried")?;
                "UPDATE jobs SET status = 'failed', run_at = $1, updated_at = $1,
                        finished_at = NULL, max_attempts = attempts + 1
                 WHERE id = $2 RETURNING id AS v"
            }
            other => {
                return Err(invalid_state(format!(
                    "job {id} is {other}; only queued, failed or dead jobs can be retried"
                )))
            }
        };
        match returning_unless_key_held(self, sql, now, id)? {
            Some(_) => Ok(()),
            None => Err(invalid_state(format!(
                "job {id} cannot be retried: its idempotency key is held by another live or \
                 succeeded job"
            ))),
        }
    }

    fn set_paused(&self, queue: &str, paused: bool, now: i64) -> Result<()> {
        self.execute(
            query(
                "INSERT INTO queues (name, paused, updated_at) VALUES ($1, $2, $3)
                 ON CONFLICT (name) DO UPDATE
                 SET paused = excluded.paused, updated_at = excluded.updated_at",
            )
            .text(queue)
            .int(i64::from(paused))
            .int(now),
        )?;
        Ok(())
    }

    fn paused_queues(&self) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .rows::<TextRow>(query("SELECT name AS v FROM queues WHERE paused = 1"))?
            .into_iter()
            .map(|r| r.v)
            .collect();
        // In byte order, as SQLite sorts, whatever the database's collation.
        names.sort();
        Ok(names)
    }
}
