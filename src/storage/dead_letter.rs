//! Dead-letter writes: requeue a dead job as a new one (R8).

use rusqlite::{params, Connection, OptionalExtension};

use crate::error::{Error, ErrorKind, Result};
use crate::storage::read;

/// Creates a new job from dead job `id` (same type, payload and options, due now) and marks
/// the dead one with who requeued it, when, why and the new id. Returns the new id.
pub(crate) fn requeue(conn: &Connection, id: i64, by: &str, reason: &str, now: i64) -> Result<i64> {
    let row: Option<(String, Option<i64>)> = conn
        .prepare_cached("SELECT status, requeued_as FROM jobs WHERE id = ?1")?
        .query_row([id], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let (status, requeued_as) = row.ok_or_else(|| Error::not_found("job", id))?;
    if status != "dead" {
        return Err(Error::new(
            ErrorKind::InvalidState,
            format!("job {id} is {status}, not dead; only dead jobs can be requeued"),
        ));
    }
    if let Some(new_id) = requeued_as {
        return Err(Error::new(
            ErrorKind::InvalidState,
            format!("job {id} was already requeued as job {new_id}"),
        ));
    }
    read::refuse_unusable(conn, id, "requeued")?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO jobs (queue, job_type, payload, priority, max_attempts, run_at, created_at,
                               updated_at, timeout_ms, idempotency_key, group_key)
             SELECT queue, job_type, payload, priority, max_attempts, ?1, ?1, ?1, timeout_ms,
                    idempotency_key, group_key
             FROM jobs WHERE id = ?2",
        )?
        .execute(params![now, id]);
    match inserted {
        Ok(_) => {}
        Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) => {
            return Err(Error::new(
                ErrorKind::InvalidState,
                format!(
                    "job {id} cannot be requeued: its idempotency key is held by another live or \
                     succeeded job"
                ),
            ))
        }
        Err(e) => return Err(e.into()),
    }
    let new_id = conn.last_insert_rowid();
    conn.prepare_cached(
        "UPDATE jobs SET requeued_by = ?1, requeued_at = ?2, requeue_reason = ?3, requeued_as = ?4,
                         updated_at = ?2
         WHERE id = ?5",
    )?
    .execute(params![by, now, reason, new_id, id])?;
    Ok(new_id)
}
