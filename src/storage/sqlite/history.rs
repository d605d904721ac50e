//! Attempt history rows (`job_attempts`).

use rusqlite::{params, Connection};

use crate::error::Result;
use crate::storage::jobs::AttemptRow;

/// Appends one attempt row.
pub(super) fn insert(conn: &Connection, row: &AttemptRow<'_>) -> Result<()> {
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
        row.outcome.as_str(),
        row.error,
        row.status_code,
        (row.finished_at - row.started_at).max(0),
    ])?;
    Ok(())
}
