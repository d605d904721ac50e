//! SQL for people and tools acting on jobs: cancel, retry now, pause/resume a queue, discard
//! and bulk-requeue dead jobs, group errors, health figures, metrics figures, retention.

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, ErrorCode, OptionalExtension};

use crate::admin::{ErrorGroup, JobFilter};
use crate::error::{Error, ErrorKind, Result};
use crate::job::JobRecord;
use crate::storage::lenient;
use crate::storage::read::{job_from_row, JOB_COLUMNS};

/// Attempt outcomes that count as failures in rates and error figures.
const FAILED_OUTCOMES: &str = "('failed', 'timed_out', 'lost')";

/// A job's status and `requeued_as`, or `NotFound`.
fn status_of(conn: &Connection, id: i64) -> Result<(String, Option<i64>)> {
    conn.prepare_cached("SELECT status, requeued_as FROM jobs WHERE id = ?1")?
        .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?
        .ok_or_else(|| Error::not_found("job", id))
}

fn invalid_state(message: String) -> Error {
    Error::new(ErrorKind::InvalidState, message)
}

/// Cancels a waiting (queued or failed) job. A running job is refused: its handler is not
/// interrupted, and a cancel that only took effect later would be a surprise.
pub(crate) fn cancel(conn: &Connection, id: i64, now: i64) -> Result<()> {
    let (status, _) = status_of(conn, id)?;
    match status.as_str() {
        "queued" | "failed" => {}
        "running" => {
            return Err(invalid_state(format!(
                "job {id} is running; a running job cannot be cancelled from outside (its \
                 handler can return JobError::cancel), try again once it has finished"
            )))
        }
        other => {
            return Err(invalid_state(format!(
                "job {id} is {other}; only queued or failed jobs can be cancelled"
            )))
        }
    }
    conn.prepare_cached(
        "UPDATE jobs SET status = 'cancelled', finished_at = ?1, updated_at = ?1
         WHERE id = ?2 AND status IN ('queued', 'failed')",
    )?
    .execute(params![now, id])?;
    Ok(())
}

/// Makes a waiting job due now; a dead job gets one more attempt (see `Queue::retry_now`).
pub(crate) fn retry_now(conn: &Connection, id: i64, now: i64) -> Result<()> {
    let (status, requeued_as) = status_of(conn, id)?;
    let sql = match status.as_str() {
        "queued" | "failed" => "UPDATE jobs SET run_at = ?1, updated_at = ?1 WHERE id = ?2",
        "dead" => {
            if let Some(new_id) = requeued_as {
                return Err(invalid_state(format!(
                    "job {id} was already requeued as job {new_id}; retry that one instead"
                )));
            }
            crate::storage::read::refuse_unusable(conn, id, "retried")?;
            "UPDATE jobs SET status = 'failed', run_at = ?1, updated_at = ?1, finished_at = NULL,
                    max_attempts = attempts + 1
             WHERE id = ?2"
        }
        other => {
            return Err(invalid_state(format!(
                "job {id} is {other}; only queued, failed or dead jobs can be retried"
            )))
        }
    };
    match conn.prepare_cached(sql)?.execute(params![now, id]) {
        Ok(_) => Ok(()),
        Err(e) if e.sqlite_error_code() == Some(ErrorCode::ConstraintViolation) => {
            Err(invalid_state(format!(
                "job {id} cannot be retried: its idempotency key is held by another live or \
                 succeeded job"
            )))
        }
        Err(e) => Err(e.into()),
    }
}

/// Sets a queue's paused switch (creating its row on first use).
pub(crate) fn set_paused(conn: &Connection, queue: &str, paused: bool, now: i64) -> Result<()> {
    conn.prepare_cached(
        "INSERT INTO queues (name, paused, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (name) DO UPDATE SET paused = excluded.paused, updated_at = excluded.updated_at",
    )?
    .execute(params![queue, paused, now])?;
    Ok(())
}

/// Names of the paused queues, sorted.
pub(crate) fn paused_queues(conn: &Connection) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached("SELECT name FROM queues WHERE paused = 1 ORDER BY name")?;
    let rows = stmt.query_map([], |row| row.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deletes a dead job and its attempt history.
pub(crate) fn discard_dead(conn: &Connection, id: i64) -> Result<()> {
    let (status, _) = status_of(conn, id)?;
    if status != "dead" {
        return Err(invalid_state(format!(
            "job {id} is {status}, not dead; only dead jobs can be discarded"
        )));
    }
    // Explicit rather than through ON DELETE CASCADE, which only works on connections that
    // turned foreign keys on.
    conn.prepare_cached("DELETE FROM job_attempts WHERE job_id = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM jobs WHERE id = ?1 AND status = 'dead'")?
        .execute([id])?;
    Ok(())
}

/// The `WHERE` of dead jobs that nobody has requeued yet, narrowed by a filter's type,
/// queue and search text. Returns the clause and its arguments (numbered from 1).
fn awaiting_dead_clause(filter: &JobFilter) -> (String, Vec<SqlValue>) {
    let mut sql = String::from("status = 'dead' AND requeued_as IS NULL");
    let mut args: Vec<SqlValue> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: SqlValue| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
    };
    if let Some(job_type) = &filter.job_type {
        bind(&mut sql, " AND job_type = ?", job_type.clone().into());
    }
    if let Some(queue) = &filter.queue {
        bind(&mut sql, " AND queue = ?", queue.clone().into());
    }
    if let Some(search) = &filter.search {
        bind(
            &mut sql,
            " AND instr(lower(last_error), lower(?)) > 0",
            search.clone().into(),
        );
    }
    if let Some(before) = filter.before_id {
        bind(&mut sql, " AND id < ?", before.into());
    }
    (sql, args)
}

/// Dead jobs awaiting a person (not requeued), newest first, up to the filter's limit.
pub(crate) fn dead_awaiting(conn: &Connection, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    let (clause, mut args) = awaiting_dead_clause(filter);
    args.push(SqlValue::Integer(
        i64::try_from(filter.limit).unwrap_or(i64::MAX),
    ));
    let sql = format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE {clause} ORDER BY id DESC LIMIT ?{}",
        args.len()
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), job_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Requeues every dead job of `job_type` (not yet requeued) whose last error contains
/// `search`, oldest first, inside the caller's transaction: one refusal fails them all.
pub(crate) fn requeue_dead_matching(
    conn: &Connection,
    job_type: &str,
    search: Option<&str>,
    by: &str,
    reason: &str,
    now: i64,
) -> Result<Vec<(i64, i64)>> {
    let mut filter = JobFilter::new().job_type(job_type);
    filter.search = search.map(str::to_string);
    let (clause, args) = awaiting_dead_clause(&filter);
    let ids: Vec<i64> = conn
        .prepare(&format!("SELECT id FROM jobs WHERE {clause} ORDER BY id"))?
        .query_map(params_from_iter(args), |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    ids.into_iter()
        .map(|id| {
            let new_id = crate::storage::dead_letter::requeue(conn, id, by, reason, now)
                .map_err(|e| e.prefixed("bulk requeue refused, nothing was requeued"))?;
            Ok((id, new_id))
        })
        .collect()
}

/// The most common last errors among failed and dead jobs (requeued dead jobs left out).
pub(crate) fn error_groups(conn: &Connection, limit: usize) -> Result<Vec<ErrorGroup>> {
    let mut stmt = conn.prepare_cached(
        "SELECT last_error, COUNT(*), SUM(status = 'failed'), SUM(status = 'dead'),
                json_group_array(DISTINCT CAST(job_type AS TEXT)),
                CAST(MIN(COALESCE((SELECT MIN(a.finished_at) FROM job_attempts a
                                   WHERE a.job_id = jobs.id AND a.error = jobs.last_error),
                                  updated_at)) AS INTEGER),
                CAST(MAX(updated_at) AS INTEGER)
         FROM jobs
         WHERE status IN ('failed', 'dead') AND requeued_as IS NULL AND last_error IS NOT NULL
         GROUP BY last_error
         ORDER BY COUNT(*) DESC, MAX(updated_at) DESC
         LIMIT ?1",
    )?;
    let rows = stmt.query_map([i64::try_from(limit).unwrap_or(i64::MAX)], |row| {
        let types = lenient::label(row, 4)?;
        Ok((
            lenient::label(row, 0)?,
            row.get::<_, i64>(1)?,
            row.get::<_, i64>(2)?,
            row.get::<_, i64>(3)?,
            types,
            row.get::<_, i64>(5)?,
            row.get::<_, i64>(6)?,
        ))
    })?;
    let mut groups = Vec::new();
    for row in rows {
        let (error, count, failed, dead, types, first_seen_at, last_seen_at) = row?;
        let mut job_types: Vec<String> = serde_json::from_str(&types).unwrap_or_default();
        job_types.sort();
        groups.push(ErrorGroup {
            error,
            count,
            failed,
            dead,
            job_types,
            first_seen_at,
            last_seen_at,
        });
    }
    Ok(groups)
}

/// Figures for health checks, read in one snapshot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HealthRow {
    pub(crate) due_now: i64,
    pub(crate) scheduled: i64,
    pub(crate) running: i64,
    pub(crate) oldest_due_run_at: Option<i64>,
    pub(crate) dead_awaiting: i64,
    pub(crate) dead_last_hour: i64,
    pub(crate) failed_attempts: i64,
    pub(crate) succeeded: i64,
}

/// Waiting and dead counts now, the oldest due run time, dead jobs of the last hour; failed
/// attempts and successes since `since`.
pub(crate) fn health(conn: &Connection, now: i64, since: i64) -> Result<HealthRow> {
    let sql = format!(
        "SELECT
            (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= ?1),
            (SELECT COUNT(*) FROM jobs WHERE status IN ('queued', 'failed') AND run_at > ?1),
            (SELECT COUNT(*) FROM jobs WHERE status = 'running'),
            (SELECT CAST(MIN(run_at) AS INTEGER) FROM jobs
             WHERE status IN ('queued', 'failed') AND run_at <= ?1),
            (SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND requeued_as IS NULL),
            (SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND finished_at >= ?1 - 3600000),
            (SELECT COUNT(*) FROM job_attempts WHERE finished_at >= ?2
                                                 AND outcome IN {FAILED_OUTCOMES}),
            (SELECT COUNT(*) FROM jobs WHERE status = 'succeeded' AND updated_at >= ?2)"
    );
    Ok(conn
        .prepare_cached(&sql)?
        .query_row(params![now, since], |row| {
            Ok(HealthRow {
                due_now: row.get(0)?,
                scheduled: row.get(1)?,
                running: row.get(2)?,
                oldest_due_run_at: row.get(3)?,
                dead_awaiting: row.get(4)?,
                dead_last_hour: row.get(5)?,
                failed_attempts: row.get(6)?,
                succeeded: row.get(7)?,
            })
        })?)
}

/// The oldest due job's run time per queue (only queues with due jobs).
pub(crate) fn oldest_due_by_queue(conn: &Connection, now: i64) -> Result<Vec<(String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT queue, CAST(MIN(run_at) AS INTEGER) FROM jobs
         WHERE status IN ('queued', 'failed') AND run_at <= ?1
         GROUP BY queue ORDER BY queue",
    )?;
    let rows = stmt.query_map([now], |row| Ok((lenient::label(row, 0)?, row.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Attempt outcomes by job type: history rows, plus one success per succeeded job (a
/// first-try success has no history row; a later success has one, counted once here).
pub(crate) fn attempt_outcomes(conn: &Connection) -> Result<Vec<(String, String, i64)>> {
    let mut stmt = conn.prepare_cached(
        "SELECT j.job_type, a.outcome, COUNT(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
         WHERE a.outcome != 'succeeded' GROUP BY j.job_type, a.outcome
         UNION ALL
         SELECT job_type, 'succeeded', COUNT(*) FROM jobs WHERE status = 'succeeded'
         GROUP BY job_type
         ORDER BY 1, 2",
    )?;
    let rows = stmt.query_map([], |row| {
        Ok((lenient::label(row, 0)?, row.get(1)?, row.get(2)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Ids of at most `limit` succeeded or cancelled jobs last changed before `cutoff`.
pub(crate) fn prunable_jobs(conn: &Connection, cutoff: i64, limit: usize) -> Result<Vec<i64>> {
    // (status, updated_at) is indexed; for a finished job updated_at is its finish time.
    let mut stmt = conn.prepare_cached(
        "SELECT id FROM jobs WHERE status IN ('succeeded', 'cancelled') AND updated_at < ?1
         LIMIT CAST(?2 AS INTEGER)",
    )?;
    let rows = stmt.query_map(
        params![cutoff, i64::try_from(limit).unwrap_or(i64::MAX)],
        |row| row.get(0),
    )?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Deletes these jobs (if still succeeded or cancelled) and their attempts. Returns
/// (jobs, attempts) deleted.
pub(crate) fn delete_finished(conn: &Connection, ids: &[i64]) -> Result<(u64, u64)> {
    let list = serde_json::to_string(ids)
        .map_err(|e| Error::new(ErrorKind::Database, format!("id list: {e}")))?;
    let attempts = conn
        .prepare_cached(
            "DELETE FROM job_attempts WHERE job_id IN (
                SELECT j.id FROM jobs j WHERE j.id IN (SELECT value FROM json_each(?1))
                  AND j.status IN ('succeeded', 'cancelled'))",
        )?
        .execute([&list])?;
    let jobs = conn
        .prepare_cached(
            "DELETE FROM jobs WHERE id IN (SELECT value FROM json_each(?1))
               AND status IN ('succeeded', 'cancelled')",
        )?
        .execute([&list])?;
    Ok((jobs as u64, attempts as u64))
}

/// Forgets at most `limit` remembered idempotency keys that expired by `now` or completed
/// before `completed_before`. Returns how many.
pub(crate) fn delete_keys(
    conn: &Connection,
    now: i64,
    completed_before: Option<i64>,
    limit: usize,
) -> Result<u64> {
    let n = conn
        .prepare_cached(
            "DELETE FROM idempotency_keys WHERE key IN (
                SELECT key FROM idempotency_keys
                WHERE expires_at <= ?1 OR completed_at < ?2
                LIMIT CAST(?3 AS INTEGER))",
        )?
        .execute(params![
            now,
            completed_before.unwrap_or(i64::MIN),
            i64::try_from(limit).unwrap_or(i64::MAX)
        ])?;
    Ok(n as u64)
}

/// `PRAGMA wal_checkpoint(mode)`: (busy, WAL frames, frames checkpointed). Must run outside
/// a transaction.
pub(crate) fn wal_checkpoint(conn: &Connection, mode: &str) -> Result<(bool, i64, i64)> {
    let sql = format!("PRAGMA wal_checkpoint({mode})");
    Ok(conn.query_row(&sql, [], |row| {
        Ok((row.get::<_, i64>(0)? != 0, row.get(1)?, row.get(2)?))
    })?)
}
