//! Attempt history rows (`job_attempts`).

use rusqlite::{params, Connection};

use crate::error::Result;

/// One attempt's record, as written by the completer and the reaper.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AttemptRow<'a> {
    pub(crate) job_id: i64,
    pub(crate) attempt: i64,
    pub(crate) worker: &'a str,
    pub(crate) started_at: i64,
    pub(crate) finished_at: i64,
    pub(crate) outcome: &'a str,
    pub(crate) error: Option<&'a str>,
    pub(crate) status_code: Option<i64>,
}

pub(crate) fn insert(conn: &Connection, row: &AttemptRow<'_>) -> Result<()> {
    let mut stmt = conn.prepare_cached(
        "INSERT INTO job_attempts (job_id, attempt, worker, started_at, finished_at, outcome,
                                   error, status_code, duration_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    )?;
    stmt.execute(params![
        row.job_id,
        row.attempt,
        row.worker,
        row.started_at,
        row.finished_at,
        row.outcome,
        row.error,
        row.status_code,
        (row.finished_at - row.started_at).max(0),
    ])?;
    Ok(())
}
