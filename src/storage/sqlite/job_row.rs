//! The `jobs` row as people and tools read it: the columns selected, and their decoding into
//! a [`JobRecord`] that never fails on what another program wrote.

use rusqlite::Row;

use super::lenient;
use crate::job::{JobRecord, JobStatus};

/// An error column as read: a text over `MAX_ERROR_BYTES` (2 048 bytes; an older version's,
/// another program's) reads as its first 2 000 characters and the length it had, as
/// litejobs would have stored it, on both backends: a page of rows holding megabytes each
/// must not cost their whole size. A macro so that the SQL stays one literal.
macro_rules! error_as_read {
    ($column:literal) => {
        concat!(
            "CASE WHEN length(CAST(",
            $column,
            " AS BLOB)) > 2048 THEN substr(",
            $column,
            ", 1, 2000) || ' [... cut: ' || length(CAST(",
            $column,
            " AS BLOB)) || ' bytes in all]' ELSE ",
            $column,
            " END"
        )
    };
}
pub(crate) use error_as_read;

/// The columns [`job_from_row`] reads, in order: raw, so that what another program wrote
/// can be shown as it is (see [`lenient`]), but for the error ([`error_as_read`]).
pub(crate) const JOB_COLUMNS: &str = concat!(
    "id, queue, job_type, payload, status, priority, attempts, max_attempts, run_at, \
     created_at, updated_at, started_at, finished_at, locked_by, locked_until, ",
    error_as_read!("last_error"),
    ", last_status_code, idempotency_key, group_key, timeout_ms, result, progress, \
     requeued_by, requeued_at, requeue_reason, requeued_as, cancelled_by, cancel_reason, expires_at, \
     workflow_id, step, waiting_for, held_run_at"
);

/// JSON text from the database as a value; text that is not JSON (a row written by hand)
/// is shown as a JSON string rather than hidden.
pub(crate) fn json_column(text: Option<String>) -> Option<serde_json::Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)))
}

/// A stored job, whatever another program put in its columns: values litejobs cannot use are
/// shown safely and listed in [`JobRecord::problems`]; reading never fails on them.
pub(crate) fn job_from_row(row: &Row<'_>) -> rusqlite::Result<JobRecord> {
    let mut problems = Vec::new();
    let p = &mut problems;
    let status_text = lenient::text(row, 4, "status", p)?;
    let status = status_text.parse::<JobStatus>().unwrap_or_else(|_| {
        p.push(format!(
            "column status holds {}, not one of the six status words",
            lenient::describe(rusqlite::types::ValueRef::Text(status_text.as_bytes()))
        ));
        JobStatus::Dead
    });
    let payload = match row.get_ref(3)? {
        rusqlite::types::ValueRef::Text(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => serde_json::from_str(text).unwrap_or_else(|e| {
                p.push(format!("column payload is not valid JSON ({e})"));
                serde_json::Value::String(text.to_string())
            }),
            Err(_) => serde_json::Value::String(lenient::text(row, 3, "payload", p)?),
        },
        _ => serde_json::Value::String(lenient::text(row, 3, "payload", p)?),
    };
    let job = JobRecord {
        id: row.get(0)?,
        queue: lenient::text(row, 1, "queue", p)?,
        job_type: lenient::text(row, 2, "job_type", p)?,
        payload,
        status,
        priority: lenient::int(row, 5, "priority", p)?,
        attempts: lenient::int(row, 6, "attempts", p)?,
        max_attempts: lenient::int(row, 7, "max_attempts", p)?,
        run_at: lenient::int(row, 8, "run_at", p)?,
        created_at: lenient::int(row, 9, "created_at", p)?,
        updated_at: lenient::int(row, 10, "updated_at", p)?,
        started_at: lenient::opt_int(row, 11, "started_at", p)?,
        finished_at: lenient::opt_int(row, 12, "finished_at", p)?,
        locked_by: lenient::opt_text(row, 13, "locked_by", p)?,
        locked_until: lenient::opt_int(row, 14, "locked_until", p)?,
        last_error: lenient::opt_text(row, 15, "last_error", p)?,
        last_status_code: lenient::opt_int(row, 16, "last_status_code", p)?,
        idempotency_key: lenient::opt_text(row, 17, "idempotency_key", p)?,
        group_key: lenient::opt_text(row, 18, "group_key", p)?,
        timeout_ms: lenient::opt_int(row, 19, "timeout_ms", p)?,
        result: json_column(lenient::opt_text(row, 20, "result", p)?),
        progress: json_column(lenient::opt_text(row, 21, "progress", p)?),
        requeued_by: lenient::opt_text(row, 22, "requeued_by", p)?,
        requeued_at: lenient::opt_int(row, 23, "requeued_at", p)?,
        requeue_reason: lenient::opt_text(row, 24, "requeue_reason", p)?,
        requeued_as: lenient::opt_int(row, 25, "requeued_as", p)?,
        cancelled_by: lenient::opt_text(row, 26, "cancelled_by", p)?,
        cancel_reason: lenient::opt_text(row, 27, "cancel_reason", p)?,
        expires_at: lenient::opt_int(row, 28, "expires_at", p)?,
        workflow_id: lenient::opt_int(row, 29, "workflow_id", p)?,
        step: lenient::opt_text(row, 30, "step", p)?,
        waiting_for: lenient::int(row, 31, "waiting_for", p)?,
        encryption_key: None,
        problems,
    };
    // A held job's run_at is a placeholder far in the future: show the time it asked for.
    let mut job = job;
    if job.status == JobStatus::Queued && job.waiting_for > 0 {
        if let Some(asked) = lenient::opt_int(row, 32, "held_run_at", &mut Vec::new())? {
            job.run_at = asked;
        }
    }
    Ok(job)
}
