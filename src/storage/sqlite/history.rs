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
    // litejobs' connections keep the attempt counts in code (triggers are off for them).
    conn.prepare_cached(
        "INSERT INTO attempt_counts (job_type, outcome, n)
         SELECT job_type, ?2, 1 FROM jobs WHERE id = ?1
         ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + 1",
    )?
    .execute(params![row.job_id, row.outcome.as_str()])?;
    Ok(())
}

/// Takes the attempts of the jobs `job_ids_sql` selects (a `SELECT id ...` with parameter
/// ?1) off the attempt counts, before they are deleted.
pub(super) fn uncount_attempts_of(
    conn: &Connection,
    job_ids_sql: &str,
    arg: &dyn rusqlite::ToSql,
) -> Result<()> {
    conn.prepare_cached(&format!(
        "INSERT INTO attempt_counts (job_type, outcome, n)
         SELECT j.job_type, a.outcome, -COUNT(*) FROM job_attempts a JOIN jobs j ON j.id = a.job_id
         WHERE a.job_id IN ({job_ids_sql})
         GROUP BY j.job_type, a.outcome
         ON CONFLICT (job_type, outcome) DO UPDATE SET n = n + excluded.n"
    ))?
    .execute([arg])?;
    Ok(())
}
