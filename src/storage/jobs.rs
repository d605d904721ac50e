//! Writes to the `jobs` table: insert (with idempotency keys).

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::Result;
use crate::job::{NewJob, RunAt};

/// Statuses that hold an idempotency key (the unique index's filter).
pub(crate) const KEY_HOLDING_STATUSES: &str = "('queued', 'running', 'failed', 'succeeded')";

/// The outcome of an insert.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Inserted {
    pub(crate) id: i64,
    /// False when an idempotency key matched an existing job and nothing was inserted.
    pub(crate) created: bool,
}

/// Inserts a validated job (payload already as JSON text). A held or remembered idempotency
/// key returns the holder's id instead; the unique index makes this safe against racing
/// writers in other processes.
pub(crate) fn insert(conn: &Connection, job: &NewJob, payload: &str, now: i64) -> Result<Inserted> {
    if let Some(key) = job.idempotency_key.as_deref() {
        if let Some(id) = find_key_holder(conn, key, now)? {
            return Ok(Inserted { id, created: false });
        }
    }
    let run_at = match job.run_at {
        None => now,
        Some(RunAt::At(at)) => at,
        Some(RunAt::After(delay)) => now.saturating_add(delay),
    };
    let mut stmt = conn.prepare_cached(
        "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, created_at,
                           updated_at, timeout_ms, idempotency_key, group_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, ?10)
         ON CONFLICT DO NOTHING",
    )?;
    let changed = stmt.execute(params![
        job.queue,
        job.job_type,
        payload,
        job.priority,
        job.max_attempts,
        run_at,
        now,
        job.timeout_ms,
        job.idempotency_key,
        job.group_key,
    ])?;
    if changed == 1 {
        return Ok(Inserted {
            id: conn.last_insert_rowid(),
            created: true,
        });
    }
    // Only the idempotency index can conflict (ids come from AUTOINCREMENT).
    let key = job.idempotency_key.as_deref().unwrap_or_default();
    let id = find_key_holder(conn, key, now)?.ok_or_else(|| {
        crate::Error::new(
            crate::ErrorKind::Database,
            format!(
                "insert of job type {:?} was ignored by a constraint",
                job.job_type
            ),
        )
    })?;
    Ok(Inserted { id, created: false })
}

/// The job holding `key`: a live or succeeded job, or a remembered key of a pruned job.
pub(crate) fn find_key_holder(conn: &Connection, key: &str, now: i64) -> Result<Option<i64>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT id FROM jobs WHERE idempotency_key = ?1 AND status IN {KEY_HOLDING_STATUSES}"
    ))?;
    if let Some(id) = stmt.query_row([key], |row| row.get(0)).optional()? {
        return Ok(Some(id));
    }
    let mut stmt = conn
        .prepare_cached("SELECT job_id FROM idempotency_keys WHERE key = ?1 AND expires_at > ?2")?;
    Ok(stmt
        .query_row(params![key, now], |row| row.get(0))
        .optional()?)
}
