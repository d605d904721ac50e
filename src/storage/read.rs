//! Reads for people and tools: one job, its attempts, filtered lists, stats.

use rusqlite::types::Value as SqlValue;
use rusqlite::{params, params_from_iter, Connection, OptionalExtension, Row};

use crate::admin::{JobFilter, Stats, StatusCount};
use crate::error::Result;
use crate::job::{AttemptRecord, JobRecord, JobStatus};

/// The columns [`job_from_row`] reads, in order.
/// Times are cast to integers: another program may have written a fractional time (e.g.
/// Python's `time.time() * 1000`), which SQLite keeps as REAL.
pub(crate) const JOB_COLUMNS: &str = "id, queue, job_type, payload, status, priority, attempts, \
     max_attempts, CAST(run_at AS INTEGER), CAST(created_at AS INTEGER), \
     CAST(updated_at AS INTEGER), CAST(started_at AS INTEGER), CAST(finished_at AS INTEGER), \
     locked_by, CAST(locked_until AS INTEGER), last_error, last_status_code, idempotency_key, \
     group_key, timeout_ms, result, progress, requeued_by, requeued_at, requeue_reason, \
     requeued_as";

/// JSON text from the database as a value; text that is not JSON (a row written by hand)
/// is shown as a JSON string rather than hidden.
pub(crate) fn json_column(text: Option<String>) -> Option<serde_json::Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)))
}

pub(crate) fn job_from_row(row: &Row<'_>) -> rusqlite::Result<JobRecord> {
    let status: String = row.get(4)?;
    let status = status.parse::<JobStatus>().map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(4, rusqlite::types::Type::Text, Box::new(e))
    })?;
    Ok(JobRecord {
        id: row.get(0)?,
        queue: row.get(1)?,
        job_type: row.get(2)?,
        payload: json_column(row.get(3)?).unwrap_or(serde_json::Value::Null),
        status,
        priority: row.get(5)?,
        attempts: row.get(6)?,
        max_attempts: row.get(7)?,
        run_at: row.get(8)?,
        created_at: row.get(9)?,
        updated_at: row.get(10)?,
        started_at: row.get(11)?,
        finished_at: row.get(12)?,
        locked_by: row.get(13)?,
        locked_until: row.get(14)?,
        last_error: row.get(15)?,
        last_status_code: row.get(16)?,
        idempotency_key: row.get(17)?,
        group_key: row.get(18)?,
        timeout_ms: row.get(19)?,
        result: json_column(row.get(20)?),
        progress: json_column(row.get(21)?),
        requeued_by: row.get(22)?,
        requeued_at: row.get(23)?,
        requeue_reason: row.get(24)?,
        requeued_as: row.get(25)?,
    })
}

/// One job by id.
pub(crate) fn job(conn: &Connection, id: i64) -> Result<Option<JobRecord>> {
    let mut stmt = conn.prepare_cached(&format!("SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?1"))?;
    Ok(stmt.query_row([id], job_from_row).optional()?)
}

/// A job's attempt history, oldest first.
pub(crate) fn attempts(conn: &Connection, job_id: i64) -> Result<Vec<AttemptRecord>> {
    let mut stmt = conn.prepare_cached(
        "SELECT job_id, attempt, worker, started_at, finished_at, outcome, error, status_code,
                duration_ms
         FROM job_attempts WHERE job_id = ?1 ORDER BY attempt, id",
    )?;
    let rows = stmt.query_map([job_id], |row| {
        Ok(AttemptRecord {
            job_id: row.get(0)?,
            attempt: row.get(1)?,
            worker: row.get(2)?,
            started_at: row.get(3)?,
            finished_at: row.get(4)?,
            outcome: row.get(5)?,
            error: row.get(6)?,
            status_code: row.get(7)?,
            duration_ms: row.get(8)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Jobs matching a filter, newest first.
pub(crate) fn list(conn: &Connection, filter: &JobFilter) -> Result<Vec<JobRecord>> {
    let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs WHERE 1 = 1");
    let mut args: Vec<SqlValue> = Vec::new();
    let mut bind = |sql: &mut String, clause: &str, value: SqlValue| {
        args.push(value);
        sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
    };
    if let Some(status) = filter.status {
        bind(
            &mut sql,
            " AND status = ?",
            SqlValue::Text(status.as_str().into()),
        );
    }
    if let Some(job_type) = &filter.job_type {
        bind(
            &mut sql,
            " AND job_type = ?",
            SqlValue::Text(job_type.clone()),
        );
    }
    if let Some(queue) = &filter.queue {
        bind(&mut sql, " AND queue = ?", SqlValue::Text(queue.clone()));
    }
    if let Some(search) = &filter.search {
        bind(
            &mut sql,
            " AND instr(lower(last_error), lower(?)) > 0",
            SqlValue::Text(search.clone()),
        );
    }
    if let Some(before) = filter.before_id {
        bind(&mut sql, " AND id < ?", SqlValue::Integer(before));
    }
    bind(
        &mut sql,
        " ORDER BY id DESC LIMIT ?",
        SqlValue::Integer(filter.limit as i64),
    );
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params_from_iter(args), job_from_row)?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Counts by queue, type and status; the oldest due job's age; dead jobs of the last hour.
pub(crate) fn stats(conn: &Connection, now: i64) -> Result<Stats> {
    let mut stmt = conn.prepare_cached(
        "SELECT queue, job_type, status, COUNT(*) FROM jobs
         GROUP BY queue, job_type, status ORDER BY queue, job_type, status",
    )?;
    let counts = stmt
        .query_map([], |row| {
            let status: String = row.get(2)?;
            Ok((row.get(0)?, row.get(1)?, status, row.get(3)?))
        })?
        .collect::<rusqlite::Result<Vec<(String, String, String, i64)>>>()?
        .into_iter()
        .filter_map(|(queue, job_type, status, count)| {
            let status = status.parse().ok()?;
            Some(StatusCount {
                queue,
                job_type,
                status,
                count,
            })
        })
        .collect();
    let oldest_due: Option<i64> = conn
        .prepare_cached(
            "SELECT CAST(MIN(run_at) AS INTEGER) FROM jobs WHERE status IN ('queued', 'failed') AND run_at <= ?1",
        )?
        .query_row([now], |row| row.get(0))?;
    let dead_last_hour: i64 = conn
        .prepare_cached("SELECT COUNT(*) FROM jobs WHERE status = 'dead' AND finished_at >= ?1")?
        .query_row(params![now - 3_600_000], |row| row.get(0))?;
    Ok(Stats {
        counts,
        oldest_due_age_ms: oldest_due.map(|at| (now - at).max(0)),
        dead_last_hour,
    })
}
