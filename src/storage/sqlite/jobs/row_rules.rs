//! The claimed-row rules on SQLite: the claim's SELECT reads each row's values as they are
//! stored (SQLite stores any type in any column) for [`check_claimed`], and
//! [`RULE_BROKEN_SQL`] names a row's broken rule in SQL, for a claim on a connection whose
//! CHECK rules refuse to move such a row to `running`.

use rusqlite::params;

use crate::error::Result;
use crate::storage::jobs::row_rules::{check_claimed, ClaimedValues, RawValue};
use crate::storage::jobs::{ClaimedRow, Refused};
use crate::storage::sqlite::{lenient, SqliteTx};

/// What the claim's SELECT reads of each job, in [`read_claimed`]'s order; `LEASE` stands
/// for the lease's expression. Not `updated_at`: the claim writes it anew.
pub(super) const CLAIMED_COLUMNS: &str =
    "j.id, j.queue, j.job_type, j.payload, j.priority, j.run_at,
    j.attempts, j.max_attempts, j.timeout_ms, LEASE, j.idempotency_key, j.group_key,
    j.created_at, j.expires_at";

/// Reads a row of the claim's SELECT ([`CLAIMED_COLUMNS`]), whatever its columns hold, and
/// checks it against every rule ([`check_claimed`], which a test holds to
/// [`RULE_BROKEN_SQL`]): the worker claims on a connection with the CHECK rules off, so a
/// row another program wrote with the rules off is caught here, and goes dead without
/// running instead of stopping the queue.
pub(super) fn read_claimed(
    row: &rusqlite::Row<'_>,
    max_payload_bytes: usize,
) -> rusqlite::Result<ClaimedRow> {
    let value = |i: usize| -> rusqlite::Result<RawValue<'_>> { Ok(row.get_ref(i)?.into()) };
    let values = ClaimedValues {
        id: row.get(0)?,
        queue: value(1)?,
        job_type: value(2)?,
        payload: value(3)?,
        priority: value(4)?,
        run_at: value(5)?,
        attempts: value(6)?,
        max_attempts: value(7)?,
        timeout_ms: value(8)?,
        locked_until: value(9)?,
        idempotency_key: value(10)?,
        group_key: value(11)?,
        created_at: value(12)?,
        expires_at: value(13)?,
    };
    Ok(check_claimed(&values, max_payload_bytes))
}

/// Why a live row breaks a schema rule (the CHECK rules of schema.sql, in the same order),
/// or NULL. Shows the raw value as SQL would write it.
pub(super) const RULE_BROKEN_SQL: &str = "CASE
    WHEN typeof(payload) = 'blob' THEN 'column payload holds ' || upper(typeof(payload)) || ' '
        || substr(quote(payload), 1, 64) || ', not JSON text'
    WHEN typeof(queue) = 'blob' OR queue = '' THEN 'column queue holds ' || upper(typeof(queue))
        || ' ' || substr(quote(queue), 1, 64) || ', not a queue name'
    WHEN typeof(job_type) = 'blob' OR job_type = '' THEN 'column job_type holds '
        || upper(typeof(job_type)) || ' ' || substr(quote(job_type), 1, 64) || ', not a job type'
    WHEN typeof(priority) <> 'integer' THEN 'column priority holds ' || upper(typeof(priority))
        || ' ' || substr(quote(priority), 1, 64) || ', not an integer'
    WHEN typeof(attempts) <> 'integer' OR attempts < 0 THEN 'column attempts holds '
        || upper(typeof(attempts)) || ' ' || substr(quote(attempts), 1, 64)
        || ', not an integer of at least 0'
    WHEN typeof(max_attempts) <> 'integer' OR max_attempts < 1 THEN 'column max_attempts holds '
        || upper(typeof(max_attempts)) || ' ' || substr(quote(max_attempts), 1, 64)
        || ', not an integer of at least 1'
    WHEN typeof(created_at) <> 'integer' OR typeof(updated_at) <> 'integer' THEN
        'columns created_at and updated_at hold ' || upper(typeof(created_at)) || ' '
        || substr(quote(created_at), 1, 64) || ' and ' || upper(typeof(updated_at)) || ' '
        || substr(quote(updated_at), 1, 64) || ', not integer milliseconds'
    WHEN typeof(run_at) <> 'integer' THEN 'column run_at holds ' || upper(typeof(run_at)) || ' '
        || substr(quote(run_at), 1, 64) || ', not integer milliseconds since 1970'
    WHEN run_at < created_at / 100 THEN 'column run_at holds ' || run_at
        || ', which looks like seconds, not milliseconds since 1970'
    WHEN run_at >= 100000000000000 THEN 'column run_at holds ' || run_at
        || ', past the year 5000: microseconds or nanoseconds, not milliseconds'
    WHEN timeout_ms IS NOT NULL AND (typeof(timeout_ms) <> 'integer' OR timeout_ms < 1) THEN
        'column timeout_ms holds ' || upper(typeof(timeout_ms)) || ' '
        || substr(quote(timeout_ms), 1, 64) || ', not NULL or a positive integer'
    WHEN typeof(idempotency_key) = 'blob' THEN
        'column idempotency_key holds ' || upper(typeof(idempotency_key)) || ' '
        || substr(quote(idempotency_key), 1, 64) || ', not NULL or text'
    WHEN typeof(group_key) = 'blob' THEN 'column group_key holds '
        || upper(typeof(group_key)) || ' ' || substr(quote(group_key), 1, 64)
        || ', not NULL or text'
    WHEN expires_at IS NOT NULL AND typeof(expires_at) <> 'integer' THEN 'column expires_at holds '
        || upper(typeof(expires_at)) || ' ' || substr(quote(expires_at), 1, 64)
        || ', not NULL or integer milliseconds since 1970'
    WHEN expires_at < created_at / 100 THEN 'column expires_at holds ' || expires_at
        || ', which looks like seconds, not milliseconds since 1970'
    WHEN expires_at >= 100000000000000 THEN 'column expires_at holds ' || expires_at
        || ', past the year 5000: microseconds or nanoseconds, not milliseconds'
END";

impl SqliteTx<'_> {
    /// Makes every waiting row of `queue` that breaks a schema rule dead, with an error naming
    /// the job, the column and what it held. Only runs after a claim failed on such a row: it
    /// reads every waiting row of the queue.
    pub(super) fn refuse_rule_breakers(&self, queue: &str, now: i64) -> Result<Vec<Refused>> {
        self.count_jobs_where(
            "'dead'",
            1,
            &format!(
                "queue = ?1 AND status IN ('queued', 'failed') AND ({RULE_BROKEN_SQL}) IS NOT NULL"
            ),
            &queue,
        )?;
        let sql = format!(
            "UPDATE jobs SET status = 'dead', finished_at = ?1, updated_at = ?1, locked_by = NULL,
                    locked_until = NULL,
                    last_error = 'job ' || id || ': ' || ({RULE_BROKEN_SQL}) || '; dead without running'
             WHERE queue = ?2 AND status IN ('queued', 'failed') AND ({RULE_BROKEN_SQL}) IS NOT NULL
             RETURNING id, job_type, attempts, last_error, queue"
        );
        let mut stmt = self.conn.prepare(&sql)?;
        let refused = stmt
            .query_map(params![now, queue], |row| {
                let mut ignored = Vec::new();
                Ok(Refused {
                    id: row.get(0)?,
                    job_type: lenient::text(row, 1, "job_type", &mut ignored)?,
                    attempts: lenient::int(row, 2, "attempts", &mut ignored)?,
                    error: lenient::text(row, 3, "last_error", &mut ignored)?,
                    queue: lenient::text(row, 4, "queue", &mut ignored)?,
                })
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        self.group_refused_errors(&refused)?;
        for r in &refused {
            log::warn!("litejobs: {}", r.error);
        }
        Ok(refused)
    }
}
