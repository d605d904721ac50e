//! The `jobs` row as people and tools read it: the columns selected, and their decoding into
//! a [`JobRecord`] that never fails on what another program wrote.

use diesel::sql_types::{BigInt, Nullable, Text};
use diesel::QueryableByName;

use crate::job::{JobRecord, JobStatus};

/// An error column as read, as the SQLite backend reads it (see its `error_as_read`): a text
/// over `MAX_ERROR_BYTES` (2 048 bytes) reads as its first 2 000 characters and the length
/// it had. A macro so that the SQL stays one literal.
macro_rules! error_as_read {
    ($column:literal) => {
        concat!(
            "CASE WHEN octet_length(",
            $column,
            ") > 2048 THEN left(",
            $column,
            ", 2000) || ' [... cut: ' || octet_length(",
            $column,
            ") || ' bytes in all]' ELSE ",
            $column,
            " END AS ",
            $column
        )
    };
}
pub(crate) use error_as_read;

/// The columns [`JobRow`] reads.
pub(crate) const JOB_COLUMNS: &str = concat!(
    "id, queue, job_type, payload, status, priority, attempts, max_attempts, run_at, \
     created_at, updated_at, started_at, finished_at, locked_by, locked_until, ",
    error_as_read!("last_error"),
    ", last_status_code, idempotency_key, group_key, timeout_ms, result, progress, \
     requeued_by, requeued_at, requeue_reason, requeued_as, cancelled_by, cancel_reason, expires_at, \
     CAST(workflow_id AS BIGINT) AS workflow_id, step, CAST(waiting_for AS BIGINT) AS waiting_for, \
     CAST(held_run_at AS BIGINT) AS held_run_at"
);

/// One `jobs` row as [`JOB_COLUMNS`] selects it.
#[derive(QueryableByName, Debug)]
pub(crate) struct JobRow {
    #[diesel(sql_type = BigInt)]
    id: i64,
    #[diesel(sql_type = Text)]
    queue: String,
    #[diesel(sql_type = Text)]
    job_type: String,
    #[diesel(sql_type = Text)]
    payload: String,
    #[diesel(sql_type = Text)]
    status: String,
    #[diesel(sql_type = BigInt)]
    priority: i64,
    #[diesel(sql_type = BigInt)]
    attempts: i64,
    #[diesel(sql_type = BigInt)]
    max_attempts: i64,
    #[diesel(sql_type = BigInt)]
    run_at: i64,
    #[diesel(sql_type = BigInt)]
    created_at: i64,
    #[diesel(sql_type = BigInt)]
    updated_at: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    started_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    finished_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    locked_by: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    locked_until: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    last_error: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    last_status_code: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    idempotency_key: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    group_key: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    timeout_ms: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    result: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    progress: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    requeued_by: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    requeued_at: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    requeue_reason: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    requeued_as: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    cancelled_by: Option<String>,
    #[diesel(sql_type = Nullable<Text>)]
    cancel_reason: Option<String>,
    #[diesel(sql_type = Nullable<BigInt>)]
    expires_at: Option<i64>,
    #[diesel(sql_type = Nullable<BigInt>)]
    workflow_id: Option<i64>,
    #[diesel(sql_type = Nullable<Text>)]
    step: Option<String>,
    #[diesel(sql_type = BigInt)]
    waiting_for: i64,
    #[diesel(sql_type = Nullable<BigInt>)]
    held_run_at: Option<i64>,
}

/// JSON text from the database as a value; text that is not JSON (a row written by hand)
/// is shown as a JSON string rather than hidden.
fn json_column(text: Option<String>) -> Option<serde_json::Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(serde_json::Value::String(t)))
}

impl JobRow {
    /// The record, with what another program wrote that litejobs cannot use listed in its
    /// problems (as on SQLite: reading never fails on it).
    pub(crate) fn into_record(self) -> JobRecord {
        let mut problems = Vec::new();
        let status = self.status.parse::<JobStatus>().unwrap_or_else(|_| {
            problems.push(format!(
                "column status holds TEXT '{}', not one of the six status words",
                self.status.escape_default()
            ));
            JobStatus::Dead
        });
        let payload = serde_json::from_str(&self.payload).unwrap_or_else(|e| {
            problems.push(format!("column payload is not valid JSON ({e})"));
            serde_json::Value::String(self.payload.clone())
        });
        JobRecord {
            id: self.id,
            queue: self.queue,
            job_type: self.job_type,
            payload,
            status,
            priority: self.priority,
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            // A held job's run_at is a placeholder far in the future: show the time it
            // asked for.
            run_at: match (status, self.waiting_for > 0, self.held_run_at) {
                (JobStatus::Queued, true, Some(asked)) => asked,
                _ => self.run_at,
            },
            created_at: self.created_at,
            updated_at: self.updated_at,
            started_at: self.started_at,
            finished_at: self.finished_at,
            locked_by: self.locked_by,
            locked_until: self.locked_until,
            last_error: self.last_error,
            last_status_code: self.last_status_code,
            idempotency_key: self.idempotency_key,
            group_key: self.group_key,
            timeout_ms: self.timeout_ms,
            result: json_column(self.result),
            progress: json_column(self.progress),
            requeued_by: self.requeued_by,
            requeued_at: self.requeued_at,
            requeue_reason: self.requeue_reason,
            requeued_as: self.requeued_as,
            cancelled_by: self.cancelled_by,
            cancel_reason: self.cancel_reason,
            expires_at: self.expires_at,
            workflow_id: self.workflow_id,
            step: self.step,
            waiting_for: self.waiting_for,
            encryption_key: None,
            problems,
        }
    }
}
